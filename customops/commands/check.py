"""customops check: will these custom-operation libraries load in this Triton container, and will they collide?"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from customops.errors import CustomopsError, InputError, printable
from customops.outputs import remove_stale, write_file

if TYPE_CHECKING:
    from customops.app.checking import CheckRun
    from customops.app.request import CheckRequest

FORMATS = ("text", "json", "sarif", "junit", "github", "gitlab")
SCANNING_FORMATS = ("sarif", "junit", "github", "gitlab")  # paths relative to the checkout (json's: the repository)
REPORT_FILES = {"sarif": "SARIF", "junit": "JUnit XML", "gitlab": "GitLab Code Quality"}  # --sarif FILE, ...
SERVER_PROGRAM = "tritonserver"
ON_EXIT_2 = {"sarif": "not written when the run ends with exit 2, so that no upload closes open alerts"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check a model repository's custom libraries against a Triton container",
                       description=__doc__)
    p.add_argument("repositories", nargs="*", metavar="MODEL_REPOSITORY",
                   help="a Triton model repository: a directory of model directories, each with a config.pbtxt "
                        "(default: those found under the current directory)")
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
    _add_report_options(p)
    p.add_argument("--fail-on", choices=("error", "warning", "info"), help="default: the manifest's, else error")
    p.add_argument("--exit-zero", action="store_true",
                   help="exit 0 even when findings reach --fail-on (the reports still say FAIL); bad input is still "
                        "exit 2")
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
                   help="text report: instead of the findings, one line per code: its count, severity and title; "
                        "json: a statistics object beside the findings")
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


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", "--output-format", choices=FORMATS, default="text",
                   help="text for people, json (customops.check/1), sarif (code scanning), junit (test dashboards), "
                        "github (workflow annotations), gitlab (GitLab Code Quality); default: text")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of standard output")
    for report_format, what in REPORT_FILES.items():
        p.add_argument(f"--{report_format}", metavar="FILE", dest=f"{report_format}_file",
                       help=f"also write the {what} report to FILE, whatever --format prints ("
                            f"{ON_EXIT_2.get(report_format, 'written even when the run ends with exit 2')})")
    p.add_argument("--base-dir", metavar="DIR",
                   help="sarif, github, gitlab and junit: file paths relative to this directory (default: the git "
                        "checkout holding the first repository, where code scanning and workflow annotations resolve "
                        "them; else that repository)")


def run(args: argparse.Namespace, usage: Callable[[str], NoReturn] | None = None) -> int:
    """The check; a run that cannot check (bad input, exit 2) still writes each JUnit and GitLab report file
    it was asked for, with the error as its one result, so that the upload step after it finds a file that
    says why; and leaves no SARIF file (error_reports)."""
    try:
        return _run(args, usage)
    except CustomopsError as exc:
        error_reports(args, str(exc), exc.path if isinstance(exc, InputError) else None)
        raise


def error_reports(args: argparse.Namespace, message: str, path: str | None = None) -> None:
    """Each requested JUnit, GitLab or GitHub report file, with the error as its one result, at the file it
    names (`path`, where it lies in the checkout; else the first model repository, the working directory or
    the checkout): exit 2 follows. A text or JSON report file an earlier run left is removed (its verdict is
    not this run's). No SARIF file, and one left there by an earlier run is removed: code
    scanning would take it for an analysis that found nothing and close every open alert, so the upload step
    (`hashFiles(...) != ''`) skips and the alerts stay as the last complete run left them (docs/ci.md)."""
    from customops.report.check import error_location, error_report
    from customops.triton.manifest import checkout_root

    named = [os.path.abspath(r) for r in (*args.repositories, *args.more_repositories)]
    base = os.path.abspath(args.base_dir) if args.base_dir else checkout_root(named[0] if named else os.getcwd())
    where = error_location([p for p in (path, *named[:1], os.getcwd()) if p], base)
    for report_format, output in outputs(args):
        if not output:
            continue
        if report_format == "sarif" or report_format not in SCANNING_FORMATS:
            remove_stale(output)  # the previous run's verdict (`"ok": true`) must not stand for this one
        else:
            with contextlib.suppress(CustomopsError):  # a file that cannot be written: the error stands alone
                emit(error_report(report_format, message, where), output)


def outputs(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """Every report of the run: (format, file, or None for standard output); --format's first."""
    extra = [(f, getattr(args, f"{f}_file", None)) for f in REPORT_FILES]
    return [(args.format, args.output), *((f, path) for f, path in extra if path)]


def _run(args: argparse.Namespace, usage: Callable[[str], NoReturn] | None = None) -> int:
    """`usage` reports a wrong combination of options with check's usage line (the parser's error), else as
    CustomopsError."""
    def wrong(message: str) -> NoReturn:
        if usage is not None:
            error_reports(args, message)  # the usage line exits: its report files are written first
            usage(message)
        raise CustomopsError(message)

    from customops.app import report_cache

    if args.statistics and args.format not in ("text", "json"):
        wrong("--statistics applies to the text and json reports only (the other formats list every finding)")
    wanted = outputs(args)
    files = [_real(path) for _, path in wanted if path]
    if len(set(files)) < len(files):
        wrong("two reports would be written to the same file")
    try:
        request = check_request(args)
    except ValueError as exc:
        wrong(str(exc))
    request, notes = report_cache.guarded(request)
    bases = {f: report_base(f, args, request) for f, _ in wanted}
    keys = [report_cache.report_key(request, f"{f} with statistics" if args.statistics else f, bases[f])
            for f, _ in wanted]
    hits = [hit for k in keys if k is not None and (hit := report_cache.cached_report(k)) is not None]
    if len(hits) == len(wanted):
        _warn(request)
        for (_, output), hit in zip(wanted, hits, strict=True):
            emit(hit["report"], output)
        _log_summary(wanted, hits[0]["summary"])
        return _exit_status(args, int(hits[0]["exit_code"]))
    from customops.app.checking import check_repositories
    from customops.report.check import summary_line

    checked = check_repositories(request, notes)
    _warn(request)
    summary = summary_line(checked.result, checked.fail_on, checked.exit_code)
    for (report_format, output), key in zip(wanted, keys, strict=True):
        if report_format == "text":
            render_text(args, checked, bases[report_format], output)
            continue
        text = render(report_format, checked, bases[report_format], args.statistics)
        emit(text, output)
        if key is not None:
            report_cache.store_report(key, text, checked.exit_code, checked.dependencies, summary)
    _log_summary(wanted, summary)
    return _exit_status(args, checked.exit_code)


def _warn(request: CheckRequest) -> None:
    """A warning on the container (--container-root that is not a container's root) or on a discovered manifest or
    profile passed over (customops.ownership), on standard error before the report whose findings it explains;
    the report's notes say it too."""
    from customops import ownership
    from customops.app.target import root_warnings

    for warning in [*root_warnings(request.container), *ownership.warnings()]:
        sys.stderr.write(f"customops: warning: {printable(warning)}\n")


def _real(path: str) -> str:
    """The file a report path names, to tell two reports apart (a path that cannot be resolved: as written)."""
    try:
        return os.path.realpath(path)
    except OSError:  # Python 3.11's realpath lets a readlink error out (a link swapped meanwhile)
        return os.path.abspath(path)


def _exit_status(args: argparse.Namespace, verdict: int) -> int:
    """--exit-zero, as ruff's: findings never fail the command (the reports still say FAIL and carry the exit
    code the check decided)."""
    return 0 if args.exit_zero else verdict


def report_base(report_format: str, args: argparse.Namespace, request: CheckRequest) -> str:
    """The directory a report's paths are relative to: for the CI formats the git checkout (where code scanning
    and workflow annotations resolve them) or --base-dir; else the first repository, or its checkout when the
    manifest lies between the two (its findings' paths would otherwise be absolute)."""
    from customops.triton.manifest import checkout_root, find_manifest

    base = request.repositories[0] if request.repositories else os.getcwd()
    if report_format in SCANNING_FORMATS:
        return os.path.abspath(args.base_dir) if args.base_dir else checkout_root(base)
    manifest = request.manifest or find_manifest(list(request.repositories))
    checkout = checkout_root(base)
    if manifest and _inside(manifest, checkout) and not _inside(manifest, base):
        return checkout  # a manifest above the repository: every path relative to the checkout, its own too
    return base


def _inside(path: str, directory: str) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(directory).rstrip("/") + "/")


