"""customops env [options] -- tritonserver [args]: print the environment launch would set, as export lines."""

from __future__ import annotations

import argparse

from customops.commands.launch import _options, server_argv


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="print the LD_PRELOAD/LD_LIBRARY_PATH exports for Dockerfiles and scripts",
                       description=__doc__)
    _options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.launch import prepare
    from customops.mounts import parse_mount

    launch = prepare(server_argv(args), args.container_root, args.manifest, run_the_check=False,
                     existing_preload=args.existing_preload, mounts=tuple(parse_mount(m) for m in args.mount))
    print(launch.exports())
    return 0
