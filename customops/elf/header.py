"""The one reader of the ELF header and of the program and section header tables.

Everything that looks at an ELF file's header goes through `read_header`: the parser (elf.parse), the
profile's relocation summary (triton.profile) and the linker model's open_verify. Field names follow elf.h's
Elf64_Ehdr / Elf64_Phdr / Elf64_Shdr without their prefixes.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from customops.elf.constants import (
    EI_CLASS,
    EI_DATA,
    EI_NIDENT,
    EI_OSABI,
    ELF_MAGIC,
    PF_W,
    PF_X,
    PT_LOAD,
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHF_WRITE,
    SHT_PROGBITS,
    ElfClass,
    ElfData,
)
from customops.errors import ElfError

Buffer = bytes | bytearray | mmap.mmap | memoryview

GIT_LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
# Elf32_Ehdr / Elf64_Ehdr after e_ident, Elf{32,64}_Phdr and Elf{32,64}_Shdr, without the byte-order prefix
_EHDR_FORMAT = {ElfClass.ELFCLASS32: "HHIIIIIHHHHHH", ElfClass.ELFCLASS64: "HHIQQQIHHHHHH"}
_PHDR_FORMAT = {ElfClass.ELFCLASS32: "IIIIIIII", ElfClass.ELFCLASS64: "IIQQQQQQ"}
_SHDR_FORMAT = {ElfClass.ELFCLASS32: "IIIIIIIIII", ElfClass.ELFCLASS64: "IIQQQQIIQQ"}


class HeaderProblem(Enum):
    """Why `read_header` refused a file, in the order it checks."""

    NOT_ELF = "not an ELF file"  # shorter than e_ident, or not the ELF magic
    BAD_CLASS = "invalid ELF class"
    BAD_DATA = "invalid ELF data encoding"
    TRUNCATED = "ELF header past the end of the file"


class ElfHeaderError(ElfError):
    """An ElfError that says, typed, which check of the header failed."""

    def __init__(self, path: str, reason: str, problem: HeaderProblem) -> None:
        super().__init__(path, reason)
        self.problem = problem


@dataclass(frozen=True)
class ElfHeader:
    """Elf32_Ehdr / Elf64_Ehdr, decoded in the file's byte order."""

    class_: ElfClass
    data: ElfData
    osabi: int
    type: int
    machine: int
    version: int
    entry: int
    phoff: int
    shoff: int
    flags: int
    ehsize: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int

    @property
    def bits(self) -> int:
        return self.class_.bits

    @property
    def endian(self) -> str:
        return self.data.endian

    @property
    def byte_order(self) -> str:
        return self.data.byte_order

    @property
    def size(self) -> int:
        """sizeof(ElfW(Ehdr)) for this class: 52 or 64 bytes."""
        return header_size(self.class_)

    @property
    def program_header_size(self) -> int:
        """sizeof(ElfW(Phdr)) for this class: 32 or 56 bytes (what e_phentsize must be for ld.so)."""
        return struct.calcsize("<" + _PHDR_FORMAT[self.class_])

    @property
    def section_header_size(self) -> int:
        """sizeof(ElfW(Shdr)) for this class: 40 or 64 bytes."""
        return struct.calcsize("<" + _SHDR_FORMAT[self.class_])