def _log_summary(wanted: list[tuple[str, str | None]], summary: str) -> None:
    """When every report went to a file, the summary line on standard error: a CI log that says what the run
    found; so too for a run that checked the configs only, unless the text report is on standard output (a
    GitLab report, a bare array of issues, has no place to say so)."""
    from customops.report.summary import limited

    printed = [report_format for report_format, output in wanted if not output]
    if not printed or (limited(summary) and "text" not in printed):
        sys.stderr.write(f"customops: {summary}\n")


def check_request(args: argparse.Namespace) -> CheckRequest:
    """The options that decide the check's answer; ValueError for an unknown code in --select/--ignore."""
    from customops.app.request import CheckRequest, ProbeOptions
    from customops.app.target import ContainerChoice
    from customops.codes import Severity
    from customops.selection import parse_selectors

    named = [*args.repositories, *args.more_repositories]
    _no_server_among(args.repositories)
    if not named and getattr(args, "server", None) is None:
        from customops.triton.discovery import find_model_repositories

        named = find_model_repositories(os.getcwd())
    request = CheckRequest(
        repositories=tuple(os.path.abspath(r) for r in named),
        container=ContainerChoice(args.container_root, args.profile, args.triton_release, args.backend_directory),
        manifest=args.manifest, mounts=tuple(args.mount), model_config_name=args.model_config_name,
        models=frozenset(args.load_model) if args.load_model else None,
        fail_on=Severity.parse(args.fail_on) if args.fail_on else None,
        select=parse_selectors(args.select, "--select") if args.select is not None else None,
        ignore=parse_selectors(args.ignore or (), "--ignore"),
        probe=ProbeOptions(args.probe_python, args.probe_onnxruntime) if args.probe else None,
        cache_dir=args.cache_dir, use_cache=not args.no_cache)
    server = getattr(args, "server", None)
    return request if server is None else with_server_command(request, args, server)


