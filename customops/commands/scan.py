"""customops scan FILE...: what each ELF file needs from the loader and offers to others."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from customops.cachedir import CXX_ABI_SHAPE, MapOf

# A cached record of any other shape is a miss (customops.elf.summary.scan_record writes these).
NAMES = [str]
RECORD_SHAPE = {"class": frozenset({32, 64}), "byte_order": frozenset({"little", "big"}), "machine": str, "type": str,
                "osabi": str, "interpreter": (str, None), "soname": (str, None), "needed": NAMES, "rpath": NAMES,
                "runpath": NAMES, "flags": NAMES, "defined_count": int, "undefined_count": int,
                "version_definitions": [{"index": int, "flags": int, "base": bool, "names": NAMES}],
                "version_needs": MapOf(NAMES), "weak_version_needs": MapOf(NAMES), "version_maxima": MapOf(str),
                "cxx_abi": CXX_ABI_SHAPE, "has_symtab": bool, "has_section_headers": bool}
SYMBOL_SHAPE = {"name": str, "demangled": str, "bind": str, "type": str, "visibility": str, "defined": bool,
                "size": int, "version": (str, None), "version_hidden": bool, "relocation": str}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="show an ELF file as the dynamic linker sees it",
                       description="Show what an ELF file needs from the dynamic linker and offers to others.")
    p.add_argument("files", nargs="+", metavar="FILE", help="an ELF file (shared library or executable)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people, json (customops.scan/1) for scripts (default: text)")
    p.add_argument("--symbols", action="store_true",
                   help="list dynamic symbols (demangled): a table on a terminal, else one full symbol per line")
    p.add_argument("--filter", metavar="GLOB", help="only symbols whose raw or demangled name matches GLOB")
    p.add_argument("--defined-only", action="store_true", help="only the symbols the file defines")
    p.add_argument("--undefined-only", action="store_true", help="only the symbols the file needs from others")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the parse cache")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="parse cache directory (default: $XDG_CACHE_HOME/customops)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with_symbols = args.symbols or bool(args.filter)
    records = None if args.no_cache else _cached(args, with_symbols)
    if records is None:
        records = _scan(args, with_symbols)
    if args.format == "json":
        from customops.report.escape import dumps
        from customops.report.scan import sorted_versions
        from customops.schemas import SCAN as SCAN_SCHEMA

        sys.stdout.write(dumps({"schema": SCAN_SCHEMA, "files": [sorted_versions(r) for r in records]}))
        sys.stdout.write("\n")
    else:
        from customops.report.scan import render_scan

        render_scan(records)
    return 0


def _options(args: argparse.Namespace, with_symbols: bool) -> str:
    return json.dumps([with_symbols, args.filter, args.defined_only, args.undefined_only])


def _cached(args: argparse.Namespace, with_symbols: bool) -> list[dict] | None:
    """Warm path: every record from the result cache, before numpy or the ELF reader is imported."""
    from customops.cachedir import default_cache_dir, file_key, load_result

    cache = args.cache_dir or default_cache_dir()
    shape = {**RECORD_SHAPE, "symbols": [SYMBOL_SHAPE]} if with_symbols else RECORD_SHAPE
    records = []
    for path in args.files:
        try:
            key = file_key(path)
        except OSError:
            return None  # let the reader produce the one-line error
        record = load_result(cache, "scan", (key, _options(args, with_symbols)), shape)
        if record is None:
            return None
        records.append({"path": path, **record})
    return records


def _scan(args: argparse.Namespace, with_symbols: bool) -> list[dict]:
    from customops.cachedir import file_key, store_result
    from customops.elf.cache import ElfReader
    from customops.elf.summary import scan_record

    reader = ElfReader(args.cache_dir, use_cache=not args.no_cache)
    infos = [reader.read(path) for path in args.files]  # bad input raises ElfError -> exit 2
    records = [scan_record(info, with_symbols, args.filter, args.defined_only, args.undefined_only, reader)
               for info in infos]
    if reader.cache_dir is not None:
        for path, record in zip(args.files, records, strict=True):
            store_result(reader.cache_dir, "scan", (file_key(path), _options(args, with_symbols)),
                         {k: v for k, v in record.items() if k != "path"})
    return records
