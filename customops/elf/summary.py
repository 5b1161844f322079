"""`customops scan`: what one ELF file asks of the loader and offers to others, as plain data."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from customops.elf.cache import ElfReader
from customops.elf.constants import (
    RELOCATIONS,
    SYMBOL_BINDS,
    SYMBOL_TYPES,
    SYMBOL_VISIBILITIES,
    VERSYM_HIDDEN,
    VERSYM_INDEX,
)
from customops.elf.demangle import demangle
from customops.elf.records import ElfInfo

_VERSION_NAME = re.compile(r"^(?P<prefix>[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z][A-Za-z0-9]*)*)_(?P<number>\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class CxxAbi:
    """Which libstdc++ string ABI a library's mangled names use (`_GLIBCXX_USE_CXX11_ABI`)."""

    flavour: str  # "cxx11", "pre-cxx11", "both", "none"
    defined_cxx11: int
    defined_old: int
    undefined_cxx11: int
    undefined_old: int


def version_key(name: str) -> tuple[str, tuple[int, ...]] | None:
    """GLIBCXX_3.4.30 -> ("GLIBCXX", (3, 4, 30)); names without a number (GLIBC_PRIVATE) -> None."""
    match = _VERSION_NAME.match(name)
    if not match:
        return None
    return match.group("prefix"), tuple(int(p) for p in match.group("number").split("."))


def version_maxima(info: ElfInfo) -> dict[str, str]:
    """The highest needed version per family (GLIBC, GLIBCXX, CXXABI, GCC, ...), across all providers."""
    best: dict[str, tuple[tuple[int, ...], str]] = {}
    for need in info.version_needs:
        for req in need.versions:
            key = version_key(req.name)
            if key and (key[0] not in best or key[1] > best[key[0]][0]):
                best[key[0]] = (key[1], req.name)
    return {prefix: name for prefix, (_, name) in sorted(best.items())}


def cxx_abi(info: ElfInfo) -> CxxAbi:
    symbols = info.symbols
    new = symbols.names_containing(b"__cxx11") | symbols.names_containing(b"B5cxx11")
    # The old ABI's std::string is the substitution `Ss`; only a demangler can tell it from an identifier.
    maybe_old = np.flatnonzero(symbols.names_containing(b"Ss"))
    old = np.zeros(symbols.count, dtype=bool)
    for i, name in zip(maybe_old.tolist(), symbols.names(maybe_old), strict=True):
        old[i] = name.startswith(b"_Z") and _is_old_string(name)
    counts = {label: (int(np.count_nonzero(new & mask)), int(np.count_nonzero(old & mask)))
              for label, mask in (("defined", symbols.defined_mask), ("undefined", symbols.undefined_mask))}
    has_new = counts["defined"][0] + counts["undefined"][0]
    has_old = counts["defined"][1] + counts["undefined"][1]
    flavour = "both" if has_new and has_old else "cxx11" if has_new else "pre-cxx11" if has_old else "none"
    return CxxAbi(flavour, counts["defined"][0], counts["defined"][1], counts["undefined"][0], counts["undefined"][1])


def _is_old_string(name: bytes) -> bool:
    text = demangle(name)
    if text == name.decode("utf-8", "replace"):
        return False
    return "__cxx11" not in text and ("std::string" in text or "std::basic_string<char" in text)


def scan_record(info: ElfInfo, with_symbols: bool = False, symbol_filter: str | None = None,
                defined_only: bool = False, undefined_only: bool = False, reader: ElfReader | None = None) -> dict:
    """The JSON shape of one file (schema customops.scan/1, customops/schemas/scan-1.json)."""
    abi = reader.facts(info, "cxx-abi", lambda i: cxx_abi(i).__dict__) if reader else cxx_abi(info).__dict__
    record = {
        "path": info.path,
        "class": info.elf_class,
        "byte_order": info.byte_order,
        "machine": info.machine,
        "type": info.elf_type,
        "osabi": info.osabi,
        "interpreter": info.interpreter,
        "soname": info.soname,
        "needed": list(info.needed),
        "rpath": list(info.rpath),
        "runpath": list(info.runpath),
        "flags": list(info.flag_names) + list(info.flag_1_names),
        "defined_count": info.defined_count,
        "undefined_count": info.undefined_count,
        "version_definitions": [
            {"index": d.index, "flags": d.flags, "base": d.is_base, "names": list(d.names)}
            for d in info.version_definitions
        ],
        "version_needs": {n.file: [v.name for v in n.versions] for n in info.version_needs},
        "weak_version_needs": {n.file: [v.name for v in n.versions if v.is_weak] for n in info.version_needs
                               if any(v.is_weak for v in n.versions)},
        "version_maxima": version_maxima(info),
        "cxx_abi": abi,
        "has_symtab": info.has_symtab,
        "has_section_headers": info.has_section_headers,
    }
    if with_symbols:
        record["symbols"] = symbol_records(info, symbol_filter, defined_only, undefined_only)
    return record


def symbol_records(info: ElfInfo, pattern: str | None, defined_only: bool, undefined_only: bool) -> list[dict]:
    import fnmatch

    symbols = info.symbols
    indices = np.arange(1, symbols.count)
    if defined_only:
        indices = indices[symbols.defined_mask[indices]]
    if undefined_only:
        indices = indices[symbols.undefined_mask[indices]]
    out = []
    slots = info.version_slots
    entries = symbols.entries
    for i, name in zip(indices.tolist(), symbols.names(indices), strict=True):
        shown = demangle(name)
        if pattern and not (fnmatch.fnmatchcase(shown, pattern) or fnmatch.fnmatchcase(name.decode("utf-8", "replace"),
                                                                                        pattern)):
            continue
        raw = int(symbols.versym[i]) if symbols.versym is not None else 0
        slot = slots.get(raw & VERSYM_INDEX)
        st_info = int(entries["st_info"][i])
        out.append({
            "name": name.decode("utf-8", "surrogateescape"),
            "demangled": shown,
            "bind": str(SYMBOL_BINDS.get(st_info >> 4, st_info >> 4)),  # a number elf.h does not name
            "type": str(SYMBOL_TYPES.get(st_info & 0xF, st_info & 0xF)),
            "visibility": SYMBOL_VISIBILITIES[int(entries["st_other"][i]) & 3].value,
            "defined": bool(symbols.defined_mask[i]),
            "size": int(entries["st_size"][i]),
            "version": slot.name if slot is not None else None,
            "version_hidden": bool(raw & VERSYM_HIDDEN),
            "relocation": RELOCATIONS[int(symbols.reloc_class[i])].value,
        })
    return out