def _no_server_among(repositories: list[str]) -> None:
    """`check --container-root C tritonserver --model-repository=R` (the `--` forgotten): the server's program is
    no model repository; say where its command line goes rather than that ./tritonserver does not exist."""
    for repository in repositories:
        if os.path.basename(repository.rstrip("/")) == SERVER_PROGRAM and not os.path.isdir(repository):
            raise CustomopsError(f"{printable(repository)} is the server, not a model repository: give the server's "
                                 f"command line after --: customops check [OPTIONS] -- {SERVER_PROGRAM} "
                                 "--model-repository=DIR ...")


def with_server_command(request: CheckRequest, args: argparse.Namespace, server: list[str]) -> CheckRequest:
    """`check -- tritonserver ARGS`: the repositories, backend directory, config name, models to load, auto-complete
    setting and TensorRT plugins read from the server's own command line, as launch reads them
    (customops.app.server_command); ValueError when check's own options say the same thing too."""
    from dataclasses import replace

    from customops.app.server_command import applied, host_repositories, settings
    from customops.triton.mounts import parse_mount
    from customops.triton.serverargs import DEFAULT_BACKEND_DIRECTORY, parse

    given = [f for f, v in (("MODEL_REPOSITORY", request.repositories), ("--model-config-name",
             args.model_config_name), ("--load-model", args.load_model),
             ("--backend-directory", args.backend_directory != DEFAULT_BACKEND_DIRECTORY)) if v]
    if given:
        raise ValueError(f"{given[0]} is read from the tritonserver command line after --; give it there only")
    sa = parse(server if server else ["tritonserver"])
    root = os.path.abspath(args.container_root) if args.container_root else None
    repositories = host_repositories(sa, root, tuple(parse_mount(m) for m in args.mount))
    return replace(applied(request, settings(sa)), repositories=repositories)


def render(report_format: str, checked: CheckRun, base: str, statistics: bool = False) -> str:
    """A machine-readable report (json, sarif, junit, github); paths relative to `base`; `statistics`: json's
    statistics object (--statistics)."""
    from customops.report import check as report
    from customops.report import junit

    result = checked.result
    renderers = {
        "json": lambda: report.to_json(result, checked.fail_on, checked.exit_code, base, statistics),
        "sarif": lambda: report.to_sarif(result, base),
        "junit": lambda: junit.to_junit(result, checked.fail_on, base, checked.seconds),
        "github": lambda: report.to_github(result, base),
        "gitlab": lambda: report.to_gitlab(result, base),
    }
    return renderers[report_format]()


def render_text(args: argparse.Namespace, checked: CheckRun, base: str, output: str | None) -> None:
    from customops.report import check as report
    from customops.report.escape import console

    result = checked.result
    style = {"verbosity": 1 if args.verbose else -1 if args.quiet else 0, "statistics": args.statistics}

    def write(f: TextIO | None) -> None:
        report.render_text(result, checked.fail_on, checked.exit_code, base, console(f, args.color), **style)

    if output:
        write_file(output, write)
    else:
        write(None)


def emit(text: str, output: str | None) -> None:
    if output:
        write_file(output, lambda f: f.write(text if text.endswith("\n") else text + "\n"))
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
