"""Parse binutils' readelf output: the reference the ELF reader is tested against (as pyelftools
tests its readelf clone against binutils)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYMBOL_LINE = re.compile(
    r"^\s*(\d+): ([0-9a-f]+)\s+(0x[0-9a-f]+|\d+)\s+(\w+)\s+(\w+)\s+(\w+)\s+(\S+)(?:\s+(.*))?$"
)
BIND = {"UNIQUE": "GNU_UNIQUE"}


@dataclass
class ReadelfSymbol:
    name: str
    bind: str
    type: str
    visibility: str
    defined: bool
    size: int
    version: str | None


@dataclass
class ReadelfFacts:
    soname: str | None
    needed: list[str]
    rpath: list[str]
    runpath: list[str]
    symbols: list[ReadelfSymbol]
    version_needs: dict[str, list[str]]
    version_definitions: list[str]

    @property
    def defined_count(self) -> int:
        return sum(1 for s in self.symbols[1:] if s.defined)

    @property
    def undefined_count(self) -> int:
        return sum(1 for s in self.symbols[1:] if not s.defined)


def readelf(path: str, *args: str) -> str:
    return subprocess.run(["readelf", "-W", *args, path], capture_output=True, text=True, check=True).stdout


def readelf_facts(path: str, use_dynamic: bool = False) -> ReadelfFacts:
    dynamic = readelf(path, "-d")
    def tag(name: str) -> list[str]:
        return re.findall(rf"\({name}\)\s+.*?: \[(.*)\]", dynamic)
    soname = tag("SONAME")
    rpath, runpath = tag("RPATH"), tag("RUNPATH")
    syms_text = readelf(path, *(["-D"] if use_dynamic else []), "--dyn-syms")
    symbols = []
    for line in syms_text.splitlines():
        m = SYMBOL_LINE.match(line)
        if not m:
            continue
        _num, _value, size, stype, bind, vis, ndx, name = m.groups()
        name = (name or "").split(" (")[0]
        version = None
        if "@" in name:
            name, _, version = name.partition("@")
            version = version.lstrip("@")
        symbols.append(ReadelfSymbol(name, BIND.get(bind, bind), stype, vis, ndx != "UND",
                                     int(size, 16) if size.startswith("0x") else int(size), version))
    versions = readelf(path, "-V")
    needs: dict[str, list[str]] = {}
    current = None
    for line in versions.split("Version needs section", 1)[-1].splitlines() if "Version needs" in versions else []:
        if m := re.search(r"File: (\S+)\s+Cnt:", line):
            current = m.group(1)
            needs[current] = []
        elif (m := re.search(r"Name: (\S+)\s+Flags:", line)) and current is not None:
            needs[current].append(m.group(1))
    definitions = re.findall(r"Index: \d+\s+Cnt: \d+\s+Name: (\S+)", versions)
    return ReadelfFacts(soname[0] if soname else None, tag("NEEDED"), rpath[0].split(":") if rpath else [],
                        runpath[0].split(":") if runpath else [], symbols, needs, definitions)


def gcc_shared(out: Path, source: str, *flags: str) -> Path:
    """A shared library built from C `source` (gcc -shared -fPIC, extra `flags` last)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    src.unlink()
    return out
