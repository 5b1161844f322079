"""The byte ranges of a library that a container profile keeps (triton.profile): those the parser reads."""

from __future__ import annotations

from customops.elf.constants import EI_NIDENT
from customops.elf.parse import MALFORMED, Parser, open_mapped
from customops.errors import ElfError


def loader_ranges(path: str) -> list[tuple[int, int]]:
    """The byte ranges of a file the dynamic linker reads (and elf.parse parses), relocations aside:
    what a container profile keeps of each library. Merged, sorted (offset, length) pairs."""
    data, identity = open_mapped(path)
    touched = [(0, EI_NIDENT)]
    try:
        Parser(path, data, identity, touched).parse()
    except MALFORMED as exc:
        raise ElfError(path, f"malformed ELF file ({exc})") from None
    merged: list[tuple[int, int]] = []
    for start, length in sorted(touched):
        if merged and start <= merged[-1][0] + merged[-1][1]:
            last_start, last_length = merged[-1]
            merged[-1] = (last_start, max(last_length, start + length - last_start))
        elif length:
            merged.append((start, length))
    return merged
