"""The command line: argument parsing and dispatch only; each subcommand lives in customops/commands/.

Exit status: 0 all good, 1 something will fail (or findings at/above --fail-on), 2 bad input or usage
(one line on stderr naming the file and the reason), 3 an internal error (a bug in customops).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from importlib import import_module
from typing import NoReturn

from customops import __version__, cleanup
from customops.errors import CustomopsError

SUBCOMMANDS = ("check", "launch", "env", "explain", "scan", "resolve", "probe", "profile")
EXIT_INTERNAL = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="customops",
        description="Will these custom-operation libraries load in this Triton container, and will they collide?",
    )
    parser.add_argument("--version", action="version", version=f"customops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        import_module(f"customops.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except CustomopsError as exc:
        print(f"customops: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # never a traceback for users; CUSTOMOPS_DEBUG=1 shows it for developers
        if os.environ.get("CUSTOMOPS_DEBUG"):
            raise
        print(f"customops: internal error: {type(exc).__name__}: {exc} (set CUSTOMOPS_DEBUG=1 for details)",
              file=sys.stderr)
        return EXIT_INTERNAL


def run() -> NoReturn:
    """The `customops` process: `main` without the cyclic garbage collector, then an exit that skips the
    interpreter's teardown. A check of framework libraries builds ~10^5 objects that all live until the
    report; the collector re-walking them and the teardown freeing them one by one cost ~0.15 s and ~0.1 s
    of a cold check, and nothing customops holds needs a finaliser: files are closed and cache entries
    renamed into place before `main` returns."""
    gc.disable()
    code = main()
    cleanup.remove_all()  # what is still registered (a throw-away skeleton): os._exit skips atexit
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)
