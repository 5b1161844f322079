"""customops scan FILE...: what each ELF file needs from the loader and offers to others."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="show an ELF file as the dynamic linker sees it",
                       description="Show what an ELF file needs from the dynamic linker and offers to others.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--symbols", action="store_true", help="list dynamic symbols (demangled)")
    p.add_argument("--filter", metavar="GLOB", help="only symbols whose raw or demangled name matches GLOB")
    p.add_argument("--defined-only", action="store_true")
    p.add_argument("--undefined-only", action="store_true")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the parse cache")
    p.add_argument("--cache-dir", type=Path, help="parse cache directory (default: $XDG_CACHE_HOME/customops)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.scan import SCAN_SCHEMA, scan_record
    from customops.scanners.elfcache import ElfReader

    reader = ElfReader(args.cache_dir, use_cache=not args.no_cache)
    infos = [reader.read(path) for path in args.files]  # bad input raises ElfError -> exit 2
    with_symbols = args.symbols or bool(args.filter)
    records = [scan_record(info, with_symbols, args.filter, args.defined_only, args.undefined_only, reader)
               for info in infos]
    if args.format == "json":
        sys.stdout.write(json.dumps({"schema": SCAN_SCHEMA, "files": records}))
        sys.stdout.write("\n")
    else:
        from customops.report.scan import render_scan

        render_scan(records)
    return 0
