"""Names in a file's `.symtab` (local symbols included), which the loader never reads but registrations
(static initialisers that register ops) leave behind."""

from __future__ import annotations

import re

from customops.elf.constants import SHT_SYMTAB
from customops.elf.header import read_header, section_headers
from customops.elf.parse import open_mapped
from customops.errors import ElfError


def symtab_strings(path: str, pattern: bytes) -> list[bytes]:
    """Names in the `.strtab` of `.symtab` that contain `pattern`: found in the raw string table, without
    iterating the (often huge) symbol table. Empty when the file has no `.symtab` (or no readable one)."""
    data, _identity = open_mapped(path)
    try:
        sections = section_headers(data, read_header(data, path)) or []
    except ElfError:
        return []
    symtab = next((s for s in sections if s.type == SHT_SYMTAB), None)
    if symtab is None or symtab.link >= len(sections):
        return []
    strtab = sections[symtab.link]
    if strtab.offset + strtab.size > len(data):
        return []
    table = bytes(data[strtab.offset:strtab.offset + strtab.size])
    found = []
    for match in re.finditer(re.escape(pattern), table):
        begin = table.rfind(b"\0", 0, match.start()) + 1
        end = table.find(b"\0", match.end())
        found.append(table[begin:end if end >= 0 else len(table)])
    return sorted(set(found))
