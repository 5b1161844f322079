"""customops launch [options] -- tritonserver [args]: check, then exec the server with the right environment."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import TYPE_CHECKING

from customops.errors import CustomopsError, printable
from customops.image.reference import DEFAULT_PLATFORM, platform

if TYPE_CHECKING:
    from customops.app.launch import Launch
    from customops.app.launch_decision import LaunchRequest
    from customops.app.request import ProbeOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="check, then exec tritonserver with the environment it needs",
                       description=__doc__)
    _options(p, "the check blocks the launch on findings at or above this severity (default: the manifest's, "
                "else error)")
    p.add_argument("--warn-only", action="store_true", help="start the server even if the check fails")
    p.add_argument("--no-check", action="store_true", help="skip the check, only assemble the environment")
    p.add_argument("--dry-run", action="store_true", help="print the command line instead of running it")
    p.add_argument("--no-cache", action="store_true", help="always run the check, reading and writing no cache "
                   "(no earlier decision, no parse cache)")
    p.add_argument("--probe", action="store_true", help="the check also loads the op libraries with the real "
                   "frameworks in isolated child processes (as check --probe; the decision is then not cached)")
    p.add_argument("--probe-python", metavar="PATH", help="as check --probe-python")
    p.add_argument("--probe-onnxruntime", metavar="LIB", help="as check --probe-onnxruntime")
    p.add_argument("--image", metavar="REF", help="check against this image, then start the server in it with its "
                   "daemon (docker-daemon:NAME[:TAG] runs `docker run`, podman:NAME[:TAG] `podman run`), the "
                   "variables customops sets given with --env and the repositories of this machine mounted")
    p.add_argument("--platform", default=DEFAULT_PLATFORM, metavar="OS/ARCH", type=platform,
                   help="with --image: the image of a multi-platform index (default: %(default)s)")
    p.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                   help="with --image: an argument for `docker run` before the image, e.g. --run-arg=--gpus=all "
                        "(repeatable)")
    p.set_defaults(run=run)


def _options(p: argparse.ArgumentParser, fail_on_help: str) -> None:
    """The options launch and env share (env's --fail-on means something of its own: `fail_on_help`)."""
    p.add_argument("--container-root", default="/", metavar="DIR", help="default: / (inside the container)")
    p.add_argument("--manifest", metavar="FILE", help="customops.toml (default: the repository's own, if any)")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), help=fail_on_help)
    p.add_argument("--mount", action="append", default=[], metavar="HOST_DIR:CONTAINER_DIR",
                   help="with --container-root: where a directory of this machine appears in the container (a "
                        "model repository of this machine that no mount covers is mounted at /models, as "
                        "`customops check` does)")
    p.add_argument("--existing-preload", choices=("first", "last"), default="last",
                   help="where LD_PRELOAD entries already in the environment go (default: after customops')")
    p.add_argument("server", nargs=argparse.REMAINDER, metavar="-- TRITONSERVER [ARG...]",
                   help="the server's command line, after --, e.g. -- tritonserver --model-repository=/models")


def server_argv(args: argparse.Namespace) -> list[str]:
    argv = list(args.server)
    if argv and argv[0] == "--":
        argv = argv[1:]
    return argv


def run(args: argparse.Namespace) -> int:
    from customops.app.launch_cache import command_line
    from customops.app.launch_decision import decide

    if args.image is None and args.run_arg:
        raise CustomopsError("--run-arg: only with --image (launch then runs `docker run`)")
    if args.image is not None:
        from customops.app.launch_image import decide_in_image

        if args.container_root != "/":
            raise CustomopsError("--image and --container-root: name one container")
        decision = decide_in_image(launch_request(args), args.image, failure_report, args.platform,
                                   tuple(args.run_arg))
    else:
        decision = decide(launch_request(args), failure_report)
    print_notes(decision.notes)
    if decision.report is not None:
        sys.stderr.write(decision.report)
        if not args.warn_only:
            print("customops: not starting the server: the check predicts failures (--warn-only starts it anyway)",
                  file=sys.stderr)
            return 1
    if args.dry_run:
        print(command_line(decision.argv, decision.environment))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    environment = {**os.environ, **decision.environment}
    program = decision.argv[0]
    executable = find_program(program, os.get_exec_path(environment))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; the server should not inherit that
    try:
        os.execve(executable, decision.argv, environment)
    except OSError as exc:
        raise not_started(program, exc) from None
    return 0  # not reached


def launch_request(args: argparse.Namespace) -> LaunchRequest:
    from customops.app.launch_decision import LaunchRequest
    from customops.codes import Severity

    return LaunchRequest(tuple(server_argv(args)), args.container_root, args.manifest,
                         Severity.parse(args.fail_on) if args.fail_on else None, check=not args.no_check,
                         existing_preload=args.existing_preload, mounts=tuple(args.mount),
                         use_cache=not args.no_cache, probe=probe_options(args) if args.probe else None)


def probe_options(args: argparse.Namespace) -> ProbeOptions:
    from customops.app.request import ProbeOptions

    return ProbeOptions(args.probe_python, args.probe_onnxruntime)


def find_program(program: str, path: list[str]) -> str:
    """The file to exec for `program`, looked up as bash looks it up (and as docker's exec form does): a
    name with a slash as it is; a name without one in each PATH directory (an empty entry is the working
    directory), where only a regular file counts: the first executable one, else a non-executable one is
    "Permission denied" (126), else "not found" (127), a directory of that name included. An empty name is
    not found either (bash: `: command not found`), not an error of customops."""
    if "/" in program:
        return program
    denied = False
    for directory in path if program else ():
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = True
    if denied:
        raise not_started(program, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    raise not_started(program, FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)))


def not_started(program: str, exc: OSError) -> CustomopsError:
    """What a shell says and returns when it cannot run a command: 127 for one that does not exist ("not
    found" for a name looked up in PATH), 126 for one that cannot be executed ("Permission denied")."""
    error = CustomopsError(f"{program or repr('')}: " + (
        "not found" if isinstance(exc, FileNotFoundError) and "/" not in program else exc.strerror or str(exc)))
    error.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
    return error


def print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"customops: note: {printable(note)}", file=sys.stderr)


def failure_report(launch: Launch) -> str | None:
    """The check's text report when it blocks (its notes included), else None."""
    if not launch.blocking:
        return None
    import io

    from customops.report.check import render_text
    from customops.report.escape import console

    assert launch.check is not None
    buffer = io.StringIO()
    render_text(launch.check, min(f.level for f in launch.blocking), 1, None, console(buffer))
    return buffer.getvalue()
