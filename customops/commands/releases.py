"""customops releases [YY.MM]: what customops knows of each Triton container release, each value with its source."""

from __future__ import annotations

import argparse
import sys

from customops.errors import CustomopsError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("releases", help="list the Triton releases customops knows, or one with its sources",
                       description=__doc__)
    p.add_argument("release", nargs="?", metavar="YY.MM", help="one release (or `latest`), each value with the page "
                   "that states it")
    p.add_argument("--format", choices=("text", "json"), default="text", help="default: %(default)s")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.report.releases import as_json, render_one, render_text
    from customops.triton.releases import release, releases

    chosen = releases()
    if args.release is not None:
        found = release(chosen[-1].name if args.release == "latest" else args.release)
        if found is None:
            raise CustomopsError(f"unknown Triton release {args.release!r} (customops releases lists them: "
                                 f"{chosen[0].name} to {chosen[-1].name})")
        chosen = (found,)
    if args.format == "json":
        sys.stdout.write(as_json(chosen))
    else:
        sys.stdout.write(render_one(chosen[0]) if args.release else render_text(chosen))
    return 0
