"""The launch verdict, cached: `customops launch` stands in front of every server start, and when nothing it
depends on has changed the check's answer cannot have changed either.

Only the verdict is cached: the notes and, when the check blocks the start, the failure report. What is
started (the argv and the variables customops sets) is never read from the cache: it is assembled afresh
from the current inputs on every start (customops.app.launch.environment_for, cheap), so a cache entry, whoever
wrote it, cannot make launch exec another program or change LD_PRELOAD. The verdict is stored under a key
made of the server's argv, the options, LD_PRELOAD/LD_LIBRARY_PATH, the mounts, the manifest, and the
identity (device, inode, size, mtime) of every file and directory in the repositories; it also records the
identities of what the check depended on in the container (every object it loaded, the ld.so.cache, the
server, and the search and backend directories: a directory's mtime changes when a file is added or
removed). Any difference is a miss; an entry is used only if customops.cachedir trusts it and it has exactly
VERDICT_SHAPE (customops.app.result_cache, the scheme check's report cache shares). This module imports
nothing heavy, so a hit costs an interpreter start and a few hundred stat calls.
"""

from __future__ import annotations

import json
import shlex

from customops import __version__
from customops.app import result_cache
from customops.cachedir import Text, default_cache_dir, file_key, tree_fingerprint
from customops.triton.mounts import Mounts, resolve_host
from customops.triton.serverargs import parse

VERDICT_SHAPE = {"notes": [Text()], "report": (Text(lines=True), None),
                 "dependencies": result_cache.DEPENDENCIES_SHAPE}


def key_parts(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str]) -> list[str] | None:
    args = parse(server_argv)
    root = options["container_root"]
    parts = [__version__, json.dumps(server_argv), json.dumps(options, sort_keys=True), json.dumps(sorted(mounts)),
             environ.get("LD_PRELOAD", ""), environ.get("LD_LIBRARY_PATH", "")]
    try:
        for repository in args.local_repositories:  # a cloud repository is not read: its models are not checked
            host = resolve_host(root, repository, mounts)
            parts.append("missing" if host is None else tree_fingerprint(host))
        if options.get("manifest"):
            parts.append(file_key(options["manifest"]))
    except OSError:
        return None
    return parts


def cached(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
           cache_dir: str | None = None) -> dict | None:
    """{"notes": [...], "report": text or None} of an earlier start with the same inputs, if nothing it
    depended on has changed since."""
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return None
    return result_cache.load(cache_dir or default_cache_dir(), "launch", parts, VERDICT_SHAPE)


def store(decision: dict, server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
          dependencies: list[str], cache_dir: str | None = None) -> None:
    """Keep the verdict of `decision` (its notes and report; never its argv or environment)."""
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return
    result_cache.store(cache_dir or default_cache_dir(), "launch", parts,
                       {"notes": decision["notes"], "report": decision["report"]}, dependencies)


def command_line(argv: list[str], environment: dict[str, str]) -> str:
    """Copy-pasteable: a POSIX shell runs it as given, and it reproduces the launch: `env VAR=... PROGRAM ARGS`.
    A program whose name holds `=` would be one more assignment to env (and to a shell), so it gets the shell's
    own assignment prefix instead, with the program quoted: `VAR=... 'bin=x/tritonserver' ARGS`."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(environment.items())]
    program, *args = argv or [""]
    words = [_program_word(program), *map(shlex.quote, args)]
    if assignments and "=" not in program:
        return " ".join(["env", *assignments, *words])
    return " ".join([*assignments, *words])


# words a shell reads as its syntax in a command's first place: quoted there, they name a program
SHELL_WORDS = frozenset(["case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in",
                         "select", "then", "time", "until", "while"])  # `!`, `{`, `[[`: shlex.quote quotes them


def _program_word(program: str) -> str:
    """The program as the command's first word: quoted when it would otherwise read as an assignment or as
    the shell's own syntax (shlex.quote leaves `=` and a reserved word bare), and `./-dir/x` for `-dir/x`."""
    if program.startswith("-"):  # a relative path (serverargs refuses an option there): not one to env or sh
        program = "./" + program
    quoted = shlex.quote(program)
    if quoted == program and ("=" in program or program in SHELL_WORDS):
        return f"'{program}'"
    return quoted
