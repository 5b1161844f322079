"""A mapped ELF file as the parser reads it: every read bounds-checked, virtual addresses translated through
PT_LOAD as the loader maps them, and (for elf.ranges) a record of each byte range read."""

from __future__ import annotations

import mmap

from customops.elf.constants import PT_LOAD, ElfClass
from customops.elf.header import ElfHeader, Segment
from customops.errors import ElfError

RELOCATION_TABLE = "relocation table"  # read by the parser, left out of a profile's loader ranges


class FileImage:
    """The file's bytes with the facts of its header that every table reader needs."""

    def __init__(self, path: str, data: mmap.mmap | bytes, touched: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.touched = touched
        # until `adopt`: only `need` is used (on the ELF header and the program header table)
        self.elf_class = 64
        self.endian = "<"
        self.byte_order = "little"
        self.machine = 0
        self.loads: list[Segment] = []

    def adopt(self, header: ElfHeader, segments: list[Segment]) -> None:
        """Take the word size, byte order and machine from the header, the mapping from the PT_LOADs."""
        self.elf_class = 64 if header.class_ is ElfClass.ELFCLASS64 else 32
        self.endian = header.endian
        self.byte_order = header.byte_order
        self.machine = header.machine
        self.loads = [s for s in segments if s.type == PT_LOAD]

    def fail(self, reason: str) -> ElfError:
        return ElfError(self.path, reason)

    def need(self, offset: int, length: int, what: str) -> None:
        """Raise unless the range lies inside the file; remember it when ranges are recorded."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise self.fail(f"{what} lies past the end of the file (offset {offset}, {length} bytes)")
        if self.touched is not None and what != RELOCATION_TABLE:
            self.touched.append((offset, length))

    def offset_of(self, vaddr: int, length: int, what: str) -> int:
        """Translate a virtual address (as in PT_DYNAMIC values) to a file offset through PT_LOAD; where
        segments overlap, the later one is mapped over the earlier, so it is the one read."""
        for s in reversed(self.loads):
            if s.vaddr <= vaddr and vaddr + length <= s.vaddr + s.filesz:
                off = vaddr - s.vaddr + s.offset
                self.need(off, length, what)
                return off
        raise self.fail(f"{what} at address {vaddr:#x} ({length} bytes) is not inside any loaded segment")
