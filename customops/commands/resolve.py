"""customops resolve: predict what ld.so will load, bind and reject for a sequence of loads."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from customops.errors import CustomopsError
from customops.triton.serverargs import SERVER, SERVER_CWD, STAND_IN_HOSTS

if TYPE_CHECKING:
    from customops.linker.target import LinkerTarget
    from customops.linker.types import Dlopen

FLAG_WORDS = {"now", "lazy", "local", "global", "deepbind"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "resolve", help="predict what the dynamic linker will load, bind and reject",
        description="Simulate a process: the host executable starts (with LD_PRELOAD), then each --dlopen runs "
                    "in order. Prints the load order, every search path tried, unresolved symbols, version "
                    "failures and interpositions. Exit 0 when every step loads, 1 when one will fail.",
    )
    p.add_argument("--root", default="/", help="target filesystem root (a container's unpacked root); default /")
    p.add_argument("--host", nargs="+", metavar="EXE|LIB",
                   help="the host executable, then libraries it has already loaded (RTLD_GLOBAL), "
                        f"e.g. a python that imported torch; default: the target's {SERVER}, as in a Triton "
                        "container, else /usr/bin/true")
    p.add_argument("--preload", action="append", default=[], metavar="LIB", help="an LD_PRELOAD entry (repeatable)")
    p.add_argument("--dlopen", action="append", default=[], metavar="LIB[:FLAGS]",
                   help="dlopen LIB; FLAGS is a comma list of now|lazy, local|global, deepbind (default now,local, "
                        "as Triton and every framework backend use)")
    p.add_argument("--library-path", metavar="PATH", help="LD_LIBRARY_PATH of the process")
    p.add_argument("--bind-now", action="store_true", help="LD_BIND_NOW=1")
    p.add_argument("--dynamic-weak", action="store_true", help="LD_DYNAMIC_WEAK=1")
    p.add_argument("--cwd", default=None, help="the process's working directory, for relative paths (default: "
                   "/opt/tritonserver when the host is tritonserver, as in the NGC images; else /)")
    p.add_argument("--mount", action="append", default=[], metavar="HOST_DIR:CONTAINER_DIR",
                   help="where a directory of this machine appears in the target, as docker -v (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people, json for scripts (default: text)")
    p.add_argument("--tree-only", action="store_true",
                   help="load, search and check symbol versions, but bind no symbol (what libtree and lddtree "
                        "do; several times faster on framework libraries): undefined symbols and interpositions "
                        "are not reported")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the parse cache")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="parse cache directory (default: $XDG_CACHE_HOME/customops)")
    p.set_defaults(run=run)


def parse_dlopen(value: str, target_path: Callable[[str], str]) -> Dlopen:
    from customops.linker.types import Dlopen

    path, flags = value, set()
    if ":" in value:
        head, tail = value.rsplit(":", 1)
        words = {w for w in tail.split(",") if w}
        if words and words <= FLAG_WORDS:
            path, flags = head, words
    if {"now", "lazy"} <= flags or {"local", "global"} <= flags:
        raise CustomopsError(f"--dlopen {value}: contradictory flags")
    return Dlopen(target_path(path), lazy="lazy" in flags, make_global="global" in flags, deepbind="deepbind" in flags)


def run(args: argparse.Namespace) -> int:
    from customops.elf.cache import ElfReader
    from customops.linker.process import Linker
    from customops.linker.target import target_for_root
    from customops.linker.types import Dlopen, Environment, Scenario
    from customops.report.escape import dumps
    from customops.report.resolve import prediction_record, render_prediction
    from customops.triton.mounts import parse_mount

    target = target_for_root(args.root).with_mounts(tuple(parse_mount(m) for m in args.mount))
    host, notes = _host(args.host, target)
    # the server starts in its image's working directory (the NGC images' WORKDIR), a program in / by default
    cwd = args.cwd or (os.getcwd() if target.is_live else SERVER_CWD if host[0] == SERVER else "/")

    def target_path(path: str) -> str:
        """Command-line paths are paths inside the target; a path under --root is accepted too."""
        if not target.is_live and path.startswith(target.root.rstrip("/") + "/"):
            return path[len(target.root.rstrip("/")):]
        if "/" in path and not path.startswith("/"):
            return os.path.normpath(os.path.join(cwd, path))
        return path

    executable = target_path(host[0])
    if target.host_path(executable) is None:
        raise CustomopsError(f"{host[0]}: host executable not found in the target (use --host)")
    steps = [Dlopen(target_path(lib), make_global=True, label="host") for lib in host[1:]]
    steps += [parse_dlopen(value, target_path) for value in args.dlopen]
    preload = " ".join(target_path(p) for p in args.preload) or None
    environment = Environment(library_path=args.library_path, preload=preload, bind_now=args.bind_now,
                              dynamic_weak=args.dynamic_weak, cwd=cwd)
    linker = Linker(target, ElfReader(args.cache_dir, use_cache=not args.no_cache, relocations=not args.tree_only))
    prediction = linker.run(Scenario(executable, environment, tuple(steps)))
    if args.tree_only:
        notes.append("--tree-only: no symbol is bound; undefined symbols and interpositions are not reported")
    if args.format == "json":
        sys.stdout.write(dumps(prediction_record(prediction, target, symbols_bound=not args.tree_only)))
        sys.stdout.write("\n")
    else:
        render_prediction(prediction, target, notes=notes)
    return 0 if prediction.ok else 1


def _host(given: list[str] | None, target: LinkerTarget) -> tuple[list[str], list[str]]:
    """The host program (and libraries it loads first), and a note when it is a stand-in for tritonserver."""
    if given:
        return given, []
    found = next((h for h in (SERVER, *STAND_IN_HOSTS) if target.host_path(h)), None)
    if found is None:
        raise CustomopsError(f"no host executable in the target (none of {', '.join((SERVER, *STAND_IN_HOSTS))}): "
                             "name one with --host")
    if found != SERVER and not target.is_live:  # with --root, a Triton container was expected
        return [found], [f"no {SERVER} in the target: {found} is the host program (use --host to name one)"]
    return [found], []
