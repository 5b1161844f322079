"""Terminal view of `customops scan` records."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def render_scan(records: list[dict], console: Console | None = None) -> None:
    console = console or Console(soft_wrap=True)
    for record in records:
        console.rule(f"[bold]{record['path']}")
        console.print(
            f"ELF{record['class']} {record['byte_order']}-endian {record['machine']} {record['type']}"
            f"  soname: [bold]{record['soname'] or '(none)'}[/]"
            + (f"  interpreter: {record['interpreter']}" if record["interpreter"] else "")
        )
        if record["flags"]:
            console.print("flags: " + " ".join(record["flags"]))
        console.print("needed: " + (", ".join(record["needed"]) or "(none)"))
        for key in ("rpath", "runpath"):
            if record[key]:
                console.print(f"{key}: " + ":".join(record[key]))
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
                table.add_row(provider, ", ".join(versions))
            console.print(table)
            if record["version_maxima"]:
                console.print("highest: " + ", ".join(record["version_maxima"].values()))
        defs = [d for d in record["version_definitions"] if not d["base"]]
        if defs:
            console.print("defines versions: " + ", ".join(d["names"][0] for d in defs))
        if "symbols" in record:
            table = Table("bind", "type", "vis", "", "version", "symbol", box=None, pad_edge=False)
            for s in record["symbols"]:
                table.add_row(s["bind"], s["type"], s["visibility"], "def" if s["defined"] else "UND",
                              s["version"] or "", s["demangled"])
            console.print(table)
