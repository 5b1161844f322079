"""customops check: will these custom-operation libraries load in this Triton container, and will they collide?"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NoReturn

from customops.cachedir import MapOf, Text, default_cache_dir
from customops.errors import CustomopsError
from customops.outputs import write_file

FORMATS = ("text", "json", "sarif", "junit", "github")
NO_CONTAINER = ("no container to check against: pass --container-root DIR, --profile FILE or --triton-release "
                "YY.MM, or run inside the Triton image")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check a model repository's custom libraries against a Triton container",
                       description=__doc__)
    p.add_argument("repositories", nargs="*", metavar="MODEL_REPOSITORY",
                   help="a Triton model repository: a directory of model directories, each with a config.pbtxt")
    p.add_argument("--model-repository", "--model-store", action="append", default=[], dest="more_repositories",
                   metavar="DIR", help="another model repository (as tritonserver takes it; repeatable)")
    p.add_argument("--manifest", metavar="FILE", help="customops.toml (default: the repository's own, if any)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--container-root", metavar="DIR", help="the container's unpacked filesystem (default: / "
                                                               "when /opt/tritonserver exists; `/` checks this "
                                                               "machine)")
    where.add_argument("--profile", metavar="FILE", help="a profile written by `customops profile create`")
    where.add_argument("--triton-release", metavar="YY.MM", help="only the built-in facts of a release")
    p.add_argument("--backend-directory", default="/opt/tritonserver/backends", metavar="DIR",
                   help="the server's --backend-directory, inside the container (default: %(default)s)")
    p.add_argument("--mount", action="append", default=[], metavar="HOST_DIR:CONTAINER_DIR",
                   help="where a checkout directory appears in the container, as docker -v (repeatable)")
    p.add_argument("--model-config-name", metavar="NAME", help="read configs/NAME.pbtxt where present")
    p.add_argument("--load-model", action="append", metavar="NAME", help="check only these models (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="report format: text for people, json (customops.check/1), sarif for code scanning, "
                        "junit for test dashboards, github for workflow annotations (default: text)")
    p.add_argument("--output", metavar="FILE", help="write the report here instead of standard output")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), help="default: the manifest's, else error")
    p.add_argument("--select", action="append", metavar="CODES",
                   help="report only these codes: comma-separated codes or prefixes (CO3: every CO3xx); replaces "
                        "the manifest's [check] select (repeatable)")
    p.add_argument("--ignore", action="append", metavar="CODES",
                   help="never report these codes or prefixes (comma-separated); added to the manifest's "
                        "[check] ignore (repeatable)")
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      help="text report: only the findings and the summary line (no header, notes or clean models)")
    loud.add_argument("-v", "--verbose", action="store_true",
                      help="text report: also the container's facts, every evidence line, suppressed findings and "
                           "what was checked in each model without findings")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="text report: colour and bold; auto only on a terminal and without NO_COLOR "
                        "(default: auto)")
    p.add_argument("--statistics", action="store_true",
                   help="text report: instead of the findings, one line per code: its count, severity and title")
    p.add_argument("--probe", action="store_true",
                   help="also load the op libraries with the real frameworks, each group in an isolated child "
                        "process, and report what they register and how they collide")
    p.add_argument("--probe-python", metavar="PATH",
                   help="the interpreter whose torch/tensorflow/onnxruntime probes (default: this one)")
    p.add_argument("--probe-onnxruntime", metavar="LIB", help="the libonnxruntime.so to register ONNX Runtime op "
                   "libraries into (default: the container's, when checking the container from inside, else "
                   "the probe interpreter's)")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the cache (parsed libraries, profiles' skeletons, reports)")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="the cache directory (default: $CUSTOMOPS_CACHE_DIR, else $XDG_CACHE_HOME/customops, "
                        "else ~/.cache/customops)")
    p.set_defaults(run=partial(run, usage=p.error))


def run(args: argparse.Namespace, usage: Callable[[str], NoReturn] | None = None) -> int:
    """`usage` reports a wrong combination of options with check's usage line (the parser's error), else as
    CustomopsError."""
    def wrong(message: str) -> NoReturn:
        if usage is not None:
            usage(message)
        raise CustomopsError(message)

    repositories = [os.path.abspath(r) for r in (*args.repositories, *args.more_repositories)]
    if not repositories:  # one line, as every other bad input (tests/test_bad_input.py)
        raise CustomopsError("no model repository given")
    if args.statistics and args.format != "text":
        wrong("--statistics applies to the text report only (the other formats list every finding)")
    from customops.app.suppressions import with_options
    from customops.selection import parse_selectors

    try:
        select = parse_selectors(args.select, "--select") if args.select is not None else None
        ignore = parse_selectors(args.ignore or (), "--ignore")
    except ValueError as exc:
        wrong(str(exc))
    in_repository = not args.no_cache and _cache_in_repository(args.cache_dir or default_cache_dir(), repositories)
    if in_repository:
        args.no_cache = True  # a pull request could commit entries there, owned by the CI user like its own
    cache_key = None if args.no_cache or args.format == "text" or args.probe else report_key(args, repositories)
    if cache_key is not None and (hit := cached_report(cache_key)) is not None:
        emit(hit["report"], args.output)
        return int(hit["exit_code"])
    from customops import progress
    from customops.app.check import default_mounts, dependencies, run_check
    from customops.codes import Severity
    from customops.elf.cache import ElfReader
    from customops.report import check as report
    from customops.triton.container import from_release, from_root, read_profile
    from customops.triton.manifest import find_manifest, load_manifest
    from customops.triton.mounts import parse_mount
    from customops.triton.repository import check_repository

    for repository in repositories:  # before looking for a container: the more precise mistake first
        check_repository(repository)

    reader = ElfReader(args.cache_dir, use_cache=not args.no_cache)
    manifest = with_options(load_manifest(args.manifest or find_manifest(repositories)), select, ignore)
    notes = [f"cache directory {in_repository} is inside a model repository or its checkout: not used"
             ] if in_repository else []
    profile = args.profile
    if not (profile or args.container_root or args.triton_release) and not os.path.isdir("/opt/tritonserver"):
        profile = beside_repository(manifest, repositories)
        if not profile:
            raise CustomopsError(NO_CONTAINER)
        notes.append(f"using the profile {shown(profile)} (no container root given and no /opt/tritonserver here)")
    elif profile:
        notes.append(f"using the profile {shown(profile)}")
    if manifest.path:
        notes.append(f"using the manifest {shown(manifest.path)}")
    with progress.shown("checking"):
        progress.stage("reading the container")
        if profile:
            container = read_profile(profile, None if args.no_cache else args.cache_dir or default_cache_dir())
        elif args.triton_release:
            container = from_release(args.triton_release)
        else:
            container = from_root(args.container_root or "/", args.backend_directory, reader)
        fail_on = Severity.parse(args.fail_on) if args.fail_on else manifest.fail_on
        mounts = default_mounts(repositories, container, tuple(parse_mount(m) for m in args.mount))
        result = run_check(repositories, manifest, container, mounts, args.model_config_name,
                           set(args.load_model) if args.load_model else None, reader,
                           probe=probe_settings(args, container) if args.probe else None)
    result.notes[:0] = notes
    result.manifest = manifest.path
    result.profile = os.path.abspath(profile) if profile else None
    exit_code = 1 if any(f.level >= fail_on for f in result.findings) else 0
    base = repositories[0]
    rendered = {
        "json": lambda: report.to_json(result, fail_on, exit_code, base),
        "sarif": lambda: report.to_sarif(result, base),
        "junit": lambda: report.to_junit(result, fail_on, base),
        "github": lambda: report.to_github(result, base),
    }
    if args.format == "text":
        from customops.report.escape import console

        color = args.color
        style = {"verbosity": 1 if args.verbose else -1 if args.quiet else 0, "statistics": args.statistics}
        if args.output:
            write_file(args.output, lambda f: report.render_text(result, fail_on, exit_code, base, console(f, color),
                                                                 **style))
        else:
            report.render_text(result, fail_on, exit_code, base, console(None, color), **style)
    else:
        text = rendered[args.format]()
        emit(text, args.output)
        if cache_key is not None:
            store_report(cache_key, {"report": text, "exit_code": exit_code},
                         [*dependencies(result), *([profile] if profile else [])])
    return exit_code


def probe_settings(args: argparse.Namespace, container):  # type: ignore[no-untyped-def]
    """Inside the container, ONNX Runtime op libraries are registered into the backend's own
    libonnxruntime.so; Torch and TensorFlow need a Python with the framework (--probe-python). Shared
    with launch --probe."""
    from customops.cachedir import default_cache_dir
    from customops.probe.groups import ProbeSettings

    runtime = args.probe_onnxruntime
    if runtime is None and container.target is not None and container.target.is_live:
        found = sorted(Path(container.backend_dir, "onnxruntime").glob("libonnxruntime.so*"))
        runtime = str(found[0]) if found else None
    if args.probe_python and not os.access(args.probe_python, os.X_OK):
        raise CustomopsError(f"--probe-python {args.probe_python}: not an executable file")
    cache = None if getattr(args, "no_cache", False) else (getattr(args, "cache_dir", None) or default_cache_dir())
    return ProbeSettings(os.path.abspath(args.probe_python) if args.probe_python else sys.executable, runtime,
                         cache_dir=cache)


def _cache_in_repository(cache_dir: str | os.PathLike[str], repositories: list[str]) -> str | None:
    """The cache directory, when it lies inside one of the repositories checked or the git checkout that
    holds one: files a pull request commits there are checked out as the CI user's own, so the cache's
    ownership test would trust them (a skeleton under a trusted profile's key would change the verdict)."""
    from customops.triton.manifest import checkout_root

    real = os.path.realpath(cache_dir)
    for repository in repositories:
        base = os.path.realpath(checkout_root(repository))  # the checkout, or the repository without one
        if (real + "/").startswith(base.rstrip("/") + "/"):
            return str(cache_dir)
    return None


def emit(text: str, output: str | None) -> None:
    if output:
        write_file(output, lambda f: f.write(text if text.endswith("\n") else text + "\n"))
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def report_key(args: argparse.Namespace, repositories: list[str]) -> list[str] | None:
    """A machine-readable report is cached (CI runs the same check again and again): the key is the options,
    the identity of every file in the repositories and of the manifest and profile named; what the answer
    depended on in the container is recorded with the report and compared on every hit (see
    customops.app.launch_cache for the same scheme)."""
    from customops import __version__
    from customops.cachedir import file_key, tree_fingerprint

    options = {k: v for k, v in vars(args).items() if k not in ("run", "cache_dir", "no_cache", "output", "quiet",
                                                                 "verbose", "color", "statistics")}
    parts = [__version__, "check", json.dumps(options, sort_keys=True, default=str), json.dumps(repositories),
             str(os.path.isdir("/opt/tritonserver"))]
    try:
        parts += [tree_fingerprint(r) for r in repositories]
        parts += [file_key(p) for p in (args.manifest, args.profile) if p]
        parts += [f"{p}={file_key(p)}" for p in discovered(args, repositories)]
    except OSError:
        return None
    return [str(args.cache_dir or ""), *parts]


def discovered(args: argparse.Namespace, repositories: list[str]) -> list[str]:
    """The manifest and profile that discovery finds above the repositories (not named by an option), for the
    report's cache key: a change to one there is outside the repositories' fingerprint."""
    from customops.triton.manifest import find_manifest

    found = [] if args.manifest else [find_manifest(repositories)]
    if not (args.profile or args.container_root or args.triton_release):
        from customops.triton.manifest import discover

        found.append(discover(repositories, PROFILE_NAME, "a profile", "--profile"))
    return [p for p in found if p]


REPORT_SHAPE = {"report": Text(lines=True), "exit_code": frozenset({0, 1}), "dependencies": MapOf(str)}


def cached_report(key: list[str]) -> dict | None:  # type: ignore[type-arg]
    """The report stored under `key` if the cache trusts it, it has exactly REPORT_SHAPE, and nothing it
    depended on has changed."""
    from customops.cachedir import file_key, load_result

    cache_dir, *parts = key
    hit = load_result(cache_dir or default_cache_dir(), "check", parts, REPORT_SHAPE)
    if hit is None:
        return None
    for path, identity in hit["dependencies"].items():
        try:
            if file_key(path) != identity:
                return None
        except (OSError, ValueError):
            return None
    return hit  # type: ignore[no-any-return]


def store_report(key: list[str], value: dict, depends_on: list[str]) -> None:  # type: ignore[type-arg]
    from customops.cachedir import file_key, store_result

    try:
        identities = {path: file_key(path) for path in depends_on}
    except OSError:
        return  # something it depends on vanished meanwhile: do not cache
    cache_dir, *parts = key
    store_result(cache_dir or default_cache_dir(), "check", parts, {**value, "dependencies": identities})


def beside_repository(manifest, repositories: list[str]) -> str | None:  # type: ignore[no-untyped-def]
    """The manifest's [check] profile, else customops-profile.json next to the manifest, or in a repository
    or a directory above it up to its checkout's root (one that is a symbolic link out of that checkout is
    refused, as a manifest is: customops.triton.manifest.discover)."""
    from customops.errors import InputError, printable
    from customops.triton.manifest import checkout_root, discover

    if manifest.profile:
        real = os.path.realpath(manifest.profile)
        top = os.path.realpath(checkout_root(manifest.directory or repositories[0]))
        if not real.startswith(top.rstrip("/") + "/"):  # `profile = "/etc/..."` in a pull request's manifest
            raise InputError(str(manifest.profile), f"the manifest's [check] profile lies outside the checkout "
                             f"(at {printable(real)}), not read (pass --profile to use a profile kept elsewhere)")
        return str(manifest.profile)
    return discover(([manifest.directory] if manifest.directory else []) + repositories, PROFILE_NAME,
                    "a profile", "--profile")


PROFILE_NAME = "customops-profile.json"


def shown(path: str) -> str:
    """A path for a note: relative to the working directory when inside it, else absolute."""
    path = os.path.abspath(path)
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd.rstrip("/") + "/") else path
