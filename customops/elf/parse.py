"""Read an ELF file the way the dynamic linker does: ELF header, program headers and PT_DYNAMIC.

ld.so never looks at section headers, so neither does this parser for anything the loader uses: the dynamic
symbol table, its strings, the version tables, the hash tables and the relocations are all found through
PT_DYNAMIC and decoded from raw bytes (numpy views over an mmap of the file). That is what makes
section-stripped files work, and it is 20-25x faster than pyelftools' per-symbol iteration on framework
libraries. Section headers are read only to learn whether a `.symtab` exists (registrations use it) and, for
a file with no hash table at all, how many dynamic symbols there are.

Every malformed or hostile input ends in `ElfError(path, reason)`; nothing else escapes.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable

import numpy as np

from customops import safeio, sigbus
from customops.elf.constants import (
    DF_BIND_NOW,
    DF_SYMBOLIC,
    DT_BIND_NOW,
    DT_FLAGS,
    DT_FLAGS_1,
    DT_GNU_HASH,
    DT_HASH,
    DT_NEEDED,
    DT_NULL,
    DT_RPATH,
    DT_RUNPATH,
    DT_SONAME,
    DT_STRSZ,
    DT_STRTAB,
    DT_SYMBOLIC,
    DT_SYMENT,
    DT_SYMTAB,
    DT_VERSYM,
    DYN_ENTRY_SIZE,
    EI_NIDENT,
    GNU_HASH_HEADER_WORDS,
    PN_XNUM,
    PT_DYNAMIC,
    PT_GNU_STACK,
    PT_INTERP,
    SHT_DYNSYM,
    SHT_SYMTAB,
    SYM_ENTRY_SIZE,
    SYSV_HASH_HEADER_WORDS,
)
from customops.elf.hashes import check_hash_tables, hashes_no_symbol, symbol_count
from customops.elf.header import ElfHeader, Segment, program_headers, read_header, section_headers
from customops.elf.image import FileImage
from customops.elf.mapping import NO_DYNAMIC, check_mapping
from customops.elf.records import ElfInfo, FileIdentity, TableLayout
from customops.elf.relocations import NO_RELOCATION, check_relocation_tables, named_extent, relocation_classes
from customops.elf.symbols import SymbolTable
from customops.elf.versions import version_definitions, version_needs
from customops.errors import ElfError, InputError

# What a hostile file can make struct and numpy raise; parse_elf turns each into an ElfError.
MALFORMED = (struct.error, ValueError, IndexError, OverflowError, TypeError, UnicodeError)


def open_mapped(path: str) -> tuple[mmap.mmap | bytes, FileIdentity]:
    """Map a file read-only; every OS-level failure becomes an ElfError naming the file. Opened without
    blocking (a FIFO is refused, not waited on) and only if it is a regular file."""
    try:
        fd = safeio.open_regular(path)
    except InputError as exc:
        raise ElfError(path, "is a directory, not an ELF file" if exc.reason == "not a regular file (a directory)"
                       else exc.reason) from None
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            raise ElfError(path, "empty file, not an ELF object")
        sigbus.before_mapping()
        data: mmap.mmap | bytes = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ElfError(path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    return data, FileIdentity.of(st)


def parse_elf(path: str, data: mmap.mmap | bytes, identity: FileIdentity, relocations: bool = True) -> ElfInfo:
    """Parse a mapped file. Any structural problem is reported as ElfError(path, reason). Without
    `relocations`, the pass over every relocation is skipped: the symbols carry no relocation classes, for a
    load tree that binds nothing (resolve --tree-only)."""
    try:
        return (Parser if relocations else _UnrelocatedParser)(path, data, identity).parse()
    except ElfError:
        raise
    except MALFORMED as exc:
        raise ElfError(path, f"malformed ELF file ({exc})") from None


class _SectionHints:
    """What the section headers tell (the loader never reads them): whether there are any, whether a
    `.symtab` exists, and the `.dynsym` entry count (for a file without hash tables)."""

    def __init__(self, data: mmap.mmap | bytes, header: ElfHeader) -> None:
        sections = section_headers(data, header)
        self.present = sections is not None
        self.has_symtab = any(s.type == SHT_SYMTAB for s in sections or ())
        self.dynsym_count: int | None = None
        for s in sections or ():
            if s.type == SHT_DYNSYM and s.entsize:
                self.dynsym_count = s.size // s.entsize


class Parser:
    """Builds ElfInfo from a mapped file. `relocation_classes` is the hook elf.cache overrides."""

    def __init__(self, path: str, data: mmap.mmap | bytes, identity: FileIdentity,
                 touched: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self.identity = identity
        self.image = FileImage(path, data, touched)

    def parse(self) -> ElfInfo:
        image = self.image
        header = read_header(image.data, self.path)
        image.need(EI_NIDENT, header.size - EI_NIDENT, "ELF header")
        if header.phnum == PN_XNUM:
            raise image.fail("program header count in section 0 (PN_XNUM) is not supported")
        segments = program_headers(image.data, header, self.path)
        image.need(header.phoff, header.phentsize * header.phnum, "program header table")  # checked: recorded
        image.adopt(header, segments)
        check_mapping(image, segments, header.type)
        interpreter = self._interpreter(segments)
        hints = _SectionHints(image.data, header)
        dynamic = self._dynamic(segments)
        stack = next((s.flags for s in reversed(segments) if s.type == PT_GNU_STACK), None)  # the last wins
        return self._build(header, interpreter, dynamic, hints, stack)

    def _named_extent(self, single: dict[int, int], counted: int) -> int:
        """The symbols relocations name beyond the hash tables' count (a library that exports nothing, with
        DT_GNU_HASH only). A relocation naming a symbol the table cannot hold inside the file is an ElfError,
        not a shorter table: a library that seemed to import nothing would be predicted to load."""
        extent = named_extent(self.image, single)
        size = extent * SYM_ENTRY_SIZE[self.image.elf_class]
        if size > counted:
            self.image.offset_of(single[DT_SYMTAB], size,
                                 f"dynamic symbol table (a relocation names symbol {extent - 1})")
        return extent

    def relocation_classes(self, dynamic: dict[int, int], count: int) -> tuple[np.ndarray, np.ndarray]:
        return relocation_classes(self.image, dynamic, count)

    def _interpreter(self, segments: list[Segment]) -> str | None:
        for s in segments:
            if s.type == PT_INTERP:
                self.image.need(s.offset, s.filesz, "PT_INTERP")
                return _decode(bytes(self.image.data[s.offset:s.offset + s.filesz]).split(b"\0", 1)[0])
        return None

    def _dynamic(self, segments: list[Segment]) -> list[tuple[int, int]]:
        """The entries of the last non-empty PT_DYNAMIC, read where it is mapped (as ld.so's l_ld)."""
        image = self.image
        dyn_seg = next((s for s in reversed(segments) if s.type == PT_DYNAMIC and s.filesz), None)
        if dyn_seg is None:
            raise image.fail(NO_DYNAMIC)
        filesz = dyn_seg.filesz
        entsize = DYN_ENTRY_SIZE[image.elf_class]
        off = image.offset_of(dyn_seg.vaddr, filesz, "dynamic section")
        words = np.frombuffer(
            image.data, image.endian + ("i8" if image.elf_class == 64 else "i4"), (filesz // entsize) * 2, off
        ).reshape(-1, 2)
        tags = words[:, 0]
        end = np.flatnonzero(tags == DT_NULL)
        n = int(end[0]) if len(end) else len(tags)
        dtype = image.endian + ("u8" if image.elf_class == 64 else "u4")
        values = np.frombuffer(image.data, dtype, (filesz // entsize) * 2, off).reshape(-1, 2)[:n, 1]
        return list(zip(tags[:n].tolist(), values.tolist(), strict=True))

    def _string_reader(self, single: dict[int, int]) -> tuple[Callable[[int], str], int, int]:
        """A reader of DT_STRTAB strings, with the table's file offset and size."""
        image = self.image
        if DT_STRTAB not in single:
            raise image.fail("dynamic section has no DT_STRTAB")
        strsz = single.get(DT_STRSZ, 0)
        stroff = image.offset_of(single[DT_STRTAB], strsz, "dynamic string table")

        def string(offset: int) -> str:
            if offset >= strsz:
                raise image.fail(f"string offset {offset} is past the end of the dynamic string table")
            end = image.data.find(b"\0", stroff + offset, stroff + strsz)
            if end < 0:
                raise image.fail("dynamic string table is not NUL-terminated")
            return _decode(bytes(image.data[stroff + offset:end]))

        return string, stroff, strsz

    def _layout(self, single: dict[int, int], stroff: int, strsz: int, hints: _SectionHints) -> TableLayout:
        """Where the symbol, version and hash tables lie, each checked to be inside a loaded segment."""
        image = self.image
        if DT_SYMTAB not in single:
            raise image.fail("dynamic section has no DT_SYMTAB")
        syment = SYM_ENTRY_SIZE[image.elf_class]
        if single.get(DT_SYMENT, syment) != syment:
            raise image.fail(f"unexpected DT_SYMENT {single[DT_SYMENT]}")
        gnu_off = sysv_off = None
        if DT_GNU_HASH in single:
            gnu_off = image.offset_of(single[DT_GNU_HASH], 4 * GNU_HASH_HEADER_WORDS, "DT_GNU_HASH table")
        if DT_HASH in single:
            sysv_off = image.offset_of(single[DT_HASH], 4 * SYSV_HASH_HEADER_WORDS, "DT_HASH table")
        count = symbol_count(image, gnu_off, sysv_off, hints.dynsym_count)
        if hashes_no_symbol(image, gnu_off, sysv_off, count):
            count = max(count, self._named_extent(single, count * syment))
        symtab_off = image.offset_of(single[DT_SYMTAB], count * syment, "dynamic symbol table")
        check_hash_tables(image, gnu_off, sysv_off, count)
        versym_off = None
        if DT_VERSYM in single:
            versym_off = image.offset_of(single[DT_VERSYM], count * 2, "version symbol table")
        return TableLayout(symtab_off, count, stroff, strsz, versym_off, gnu_off, sysv_off)

    def _build(self, header: ElfHeader, interpreter: str | None, dyn: list[tuple[int, int]],
               hints: _SectionHints, stack_flags: int | None) -> ElfInfo:
        image = self.image
        needed_offsets = [value for tag, value in dyn if tag == DT_NEEDED]
        # As elf_get_dynamic_info (glibc elf/get-dynamic-info.h): a later entry of a tag overrides an earlier one.
        single = {tag: value for tag, value in dyn if tag != DT_NEEDED}
        string, stroff, strsz = self._string_reader(single)
        layout = self._layout(single, stroff, strsz, hints)
        reloc_class, reloc_first = self.relocation_classes(single, layout.symbol_count)
        symbols = SymbolTable(image, layout, reloc_class, reloc_first)
        return ElfInfo(
            path=self.path,
            identity=self.identity,
            elf_class=image.elf_class,
            byte_order=image.byte_order,
            machine_code=image.machine,
            type_code=header.type,
            osabi_code=header.osabi,
            interpreter=interpreter,
            soname=string(single[DT_SONAME]) if DT_SONAME in single else None,
            needed=tuple(string(o) for o in needed_offsets),
            rpath=_split_path(string(single[DT_RPATH])) if DT_RPATH in single else (),
            runpath=_split_path(string(single[DT_RUNPATH])) if DT_RUNPATH in single else (),
            flags=single.get(DT_FLAGS, 0) | (DF_SYMBOLIC if DT_SYMBOLIC in single else 0)
            | (DF_BIND_NOW if DT_BIND_NOW in single else 0),
            flags_1=single.get(DT_FLAGS_1, 0),
            version_definitions=version_definitions(image, single, string),
            version_needs=version_needs(image, single, string),
            has_section_headers=hints.present,
            has_symtab=hints.has_symtab,
            layout=layout,
            stack_flags=stack_flags,
            symbols=symbols,
        )


class _UnrelocatedParser(Parser):
    """Every symbol reads as named by no relocation, for a load tree (which reads none), so parsing costs no
    pass over the tables; their bounds are still checked, so the same files are refused."""

    def relocation_classes(self, dynamic: dict[int, int], count: int) -> tuple[np.ndarray, np.ndarray]:
        check_relocation_tables(self.image, dynamic, count)
        return np.zeros(count, dtype=np.uint8), np.full(count, NO_RELOCATION, dtype=np.uint32)


def _split_path(value: str) -> tuple[str, ...]:
    """DT_RPATH/DT_RUNPATH are colon-separated; ld.so keeps empty elements (they mean the cwd)."""
    return tuple(value.split(":"))


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
