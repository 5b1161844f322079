"""What a library runs as it is loaded, before anyone calls it: its constructors (DT_INIT, the DT_INIT_ARRAY
entries, an executable's DT_PREINIT_ARRAY), read as ld.so's call_init reads them once the object is relocated,
and the facts a decoder of their code needs (elf.reach): which symbol each GOT slot holds, the executable
segments' bytes, and the names of the functions. Only what x86-64 needs is read: another machine's code is not
decoded (elf.reach says so)."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from customops.elf.constants import (
    DT_INIT,
    DT_INIT_ARRAY,
    DT_INIT_ARRAYSZ,
    DT_JMPREL,
    DT_NULL,
    DT_PLTREL,
    DT_PLTRELSZ,
    DT_PREINIT_ARRAY,
    DT_PREINIT_ARRAYSZ,
    DT_RELA,
    DT_RELASZ,
    DT_STRSZ,
    DT_STRTAB,
    DT_SYMTAB,
    EM_X86_64,
    PF_X,
    PT_DYNAMIC,
    SHT_DYNSYM,
    SHT_SYMTAB,
    STT_FUNC,
    STT_GNU_IFUNC,
    ElfClass,
)
from customops.elf.header import program_headers, read_header, section_headers
from customops.elf.image import FileImage
from customops.errors import ElfError
from customops.textenum import TextEnum

R_X86_64_64, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE = 1, 6, 7, 8
MAX_ENTRIES = 4096  # constructors read from one array: more is no library a compiler made
RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
SYM64 = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                  ("st_value", "<u8"), ("st_size", "<u8")])


class ConstructorKind(TextEnum):
    """Where ld.so finds a constructor (elf/dl-init.c call_init, _dl_init)."""

    PREINIT_ARRAY = "DT_PREINIT_ARRAY"
    INIT = "DT_INIT"
    INIT_ARRAY = "DT_INIT_ARRAY"


@dataclass(frozen=True)
class Constructor:
    kind: ConstructorKind
    index: int  # its place in its array (0 for DT_INIT)
    address: int

    @property
    def where(self) -> str:
        return str(self.kind) if self.kind is ConstructorKind.INIT else f"{self.kind}[{self.index}]"


@dataclass
class CodeImage:
    """A library's code as the decoder reads it: `slots` maps a GOT slot's address to the symbol its
    relocation names; `functions` the start address of each named function to its name."""

    path: str
    machine: int
    constructors: tuple[Constructor, ...] = ()
    slots: dict[int, bytes] = field(default_factory=dict)
    functions: dict[int, bytes] = field(default_factory=dict)
    image: FileImage | None = None
    _starts: list[int] = field(default_factory=list)

    @property
    def decodable(self) -> bool:
        return self.machine == EM_X86_64 and self.image is not None

    def code_at(self, address: int, limit: int) -> bytes:
        """Up to `limit` bytes of an executable segment from `address` (b"" outside every one)."""
        assert self.image is not None
        for s in reversed(self.image.loads):
            if s.flags & PF_X and s.vaddr <= address < s.vaddr + s.filesz:
                start = address - s.vaddr + s.offset
                end = min(start + limit, s.offset + s.filesz, self.image.size)
                return bytes(self.image.data[start:end])
        return b""

    def next_function(self, address: int) -> int | None:
        """The start of the first named function after `address`: where falling through stops."""
        if not self._starts:
            self._starts = sorted(self.functions)
        i = bisect.bisect_right(self._starts, address)
        return self._starts[i] if i < len(self._starts) else None

    def name(self, address: int) -> str:
        raw = self.functions.get(address)
        return raw.decode("utf-8", "replace") if raw else f"the function at {address:#x}"


def read_code(path: str, data: bytes | memoryview | object) -> CodeImage:
    """The constructors and code facts of one mapped file (ElfError on a broken one)."""
    header = read_header(data, path)  # type: ignore[arg-type]
    image = FileImage(path, data)  # type: ignore[arg-type]
    segments = program_headers(data, header, path)  # type: ignore[arg-type]
    image.adopt(header, segments)
    if header.machine != EM_X86_64 or header.class_ is not ElfClass.ELFCLASS64 or image.endian != "<":
        return CodeImage(path, header.machine)
    dynamic = _dynamic(image, segments)
    word = _word_reader(image)
    arrays = [(dynamic[tag], min(dynamic.get(size, 0) // 8, MAX_ENTRIES)) for tag, size in
              ((DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ), (DT_INIT_ARRAY, DT_INIT_ARRAYSZ)) if tag in dynamic]
    slots, relative = _relocations(image, dynamic, [base + 8 * i for base, n in arrays for i in range(n)])
    constructors = [*_array(ConstructorKind.PREINIT_ARRAY, dynamic, DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ, relative,
                            word)]
    if dynamic.get(DT_INIT):
        constructors.append(Constructor(ConstructorKind.INIT, 0, dynamic[DT_INIT]))
    constructors += _array(ConstructorKind.INIT_ARRAY, dynamic, DT_INIT_ARRAY, DT_INIT_ARRAYSZ, relative, word)
    return CodeImage(path, header.machine, tuple(constructors), slots, _function_names(image, header), image)


def _dynamic(image: FileImage, segments: list) -> dict[int, int]:
    dyn = next((s for s in reversed(segments) if s.type == PT_DYNAMIC and s.filesz), None)
    if dyn is None:
        return {}
    off = image.offset_of(dyn.vaddr, dyn.filesz - dyn.filesz % 16, "dynamic section")
    entries: dict[int, int] = {}
    for tag, value in struct.iter_unpack("<qQ", bytes(image.data[off:off + dyn.filesz - dyn.filesz % 16])):
        if tag == DT_NULL:
            break
        entries.setdefault(tag, value)
    return entries


def _word_reader(image: FileImage) -> Callable[[int], int | None]:
    def word(address: int) -> int | None:
        for s in reversed(image.loads):
            if s.vaddr <= address and address + 8 <= s.vaddr + s.filesz:
                off = address - s.vaddr + s.offset
                return int.from_bytes(image.data[off:off + 8], "little") if off + 8 <= image.size else None
        return None
    return word


def _relocations(image: FileImage, dynamic: dict[int, int], entries: list[int]
                 ) -> tuple[dict[int, bytes], dict[int, int]]:
    """GOT slot -> symbol (R_X86_64_64, GLOB_DAT, JUMP_SLOT), and each constructor array entry's address ->
    its value (RELATIVE's addend): a framework library has a million RELATIVE relocations, read in bulk."""
    tables = [(dynamic[DT_RELA], dynamic.get(DT_RELASZ, 0))] if DT_RELA in dynamic else []
    if DT_JMPREL in dynamic and dynamic.get(DT_PLTREL, DT_RELA) == DT_RELA:
        tables.append((dynamic[DT_JMPREL], dynamic.get(DT_PLTRELSZ, 0)))
    names = _dynamic_names(image, dynamic)
    slots: dict[int, bytes] = {}
    relative: dict[int, int] = {}
    for vaddr, size in tables:
        n = size // RELA.itemsize
        if not n:
            continue
        rows = np.frombuffer(image.data, RELA, n, image.offset_of(vaddr, n * RELA.itemsize, "relocation table"))
        types, syms = rows["info"] & 0xFFFFFFFF, rows["info"] >> 32
        for i in np.flatnonzero((types == R_X86_64_RELATIVE) & np.isin(rows["offset"], entries)).tolist():
            relative[int(rows["offset"][i])] = int(rows["addend"][i]) & 0xFFFFFFFFFFFFFFFF
        named = np.isin(types, (R_X86_64_64, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT)) & (syms > 0)
        for i in np.flatnonzero(named).tolist():
            name = names(int(syms[i]))
            if name is not None:
                slots[int(rows["offset"][i])] = name
    return slots, relative


def _dynamic_names(image: FileImage, dynamic: dict[int, int]) -> Callable[[int], bytes | None]:
    """A dynamic symbol's name by index, read through DT_SYMTAB and DT_STRTAB (None where out of bounds)."""
    if DT_SYMTAB not in dynamic or DT_STRTAB not in dynamic:
        return lambda index: None
    strsz = dynamic.get(DT_STRSZ, 0)
    strtab = image.offset_of(dynamic[DT_STRTAB], strsz, "string table")

    def name(index: int) -> bytes | None:
        try:
            entry = image.offset_of(dynamic[DT_SYMTAB] + index * SYM64.itemsize, SYM64.itemsize, "symbol")
        except ElfError:  # a symbol index past the table names nothing
            return None
        st_name = int.from_bytes(image.data[entry:entry + 4], "little")
        if st_name >= strsz:
            return None
        end = image.data.find(b"\0", strtab + st_name, strtab + strsz)
        return bytes(image.data[strtab + st_name:end if end >= 0 else strtab + strsz])
    return name


def _array(kind: ConstructorKind, dynamic: dict[int, int], tag: int, size_tag: int, relative: dict[int, int],
           word: Callable[[int], int | None]) -> list[Constructor]:
    """Each entry of DT_INIT_ARRAY or DT_PREINIT_ARRAY as it is once relocated: a RELATIVE relocation's addend
    where one applies, else the stored word (a non-PIE executable's, or a packed relocation's addend kept in
    place). Entries 0 and -1 (old crt markers) are not functions."""
    if tag not in dynamic:
        return []
    base, count = dynamic[tag], min(dynamic.get(size_tag, 0) // 8, MAX_ENTRIES)
    found = []
    for i in range(count):
        value = relative.get(base + 8 * i, word(base + 8 * i))
        if value not in (None, 0, 0xFFFFFFFFFFFFFFFF):
            found.append(Constructor(kind, i, value))
    return found


def _function_names(image: FileImage, header) -> dict[int, bytes]:
    """Function start -> name, from `.symtab` (local functions too: _GLOBAL__sub_I_ops.cpp) or `.dynsym`."""
    sections = section_headers(image.data, header) or []
    table = next((s for s in sections if s.type == SHT_SYMTAB), None) or next(
        (s for s in sections if s.type == SHT_DYNSYM), None)
    if table is None or table.link >= len(sections) or table.offset + table.size > image.size:
        return {}
    strings = sections[table.link]
    if strings.offset + strings.size > image.size:
        return {}
    rows = np.frombuffer(image.data, SYM64, table.size // SYM64.itemsize, table.offset)
    kinds = rows["st_info"] & 0xF
    wanted = np.flatnonzero(((kinds == STT_FUNC) | (kinds == STT_GNU_IFUNC)) & (rows["st_shndx"] != 0)
                            & (rows["st_value"] != 0))
    blob = bytes(image.data[strings.offset:strings.offset + strings.size])
    names: dict[int, bytes] = {}
    for i in wanted.tolist():
        start = int(rows["st_name"][i])
        end = blob.find(b"\0", start)
        names.setdefault(int(rows["st_value"][i]), blob[start:end if end >= 0 else len(blob)])
    return names