class Segment(NamedTuple):
    """One program header (ElfW(Phdr)); the field order is Elf64_Phdr's, whatever the class."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


class SectionHeader(NamedTuple):
    """One section header (ElfW(Shdr))."""

    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


def header_size(elf_class: ElfClass) -> int:
    return EI_NIDENT + struct.calcsize("<" + _EHDR_FORMAT[elf_class])


def is_git_lfs_pointer(head: bytes) -> bool:
    """Whether a file that is not ELF is the text Git LFS commits in place of the file (`git lfs pull`
    replaces it with the content)."""
    return head.startswith(GIT_LFS_POINTER)


def read_header(data: Buffer, path: str = "") -> ElfHeader:
    """The ELF header at the start of `data` (the whole file, or at least its first 64 bytes). Raises
    ElfHeaderError, checking in this order: the magic, EI_CLASS, EI_DATA, then the header's length."""
    if len(data) < EI_NIDENT or data[:len(ELF_MAGIC)] != ELF_MAGIC:
        lfs = is_git_lfs_pointer(bytes(data[:len(GIT_LFS_POINTER)]))
        reason = "not an ELF file: a Git LFS pointer, not the library" if lfs else "not an ELF file (bad magic)"
        raise ElfHeaderError(path, reason, HeaderProblem.NOT_ELF)
    try:
        elf_class = ElfClass(data[EI_CLASS])
    except ValueError:
        raise ElfHeaderError(path, f"invalid ELF class {data[EI_CLASS]}", HeaderProblem.BAD_CLASS) from None
    try:
        encoding = ElfData(data[EI_DATA])
    except ValueError:
        raise ElfHeaderError(path, f"invalid ELF data encoding {data[EI_DATA]}", HeaderProblem.BAD_DATA) from None
    fmt = encoding.endian + _EHDR_FORMAT[elf_class]
    length = struct.calcsize(fmt)
    if EI_NIDENT + length > len(data):
        raise ElfHeaderError(path, f"ELF header lies past the end of the file (offset {EI_NIDENT}, {length} bytes)",
                             HeaderProblem.TRUNCATED)
    fields = struct.unpack_from(fmt, data, EI_NIDENT)
    return ElfHeader(elf_class, encoding, data[EI_OSABI], *fields)


def require(data: Buffer, offset: int, length: int, what: str, path: str = "") -> None:
    """Raise ElfError unless `length` bytes at `offset` lie inside `data`."""
    if offset < 0 or length < 0 or offset + length > len(data):
        raise ElfError(path, f"{what} lies past the end of the file (offset {offset}, {length} bytes)")


def program_headers(data: Buffer, header: ElfHeader, path: str = "") -> list[Segment]:
    """The program header table, as _dl_map_object_from_fd reads it: entries at least ElfW(Phdr) wide, the
    table inside the file (ElfError otherwise). e_phnum is taken as is (PN_XNUM is the caller's to refuse)."""
    fmt = header.endian + _PHDR_FORMAT[header.class_]
    if header.phnum and header.phentsize < struct.calcsize(fmt):
        raise ElfError(path, f"program header entry size {header.phentsize} is too small")
    require(data, header.phoff, header.phentsize * header.phnum, "program header table", path)
    is64 = header.class_ is ElfClass.ELFCLASS64
    out = []
    for i in range(header.phnum):
        f = struct.unpack_from(fmt, data, header.phoff + i * header.phentsize)
        if is64:
            p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_align = f
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_flags, p_align = f
        out.append(Segment(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align))
    return out


def section_headers(data: Buffer, header: ElfHeader) -> list[SectionHeader] | None:
    """The section header table, or None where there is none or it is broken (entries too small, the table
    past the end of the file): the loader never reads it, so a broken one is ignored, never an error."""
    fmt = header.endian + _SHDR_FORMAT[header.class_]
    off, entsize, num = header.shoff, header.shentsize, header.shnum
    if not off or not num or entsize < struct.calcsize(fmt) or off + entsize * num > len(data):
        return None
    return [SectionHeader(*struct.unpack_from(fmt, data, off + i * entsize)) for i in range(num)]


def readonly_data(data: Buffer, header: ElfHeader, path: str, with_code: bool = False) -> list[tuple[int, int]]:
    """(start, end) file ranges of a library's read-only data: its allocated, read-only, non-executable
    PROGBITS sections (.rodata and the like), or, without section headers, its read-only PT_LOAD segments
    (`with_code`: those holding code too, where the read-only data shares the code's segment). Scanning the
    sections, not the segment, reads a few per cent of a framework library: libtorch_cpu.so's one read-only
    segment is 340 MB, its .rodata 18 MB."""
    sections = section_headers(data, header)
    if sections:
        return [(s.offset, s.offset + s.size) for s in sections if s.type == SHT_PROGBITS
                and s.flags & (SHF_ALLOC | SHF_WRITE | SHF_EXECINSTR) == SHF_ALLOC]
    return [(p.offset, p.offset + p.filesz) for p in program_headers(data, header, path)
            if p.type == PT_LOAD and not p.flags & PF_W and (with_code or not p.flags & PF_X)]
