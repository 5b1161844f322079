"""Terminal view of `customops scan` records. Every name in a record comes from the file (sonames, needed
entries, symbols, version names), so each goes through markup(): shown escaped, never interpreted."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from customops.report.escape import console as new_console
from customops.report.escape import markup, printable


def render_scan(records: list[dict], console: Console | None = None) -> None:
    console = console or new_console()
    for record in records:
        console.rule(f"[bold]{markup(record['path'])}")
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
        if record["version_needs"]:
            table = Table("provider", "versions needed", box=None, pad_edge=False)
            for provider, versions in record["version_needs"].items():
                table.add_row(_cell(provider), _cell(", ".join(versions)))
            console.print(table)
            if record["version_maxima"]:
                console.print("highest: " + markup(", ".join(record["version_maxima"].values())))
        defs = [d for d in record["version_definitions"] if not d["base"]]
        if defs:
            console.print("defines versions: " + markup(", ".join(d["names"][0] for d in defs)))
        if "symbols" in record:
            table = Table("bind", "type", "vis", "", "version", "symbol", box=None, pad_edge=False)
            for s in record["symbols"]:
                table.add_row(s["bind"], s["type"], s["visibility"], "def" if s["defined"] else "UND",
                              _cell(s["version"] or ""), _cell(s["demangled"]))
            console.print(table)


def _cell(text: str) -> Text:
    """A table cell as plain text: rich tables would read a str as markup."""
    return Text(printable(text))
