"""customops check: will these custom-operation libraries load in this Triton container, and will they collide?"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from customops.errors import CustomopsError, InputError, printable
from customops.image.reference import DEFAULT_PLATFORM, platform
from customops.outputs import remove_stale, write_file
from customops.report.formats import FORMATS

if TYPE_CHECKING:
    from customops.app.matrix import Column, Matrix
    from customops.app.request import CheckCommand, CheckRequest, ReportRequest
    from customops.app.target import ContainerChoice


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check a model repository's custom libraries against a Triton container",
                       description=__doc__)
    p.add_argument("repositories", nargs="*", metavar="MODEL_REPOSITORY",
                   help="a Triton model repository: a directory of model directories, each with a config.pbtxt "
                        "(default: those found under the current directory)")
    p.add_argument("--model-repository", "--model-store", action="append", default=[], dest="more_repositories",
                   metavar="DIR", help="another model repository (as tritonserver takes it; repeatable)")
    p.add_argument("--manifest", metavar="FILE", help="customops.toml (default: the repository's own, if any)")
    _add_container_options(p)
    p.add_argument("--mount", action="append", default=[], metavar="HOST_DIR:CONTAINER_DIR",
                   help="where a checkout directory appears in the container, as docker -v (repeatable)")
    p.add_argument("--model-config-name", metavar="NAME", help="read configs/NAME.pbtxt where present")
    p.add_argument("--load-model", action="append", metavar="NAME", help="check only these models (repeatable)")
    _add_report_options(p)
    p.add_argument("--fail-on", choices=("error", "warning", "info"), help="default: the manifest's, else error")
    p.add_argument("--fail-on-target", metavar="TARGET", help="with several targets: the exit status is this one's, "
                   "named by its release (YY.MM) or as given (a profile's file) (default: the worst target's)")
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


def _add_container_options(p: argparse.ArgumentParser) -> None:
    """The container to check against: a root, a profile, a release's facts or an image. Several (a release list,
    or any two of them): every model against each, in one table (the upgrade matrix)."""
    p.add_argument("--container-root", metavar="DIR", help="the container's unpacked filesystem (default: / when "
                                                           "/opt/tritonserver exists; `/` checks this machine)")
    p.add_argument("--profile", metavar="FILE", action="append", help="a profile written by `customops profile "
                   "create` (repeatable: each a column of the upgrade matrix)")
    p.add_argument("--triton-release", metavar="YY.MM", help="only the cited facts of a release (customops "
                   "releases); several (A,B,C), a range (A..B) or `latest`: every model against each, in one table")
    p.add_argument("--image", metavar="REF", action="append", help="a container image, not unpacked: "
                   "docker-archive:FILE, oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-daemon:NAME[:TAG], "
                   "podman:NAME[:TAG], a path (repeatable: each a column of the upgrade matrix)")
    p.add_argument("--platform", default=DEFAULT_PLATFORM, metavar="OS/ARCH", type=platform,
                   help="with --image: the image of a multi-platform index to check (default: %(default)s)")
    p.add_argument("--backend-directory", default="/opt/tritonserver/backends", metavar="DIR",
                   help="the server's --backend-directory, inside the container (default: %(default)s)")


def _add_report_options(p: argparse.ArgumentParser) -> None:
    """--format, -o and each --<format> FILE, from the registry of formats (customops.report.formats)."""
    p.add_argument("--format", "--output-format", choices=tuple(FORMATS), default="text",
                   help=", ".join(f.description for f in FORMATS.values()) + "; default: text")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of standard output")
    for name, report_format in FORMATS.items():
        if report_format.side_file is not None:
            p.add_argument(f"--{name}", metavar="FILE", dest=f"{name}_file",
                           help=f"also write the {report_format.side_file.what} report to FILE, whatever --format "
                                f"prints ({report_format.side_file.on_exit_2})")
    p.add_argument("--base-dir", metavar="DIR",
                   help="sarif, github, gitlab and junit: file paths relative to this directory (default: the git "
                        "checkout holding the first repository, where code scanning and workflow annotations resolve "
                        "them; else that repository)")


def run(args: argparse.Namespace, usage: Callable[[str], NoReturn] | None = None) -> int:
    """The check; a run that cannot check (bad input, exit 2) still writes each JUnit and GitLab report file
    it was asked for, with the error as its one result, so that the upload step after it finds a file that
    says why; and leaves no SARIF file (error_reports)."""
    command = check_command(args)
    try:
        return _run(command, usage)
    except CustomopsError as exc:
        error_reports(command, str(exc), exc.path if isinstance(exc, InputError) else None)
        raise


def check_command(args: argparse.Namespace) -> CheckCommand:
    """The command line as the one object handed down (nothing read yet: customops.app.check_command reads)."""
    from customops.app.request import CheckCommand, ProbeOptions, ReportOptions
    from customops.app.target import ContainerChoice
    from customops.codes import Severity

    server = getattr(args, "server", None)  # set by customops.cli, from after `--`
    side_files = [(name, getattr(args, f"{name}_file", None)) for name in FORMATS]
    wanted = [(args.format, args.output), *((name, path) for name, path in side_files if path)]
    containers = _containers(args)
    return CheckCommand(
        tuple(args.repositories), containers[0] if containers else ContainerChoice(
            backend_directory=args.backend_directory, platform=args.platform),
        columns=containers if len(containers) > 1 else (),
        more_repositories=tuple(args.more_repositories), server=None if server is None else tuple(server),
        manifest=args.manifest, mounts=tuple(args.mount), model_config_name=args.model_config_name,
        load_model=tuple(args.load_model) if args.load_model is not None else None,
        fail_on=Severity.parse(args.fail_on) if args.fail_on else None,
        select=tuple(args.select) if args.select is not None else None, ignore=tuple(args.ignore or ()),
        probe=ProbeOptions(args.probe_python, args.probe_onnxruntime) if args.probe else None,
        cache_dir=args.cache_dir, use_cache=not args.no_cache, reports=tuple(_report(*w) for w in wanted),
        base_dir=args.base_dir, options=ReportOptions(args.statistics, 1 if args.verbose else -1 if args.quiet else 0,
                                                      args.color), exit_zero=args.exit_zero,
        fail_on_target=args.fail_on_target)


def _containers(args: argparse.Namespace) -> tuple[ContainerChoice, ...]:
    """Each container the options name: the root, the profiles, the images, the releases (one choice for them all)."""
    from customops.app.target import ContainerChoice

    common = {"backend_directory": args.backend_directory, "platform": args.platform}
    return (*[ContainerChoice(root=args.container_root, **common)] * bool(args.container_root),
            *(ContainerChoice(profile=p, **common) for p in args.profile or ()),
            *(ContainerChoice(image=i, **common) for i in args.image or ()),
            *[ContainerChoice(release=args.triton_release, **common)] * bool(args.triton_release))


def _report(name: str, output: str | None) -> ReportRequest:
    from customops.app.request import ReportRequest

    return ReportRequest(name, output, FORMATS[name].relative_to, FORMATS[name].cached)


def error_reports(command: CheckCommand, message: str, path: str | None = None) -> None:
    """Each requested JUnit, GitLab or GitHub report file, with the error as its one result, at the file it
    names (`path`, where it lies in the checkout; else the first model repository, the working directory or
    the checkout): exit 2 follows. A format without an exit-2 report (text, JSON, SARIF) has its file that an
    earlier run left removed: its verdict is not this run's, and code scanning would take a SARIF file for an
    analysis that found nothing and close every open alert, so the upload step (`hashFiles(...) != ''`) skips
    and the alerts stay as the last complete run left them (docs/ci.md)."""
    from customops.app.check_command import error_base
    from customops.report.check import error_location

    where = error_location([p for p in (path, *command.named[:1], os.getcwd()) if p], error_base(command))
    for report in command.reports:
        if not report.output:
            continue
        text = FORMATS[report.format].error(message, where)
        if text is None:
            remove_stale(report.output)  # the previous run's verdict (`"ok": true`) must not stand for this one
        else:
            with contextlib.suppress(CustomopsError):  # a file that cannot be written: the error stands alone
                emit(text, report.output)


def _run(command: CheckCommand, usage: Callable[[str], NoReturn] | None = None) -> int:
    """`usage` reports a wrong combination of options with check's usage line (the parser's error), else as
    CustomopsError."""
    def wrong(message: str) -> NoReturn:
        if usage is not None:
            error_reports(command, message)  # the usage line exits: its report files are written first
            usage(message)
        raise CustomopsError(message)

    from customops.app.check_command import Cached, answer, check_request

    counted = [name for name, f in FORMATS.items() if f.statistics]
    if command.options.statistics and command.reports[0].format not in counted:
        wrong(f"--statistics applies to the {' and '.join(counted)} reports only (the other formats list every "
              "finding)")
    files = [_real(report.output) for report in command.reports if report.output]
    if len(set(files)) < len(files):
        wrong("two reports would be written to the same file")
    if command.columns and any(c.image for c in command.columns) and not command.repositories and \
            not command.more_repositories and command.server is None:
        wrong("several targets: name the model repositories to check against each (a repository baked into an "
              "image is checked against that image alone)")
    try:
        request = check_request(command)
    except ValueError as exc:
        wrong(str(exc))
    from customops.app.matrix import columns_of

    columns = columns_of(request, command.columns)
    if len(columns) > 1:
        return _run_matrix(command, request, columns, wrong)
    if command.fail_on_target is not None:
        wrong("--fail-on-target: only with several targets (--triton-release A,B or A..B, or several containers)")
    if columns:
        request = replace(request, container=columns[0].choice)  # `latest`, `A..A`: that one release
    result = answer(command, request)
    for warning in result.warnings:
        sys.stderr.write(f"customops: warning: {printable(warning)}\n")
    if isinstance(result, Cached):
        for report, text in zip(command.reports, result.texts, strict=True):
            emit(text, report.output)
        exit_code, summary = result.exit_code, result.summary
    else:
        from customops.report.summary import summary_line

        run = result.run
        exit_code, summary = run.exit_code, summary_line(run.result, run.fail_on, run.exit_code)
        for each in result.reports:
            render = partial(FORMATS[each.report.format].render, run, each.base, command.options)
            result.keep(each, write(render, each.report.output), summary)
    _log_summary(command.reports, summary)
    return 0 if command.exit_zero else exit_code  # --exit-zero, as ruff's: the reports still say FAIL


def _run_matrix(command: CheckCommand, request: CheckRequest, columns: tuple[Column, ...],
                wrong: Callable[[str], NoReturn]) -> int:
    """Every model against every target: one report in each format asked for (customops.report.matrix)."""
    from customops.app.check_command import report_base
    from customops.app.matrix import Source, run_matrix
    from customops.report.junit import to_junit_matrix
    from customops.report.matrix import as_github, as_gitlab, as_json, as_sarif, render_text

    if command.options.statistics:
        wrong("--statistics: one target's report only (several give a table of models by targets)")
    names = [c.name for c in columns]
    if len(set(names)) < len(names):
        wrong("the same container twice: each column of the matrix is named once")
    if command.fail_on_target is not None and command.fail_on_target not in names and \
            all(c.source is Source.FACTS for c in columns):
        wrong(f"--fail-on-target {command.fail_on_target}: not one of the targets checked ({', '.join(names)})")
    matrix = run_matrix(request, columns)
    if command.fail_on_target is not None and not _picks(matrix, command.fail_on_target):
        wrong(f"--fail-on-target {command.fail_on_target}: not one of the targets checked "
              f"({', '.join(matrix.targets)})")
    for report in command.reports:
        base = report_base(report, command.base_dir, request)
        render = {"json": as_json, "sarif": as_sarif, "junit": to_junit_matrix, "github": as_github,
                  "gitlab": as_gitlab, "text": lambda m, _b: render_text(m)}[report.format]
        emit(render(matrix, base), report.output)
    exit_code = matrix.exit_code(command.fail_on_target)
    return 0 if command.exit_zero else exit_code


def _picks(matrix: Matrix, target: str) -> bool:
    try:
        matrix.index(target)
    except ValueError:
        return False
    return True


def _real(path: str) -> str:
    """The file a report path names, to tell two reports apart (a path that cannot be resolved: as written)."""
    try:
        return os.path.realpath(path)
    except OSError:  # Python 3.11's realpath lets a readlink error out (a link swapped meanwhile)
        return os.path.abspath(path)


def _log_summary(reports: tuple[ReportRequest, ...], summary: str) -> None:
    """When every report went to a file, the summary line on standard error: a CI log that says what the run
    found; so too for a run that checked the configs only, unless the text report is on standard output (a
    GitLab report, a bare array of issues, has no place to say so)."""
    from customops.report.summary import limited

    printed = [report.format for report in reports if not report.output]
    if not printed or (limited(summary) and "text" not in printed):
        sys.stderr.write(f"customops: {summary}\n")


def write(render: Callable[[TextIO | None], str], output: str | None) -> str:
    """A report, rendered for the stream it goes to (`output`, else standard output), written as emit writes it;
    its text."""
    if not output:
        text = render(None)
        emit(text, None)
        return text
    rendered = []

    def into(stream: TextIO) -> None:
        rendered.append(render(stream))
        stream.write(_ended(rendered[-1]))

    write_file(output, into)
    return rendered[-1]


def emit(text: str, output: str | None) -> None:
    if output:
        write_file(output, lambda f: f.write(_ended(text)))
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _ended(text: str) -> str:
    """A report file's text ends its last line (an empty report too)."""
    return text if text.endswith("\n") else text + "\n"
