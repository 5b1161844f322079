"""customops explain CODE: what a finding code detects, why it matters, how to fix and suppress it."""

from __future__ import annotations

import argparse

from customops.errors import CustomopsError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="explain a finding code (or list them all)", description=__doc__)
    p.add_argument("code", nargs="?", help="e.g. CO302; omit to list every code")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.codes import CODES, explain

    if args.code is None:
        for code in CODES.values():
            print(f"{code.code}  {code.severity!s:<7}  {code.title}")
        return 0
    code = args.code.upper()
    if code not in CODES:
        raise CustomopsError(f"unknown code {args.code!r} (customops explain lists them all)")
    print(explain(code))
    return 0
