"""Terminal view of `customops scan` records. Every name in a record comes from the file (sonames, needed
entries, symbols, version names), so each goes through markup(): shown escaped, never interpreted."""

from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table
from rich.text import Text

from customops.report.escape import console as new_console
from customops.report.escape import markup, printable
from customops.report.wrap import heading


def version_key(name: str) -> tuple:
    """GLIBC_2.2.5 < GLIBC_2.14 < GLIBC_2.34: names compared with their numbers as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def sorted_versions(record: dict) -> dict:
    """The record with its version lists sorted (providers by name, versions in version order); the
    definitions keep their index order."""
    record = dict(record)
    for key in ("version_needs", "weak_version_needs"):
        record[key] = {provider: sorted(versions, key=version_key)
                       for provider, versions in sorted(record[key].items())}
    record["version_maxima"] = dict(sorted(record["version_maxima"].items()))
    return record


def render_scan(records: list[dict], console: Console | None = None) -> None:
    """On a terminal, versions needed and symbols are tables fitted to its width; anywhere else (a pipe, a
    file) one provider and one full symbol per line, never truncated or wrapped, as `nm` prints them for
    grep. Version lists are sorted (sorted_versions)."""
    console = console or new_console()
    isatty = getattr(console.file, "isatty", None)
    terminal = bool(isatty and isatty())
    for record in map(sorted_versions, records):
        heading(console, f"[bold]{markup(record['path'])}")
        console.print(
            f"ELF{record['class']} {record['byte_order']}-endian {record['machine']} {record['type']}"
            f"  soname: [bold]{markup(record['soname'] or '(none)')}[/]"
            + (f"  interpreter: {markup(record['interpreter'])}" if record["interpreter"] else "")
        )
        if record["flags"]:
            console.print("flags: " + markup(" ".join(record["flags"])))
        console.print("needed: " + markup(", ".join(record["needed"]) or "(none)"))
        for key in ("rpath", "runpath"):
            if record[key]:
                console.print(f"{key}: " + markup(":".join(record[key])))
        console.print(f"exports {record['defined_count']} symbols, imports {record['undefined_count']}")
        abi = record["cxx_abi"]
        if abi["flavour"] != "none":
            console.print(
                f"C++ string ABI: [bold]{abi['flavour']}[/] (defined: {abi['defined_cxx11']} cxx11 / "
                f"{abi['defined_old']} old; undefined: {abi['undefined_cxx11']} cxx11 / {abi['undefined_old']} old)"
            )
        if record["version_needs"] and not terminal:
            console.print("versions needed:")
            for provider, versions in record["version_needs"].items():
                console.print(Text(f"  {printable(provider)}: {printable(', '.join(versions))}"), soft_wrap=True)
            if record["version_maxima"]:
                console.print("highest: " + markup(", ".join(record["version_maxima"].values())))
        elif record["version_needs"]:
            table = Table("provider", "versions needed", box=None, pad_edge=False)
            for provider, versions in record["version_needs"].items():
                table.add_row(_cell(provider), _cell(", ".join(versions)))
            console.print(table)
            if record["version_maxima"]:
                console.print("highest: " + markup(", ".join(record["version_maxima"].values())))
        defs = [d for d in record["version_definitions"] if not d["base"]]
        if defs:
            console.print("defines versions: " + markup(", ".join(sorted((d["names"][0] for d in defs),
                                                                         key=version_key))))
        if "symbols" in record and not terminal:
            _symbol_lines(console, record["symbols"])
        elif "symbols" in record:
            table = Table("bind", "type", "vis", "", "version", "symbol", box=None, pad_edge=False)
            for s in record["symbols"]:
                table.add_row(s["bind"], s["type"], s["visibility"], "def" if s["defined"] else "UND",
                              _cell(s["version"] or ""), _cell(s["demangled"]))
            console.print(table)


def _symbol_lines(console: Console, symbols: list[dict]) -> None:
    """bind, type, visibility, def|UND and version in aligned columns, then the whole demangled name."""
    rows = [(s["bind"], s["type"], s["visibility"], "def" if s["defined"] else "UND", printable(s["version"] or "-"),
             printable(s["demangled"])) for s in symbols]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(5)]
    for row in rows:
        line = " ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + " " + row[5]
        console.print(Text(line), soft_wrap=True)


def _cell(text: str) -> Text:
    """A table cell as plain text: rich tables would read a str as markup."""
    return Text(printable(text))
