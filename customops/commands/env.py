"""customops env [options] -- tritonserver [args]: print the environment launch would set, as export lines.

Without --fail-on nothing is checked (the lines only). With --fail-on, env first runs the check launch
runs: findings at or above that severity print the check's report on standard error and no export line,
exit 1 (a Dockerfile's RUN or a script with `set -e` stops there)."""

from __future__ import annotations

import argparse
import sys

from customops.commands.launch import _options, server_argv


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="print the LD_PRELOAD/LD_LIBRARY_PATH exports for Dockerfiles and scripts",
                       description=__doc__)
    _options(p, "first run the check, as launch does: findings at or above this severity print its report on "
                "stderr and no export line, exit 1 (default: no check)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.app.launch import prepare
    from customops.triton.mounts import parse_mount

    mounts = tuple(parse_mount(m) for m in args.mount)
    if args.fail_on is None:
        launch = prepare(server_argv(args), args.container_root, args.manifest, run_the_check=False,
                         existing_preload=args.existing_preload, mounts=mounts)
        print(launch.exports())
        return 0
    from customops.codes import Severity
    from customops.commands.launch import failure_report, print_notes
    from customops.elf.cache import ElfReader

    launch = prepare(server_argv(args), args.container_root, args.manifest, Severity.parse(args.fail_on),
                     existing_preload=args.existing_preload, mounts=mounts, reader=ElfReader())
    report = failure_report(launch)
    print_notes(launch.shown_notes(report is not None))
    if report is not None:
        sys.stderr.write(report)
        print(f"customops: no exports: the check predicts findings at or above --fail-on {args.fail_on}",
              file=sys.stderr)
        return 1
    print(launch.exports())
    return 0
