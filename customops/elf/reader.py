"""Read an ELF file the way the dynamic linker does: ELF header, program headers and PT_DYNAMIC.

ld.so never looks at section headers, so neither does this reader for anything the loader uses:
the dynamic symbol table, its strings, the version tables, the hash tables and the relocations are
all found through PT_DYNAMIC and decoded from raw bytes (numpy views over an mmap of the file).
That is what makes section-stripped files work, and it is 20-25x faster than pyelftools'
per-symbol iteration on framework libraries (reference/frameworks.md §5). Section headers are read
only to learn whether a `.symtab` exists (registrations use it) and, for a file with no hash table
at all, how many dynamic symbols there are.

Every malformed or hostile input ends in `ElfError(path, reason)`; nothing else escapes.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from customops.errors import ElfError, InputError

# e_ident and header values
ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
ET_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
PF_W = 2
ET_EXEC, ET_DYN = 2, 3
SHT_SYMTAB, SHT_DYNSYM = 2, 11
PN_XNUM = 0xFFFF

# dynamic tags (elf.h)
DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 2, 4, 5, 6
DT_RELA, DT_RELASZ, DT_RELAENT, DT_STRSZ, DT_SYMENT = 7, 8, 9, 10, 11
DT_SONAME, DT_RPATH, DT_SYMBOLIC, DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL = 14, 15, 16, 17, 18, 19, 20
DT_TEXTREL, DT_JMPREL, DT_BIND_NOW, DT_RUNPATH, DT_FLAGS = 22, 23, 24, 29, 30
DT_GNU_HASH = 0x6FFFFEF5
DT_VERSYM, DT_FLAGS_1, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFB, 0x6FFFFFFC, 0x6FFFFFFD
DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF

# DT_FLAGS and DT_FLAGS_1 bits that change loading
DF_SYMBOLIC, DF_BIND_NOW = 0x2, 0x8
DF_1_NOW, DF_1_GLOBAL, DF_1_NODELETE, DF_1_NOOPEN, DF_1_NODEFLIB, DF_1_PIE = 0x1, 0x2, 0x8, 0x40, 0x800, 0x8000000
FLAG_NAMES = {DF_SYMBOLIC: "SYMBOLIC", DF_BIND_NOW: "BIND_NOW", 0x1: "ORIGIN", 0x4: "TEXTREL", 0x10: "STATIC_TLS"}
FLAG_1_NAMES = {
    DF_1_NOW: "NOW", DF_1_GLOBAL: "GLOBAL", 0x4: "GROUP", DF_1_NODELETE: "NODELETE", 0x10: "LOADFLTR",
    0x20: "INITFIRST", DF_1_NOOPEN: "NOOPEN", 0x80: "ORIGIN", 0x100: "DIRECT", 0x400: "INTERPOSE",
    DF_1_NODEFLIB: "NODEFLIB", 0x1000: "NODUMP", DF_1_PIE: "PIE",
}

# symbols
STB_LOCAL, STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 0, 1, 2, 10
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4
STT_COMMON, STT_TLS, STT_GNU_IFUNC = 5, 6, 10
STV_DEFAULT, STV_INTERNAL, STV_HIDDEN, STV_PROTECTED = 0, 1, 2, 3
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
BIND_NAMES = {STB_LOCAL: "LOCAL", STB_GLOBAL: "GLOBAL", STB_WEAK: "WEAK", STB_GNU_UNIQUE: "GNU_UNIQUE"}
TYPE_NAMES = {
    STT_NOTYPE: "NOTYPE", STT_OBJECT: "OBJECT", STT_FUNC: "FUNC", STT_SECTION: "SECTION", STT_FILE: "FILE",
    STT_COMMON: "COMMON", STT_TLS: "TLS", STT_GNU_IFUNC: "IFUNC",
}
VISIBILITY_NAMES = {STV_DEFAULT: "DEFAULT", STV_INTERNAL: "INTERNAL", STV_HIDDEN: "HIDDEN", STV_PROTECTED: "PROTECTED"}

# versions
VER_FLG_BASE, VER_FLG_WEAK = 0x1, 0x2
VERSYM_HIDDEN, VERSYM_INDEX = 0x8000, 0x7FFF

# Relocation classes recorded per undefined symbol: does ld.so need it when the object is loaded,
# or only at the first call through the PLT (lazy binding)?
RELOC_NONE, RELOC_LAZY, RELOC_NOW, RELOC_COPY = 0, 1, 2, 3
RELOC_CLASS_NAMES = {RELOC_NONE: "none", RELOC_LAZY: "lazy", RELOC_NOW: "now", RELOC_COPY: "copy"}

# The PLT relocation type that ld.so may bind lazily, per machine (psABI constants).
JUMP_SLOT_BY_MACHINE = {3: 7, 62: 7, 183: 1026, 40: 22, 20: 21, 21: 21, 22: 11, 243: 5, 258: 5}
# R_*_COPY per machine: resolved at load, skipping the executable that holds the copy.
COPY_BY_MACHINE = {3: 5, 62: 5, 183: 1024, 40: 20, 20: 19, 21: 19, 22: 9, 243: 4, 258: 4}
# Machines whose DT_HASH words are 8 bytes wide in ELFCLASS64 (s390x and Alpha).
WIDE_SYSV_HASH_MACHINES = {22, 0x9026}


@dataclass(frozen=True)
class FileIdentity:
    """What the cache keys on: a file is unchanged while these are."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class VersionDefinition:
    """One `.gnu.version_d` entry: the index used in versym, and its name (then its parents)."""

    index: int
    flags: int
    hash: int
    names: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.names[0] if self.names else ""

    @property
    def is_base(self) -> bool:
        return bool(self.flags & VER_FLG_BASE)


@dataclass(frozen=True)
class VersionRequirement:
    """One `.gnu.version_r` aux entry: a version this object needs from one file."""

    name: str
    index: int
    flags: int
    hash: int

    @property
    def is_weak(self) -> bool:
        return bool(self.flags & VER_FLG_WEAK)


@dataclass(frozen=True)
class VersionNeed:
    file: str
    versions: tuple[VersionRequirement, ...]


@dataclass(frozen=True)
class VersionSlot:
    """ld.so's `l_versions[ndx]`: what a versym index means in this object."""

    name: str
    hash: int
    hidden: bool
    filename: str | None  # the file named in the verneed entry, None for own definitions


@dataclass(frozen=True)
class TableLayout:
    """Where the loader-visible tables lie in the file; enough to rebuild views without re-parsing."""

    symtab_offset: int
    symbol_count: int
    strtab_offset: int
    strtab_size: int
    versym_offset: int | None
    gnu_hash_offset: int | None
    sysv_hash_offset: int | None


@dataclass(frozen=True)
class ElfInfo:
    """Everything customops needs to know about one ELF file, as the dynamic linker sees it."""

    path: str
    identity: FileIdentity
    elf_class: int  # 32 or 64
    byte_order: str  # "little" or "big"
    machine_code: int
    elf_type: str
    osabi_code: int
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    flags: int
    flags_1: int
    version_definitions: tuple[VersionDefinition, ...]
    version_needs: tuple[VersionNeed, ...]
    has_section_headers: bool
    has_symtab: bool
    layout: TableLayout
    symbols: SymbolTable = field(repr=False, compare=False)

    @property
    def machine(self) -> str:
        return machine_name(self.machine_code)

    @property
    def osabi(self) -> str:
        from elftools.elf.enums import ENUM_EI_OSABI

        names = {v: k for k, v in ENUM_EI_OSABI.items() if isinstance(v, int)}
        return names.get(self.osabi_code, f"OSABI_{self.osabi_code}")

    @property
    def flag_names(self) -> tuple[str, ...]:
        return _bit_names(self.flags, FLAG_NAMES)

    @property
    def flag_1_names(self) -> tuple[str, ...]:
        return _bit_names(self.flags_1, FLAG_1_NAMES)

    @property
    def binds_now(self) -> bool:
        """-z now: every relocation is processed at load, lazy binding is off for this object."""
        return bool(self.flags & DF_BIND_NOW or self.flags_1 & DF_1_NOW)

    @property
    def symbolic(self) -> bool:
        return bool(self.flags & DF_SYMBOLIC)

    @property
    def nodeflib(self) -> bool:
        return bool(self.flags_1 & DF_1_NODEFLIB)

    @property
    def noopen(self) -> bool:
        return bool(self.flags_1 & DF_1_NOOPEN)

    @cached_property
    def version_slots(self) -> dict[int, VersionSlot]:
        """ld.so's l_versions: versym index -> version, from both verdef and verneed entries."""
        slots: dict[int, VersionSlot] = {}
        for definition in self.version_definitions:
            if not definition.is_base:  # "The name of the base version should not be available for matching"
                slots[definition.index] = VersionSlot(definition.name, definition.hash, False, None)
        for need in self.version_needs:
            for req in need.versions:
                slots[req.index & VERSYM_INDEX] = VersionSlot(
                    req.name, req.hash, bool(req.index & VERSYM_HIDDEN), need.file
                )
        return slots

    @property
    def defined_count(self) -> int:
        return self.symbols.defined_count

    @property
    def undefined_count(self) -> int:
        return self.symbols.undefined_count


GIT_LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
NOT_ELF_KINDS = {"git-lfs-pointer": "a Git LFS pointer, not the library"}


def not_elf_kind(head: bytes) -> str | None:
    """What a file that is not ELF is, when its first bytes say so: "git-lfs-pointer" for the text Git LFS
    commits in place of the file (`git lfs pull` replaces it with the content); None otherwise."""
    return "git-lfs-pointer" if head.startswith(GIT_LFS_POINTER) else None


def machine_name(code: int) -> str:
    from elftools.elf.enums import ENUM_E_MACHINE

    for name, value in ENUM_E_MACHINE.items():
        if value == code:
            return name
    return f"EM_{code}"


def _bit_names(value: int, names: dict[int, str]) -> tuple[str, ...]:
    return tuple(name for bit, name in names.items() if value & bit)


def gnu_hashes(names: list[bytes]) -> np.ndarray:
    """dl_new_hash of many names at once, in closed form: h = 5381 * 33**n + sum(c[j] * 33**(n-1-j))
    modulo 2**32, so every byte's term is one array product and each name's sum one reduceat (no loop
    over character positions: mangled C++ names run to thousands of bytes)."""
    if sum(map(len, names)) < 256:  # a few short names: the dozen array operations cost more than a loop
        return np.fromiter(map(gnu_hash, names), dtype=np.uint32, count=len(names))
    lengths = np.fromiter(map(len, names), dtype=np.intp, count=len(names))
    powers = np.ones(int(lengths.max()) + 1, dtype=np.uint32)
    np.cumprod(np.full(len(powers) - 1, 33, dtype=np.uint32), dtype=np.uint32, out=powers[1:])
    hashes = np.uint32(5381) * powers[lengths]
    data = np.frombuffer(b"".join(names), dtype=np.uint8)
    if len(data):
        offset = np.int32 if len(data) < 2**31 else np.int64  # small temporaries: fresh pages are slow
        ends = np.cumsum(lengths, dtype=offset)
        exponents = np.repeat(ends - 1, lengths)
        np.subtract(exponents, np.arange(len(data), dtype=offset), out=exponents)
        terms = data * powers[exponents]
        nonempty = np.flatnonzero(lengths)
        hashes[nonempty] += np.add.reduceat(terms, np.subtract(ends, lengths)[nonempty], dtype=np.uint32)
    return hashes


def gnu_hash(name: bytes) -> int:
    """dl_new_hash: the DT_GNU_HASH function."""
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    """_dl_elf_hash: the DT_HASH function."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


class SymbolTable:
    """The dynamic symbol table as read-only numpy views over the mapped file.

    Names stay bytes in the string table until asked for: ld.so matches raw bytes plus version,
    and most symbols of a framework library are never looked at.
    """

    def __init__(
        self,
        path: str,
        data: mmap.mmap | bytes,
        layout: TableLayout,
        elf_class: int,
        byte_order: str,
        machine_code: int,
        reloc_class: np.ndarray,
        reloc_first: np.ndarray,
    ) -> None:
        self.path = path
        self._data = data
        self.count = layout.symbol_count
        endian = "<" if byte_order == "little" else ">"
        self._native = (byte_order == sys.byteorder)
        self.entries = np.frombuffer(
            data, dtype=_sym_dtype(elf_class, endian), count=self.count, offset=layout.symtab_offset
        )
        self._strtab_offset = layout.strtab_offset
        self._strtab_end = layout.strtab_offset + layout.strtab_size
        self.versym = (
            None
            if layout.versym_offset is None
            else np.frombuffer(data, dtype=endian + "u2", count=self.count, offset=layout.versym_offset)
        )
        self.reloc_class = reloc_class
        self.reloc_first = reloc_first  # position of the symbol's first relocation in processing order
        self._hash = _HashTable.open(data, layout, elf_class, endian, machine_code, self.count)

    # -- per-symbol access -------------------------------------------------------------------
    def name(self, index: int) -> bytes:
        return self.string_at(int(self.entries["st_name"][index]))

    def string_at(self, offset: int) -> bytes:
        start = self._strtab_offset + offset
        if offset < 0 or start >= self._strtab_end:
            raise ElfError(self.path, f"string offset {offset} is past the end of the string table")
        end = self._data.find(b"\0", start, self._strtab_end)
        if end < 0:
            raise ElfError(self.path, "string table is not NUL-terminated")
        return bytes(self._data[start:end])

    def lookup(self, name: bytes, gnu: int | None = None, sysv: int | None = None) -> tuple[int, ...]:
        """Indices of the symbols named `name`, in the order ld.so's hash walk meets them."""
        if self._hash is None:
            return ()
        if self._hash.kind == "gnu":
            gnu, sysv = gnu_hash(name) if gnu is None else gnu, 0
        else:
            gnu, sysv = 0, sysv_hash(name) if sysv is None else sysv
        candidates = tuple(self._hash.candidates(gnu, sysv))
        if not candidates:
            return ()
        names, data, size = self.entries["st_name"], self._data, len(name)
        base, end = self._strtab_offset, self._strtab_end
        found = []
        for i in candidates:  # the name at st_name, NUL-terminated right after it (no name is decoded)
            start = base + int(names[i])
            stop = start + size
            if stop < end and data[start:stop] == name and data[stop] == 0:
                found.append(i)
        return tuple(found)

    def lookup_many(self, names: list[bytes], hashes: np.ndarray) -> list[tuple[int, ...]] | None:
        """`lookup` for many names with their GNU hashes, in one pass over the hash table; None where that is
        not possible (a DT_HASH-only or damaged table): look those up one by one."""
        if self._hash is None:
            return [()] * len(names)
        if self._hash.kind != "gnu":
            return None
        found = self._hash.gnu_candidates(hashes)
        if found is None:
            return None
        data, end = self._data, self._strtab_end
        results: list[tuple[int, ...]] = [()] * len(names)
        queries, indices = found
        offsets = (self.entries["st_name"][indices].astype(np.int64) + self._strtab_offset).tolist()
        for q, i, start in zip(queries.tolist(), indices.tolist(), offsets, strict=True):
            name = names[q]
            stop = start + len(name)
            if stop < end and data[start:stop] == name and data[stop] == 0:
                results[q] += (i,)  # in walk order; more than one only for a name under several versions
        return results

    @cached_property
    def hash_halves(self) -> np.ndarray:
        """Each symbol's GNU hash without its low bit: read from DT_GNU_HASH's chain for the symbols the
        table holds (the low bit there marks a chain's end), computed from the name for the others.
        Comparing these finds which objects may export a name without building a single name."""
        halves = np.zeros(self.count, dtype=np.uint32)
        start = 1
        if self._hash is not None and self._hash.kind == "gnu":
            so = self._hash.symoffset
            halves[so:] = self._hash.chain_array >> 1
            start, end = 1, so
        else:
            end = self.count
        missing = np.arange(start, end)
        halves[missing] = gnu_hashes(self.names(missing)) >> 1
        return halves

    @property
    def uses_gnu_hash(self) -> bool:
        return self._hash is not None and self._hash.kind == "gnu"

    @property
    def has_hash_table(self) -> bool:
        """ld.so skips objects whose hash table is empty (l_nbuckets == 0) during lookups."""
        return self._hash is not None and self._hash.nbuckets > 0

    # -- vectorised views --------------------------------------------------------------------
    @cached_property
    def binds(self) -> np.ndarray:
        return self.entries["st_info"] >> 4

    @cached_property
    def types(self) -> np.ndarray:
        return self.entries["st_info"] & 0xF

    @cached_property
    def visibilities(self) -> np.ndarray:
        return self.entries["st_other"] & 0x3

    @cached_property
    def defined_mask(self) -> np.ndarray:
        mask = self.entries["st_shndx"] != SHN_UNDEF
        if self.count:
            mask = mask.copy()
            mask[0] = False
        return mask

    @cached_property
    def undefined_mask(self) -> np.ndarray:
        mask = self.entries["st_shndx"] == SHN_UNDEF
        if self.count:
            mask = mask.copy()
            mask[0] = False
        return mask

    @cached_property
    def exported_mask(self) -> np.ndarray:
        """Definitions another object can bind to: global/weak/unique, default or protected."""
        binds = self.binds
        bind_ok = (binds == STB_GLOBAL) | (binds == STB_WEAK) | (binds == STB_GNU_UNIQUE)
        vis_ok = (self.visibilities == STV_DEFAULT) | (self.visibilities == STV_PROTECTED)
        return self.defined_mask & bind_ok & vis_ok

    @property
    def defined_count(self) -> int:
        return int(np.count_nonzero(self.defined_mask))

    @property
    def undefined_count(self) -> int:
        return int(np.count_nonzero(self.undefined_mask))

    def names(self, indices: np.ndarray | list[int]) -> list[bytes]:
        """Names of the given symbols, sliced from the mapped string table (vectorised ends)."""
        offsets = self.entries["st_name"][np.asarray(indices, dtype=np.intp)].astype(np.int64)
        if not len(offsets):
            return []
        nuls = self._nuls
        if int(offsets.max()) >= self._strtab_end - self._strtab_offset:
            raise ElfError(self.path, f"string offset {int(offsets.max())} is past the end of the string table")
        where = np.searchsorted(nuls, offsets)
        if int(where.max()) >= len(nuls):
            raise ElfError(self.path, "string table is not NUL-terminated")
        data, base = self._data, self._strtab_offset
        return [data[a:b] for a, b in zip((offsets + base).tolist(), (nuls[where] + base).tolist(), strict=True)]

    def names_containing(self, pattern: bytes) -> np.ndarray:
        """Mask of the symbols whose name contains `pattern`: the pattern is found once in the string table,
        and each occurrence is matched to the name spans that cover it (no name is built)."""
        import re

        mask = np.zeros(self.count, dtype=bool)
        occurrences = re.compile(re.escape(pattern)).finditer(self._data, self._strtab_offset, self._strtab_end)
        found = np.fromiter((m.start() for m in occurrences), dtype=np.int64) - self._strtab_offset
        starts, ends, valid = self._name_spans
        if not len(found) or not valid.any():
            return mask
        last_start = ends[valid] - len(pattern)  # an occurrence must start at or before this
        mask[valid] = (np.searchsorted(found, last_start, side="right")
                       > np.searchsorted(found, starts[valid], side="left"))
        return mask

    @cached_property
    def _name_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start and end (the terminating NUL) of every name in the string table, and which are in range."""
        nuls = self._nuls
        starts = self.entries["st_name"].astype(np.int64)
        valid = starts < (int(nuls[-1]) if len(nuls) else 0)
        ends = np.full(self.count, -1, dtype=np.int64)
        ends[valid] = nuls[np.searchsorted(nuls, starts[valid])]
        return starts, ends, valid

    @cached_property
    def _nuls(self) -> np.ndarray:
        """Offsets of the string table's NULs (where each name ends). The table is read in place, never
        copied: copying libtensorflow_cc.so.2's 82 MB cost ~0.07 s of fresh pages, while reading the
        mapping faults file pages in sixteen at a time."""
        return _nul_positions(memoryview(self._data)[self._strtab_offset:self._strtab_end])

    @cached_property
    def fields(self) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int] | None]:
        """st_info, st_other, st_shndx, st_value, st_size and versym as Python lists: per-symbol access
        from numpy scalars costs ~1 µs each, which the linker model would pay millions of times."""
        e = self.entries
        return (e["st_info"].tolist(), e["st_other"].tolist(), e["st_shndx"].tolist(), e["st_value"].tolist(),
                e["st_size"].tolist(), None if self.versym is None else self.versym.tolist())


def _nul_positions(data: bytes | memoryview, chunk: int = 1 << 22) -> np.ndarray:
    """Offsets of every NUL byte, found a few MB at a time in one reused buffer. `np.flatnonzero(view == 0)`
    would allocate a mask as large as the table (82 MB for libtensorflow_cc.so.2), and first-touching that
    much fresh memory took anywhere from 0.02 s to 0.9 s on the benchmark's virtual machine; the reused
    buffer keeps it at the low end."""
    view = np.frombuffer(data, dtype=np.uint8)
    mask = np.empty(min(chunk, len(view)), dtype=bool)
    found = []
    for start in range(0, len(view), chunk):
        part = view[start:start + chunk]
        np.equal(part, 0, out=mask[:len(part)])
        found.append(np.flatnonzero(mask[:len(part)]) + start)
    return np.concatenate(found) if found else np.empty(0, dtype=np.intp)


class _HashTable:
    """DT_GNU_HASH (preferred by ld.so when present) or DT_HASH, walked exactly as do_lookup_x does.
    Arrays stay numpy views over the file; Python lists for the walk are made on first use."""

    def __init__(self, kind: str, nbuckets: int, symoffset: int, buckets: np.ndarray, chain: np.ndarray,
                 bloom: np.ndarray | None = None, shift: int = 0, word_bits: int = 64) -> None:
        self.kind = kind
        self.nbuckets = nbuckets
        self.symoffset = symoffset
        self.buckets_array = buckets
        self.chain_array = chain
        self.bloom_array = bloom
        self.shift = shift
        self.word_bits = word_bits

    @cached_property
    def _lists(self) -> tuple[list[int], list[int], list[int]]:
        bloom = [] if self.bloom_array is None else self.bloom_array.tolist()
        return self.buckets_array.tolist(), self.chain_array.tolist(), bloom

    @classmethod
    def open(cls, data, layout: TableLayout, elf_class: int, endian: str, machine: int, count: int):  # type: ignore[no-untyped-def]
        if layout.gnu_hash_offset is not None:
            off = layout.gnu_hash_offset
            nbuckets, symoffset, nwords, shift = np.frombuffer(data, endian + "u4", 4, off).tolist()
            bloom = np.frombuffer(data, endian + ("u8" if elf_class == 64 else "u4"), nwords, off + 16)
            boff = off + 16 + nwords * (elf_class // 8)
            buckets = np.frombuffer(data, endian + "u4", nbuckets, boff)
            chain = np.frombuffer(data, endian + "u4", max(count - symoffset, 0), boff + 4 * nbuckets)
            return cls("gnu", nbuckets, symoffset, buckets, chain, bloom, shift, elf_class)
        if layout.sysv_hash_offset is not None:
            off = layout.sysv_hash_offset
            wide = elf_class == 64 and machine in WIDE_SYSV_HASH_MACHINES
            word, size = endian + ("u8" if wide else "u4"), 8 if wide else 4
            nbucket, nchain = np.frombuffer(data, word, 2, off).tolist()
            buckets = np.frombuffer(data, word, nbucket, off + 2 * size)
            chain = np.frombuffer(data, word, min(nchain, count), off + (2 + nbucket) * size)
            return cls("sysv", nbucket, 0, buckets, chain)
        return None

    def gnu_candidates(self, hashes: np.ndarray, max_steps: int = 64) -> tuple[np.ndarray, np.ndarray] | None:
        """`candidates` for many GNU hashes at once: (query index, symbol index) of every chain entry the walk
        meets whose hash matches, in walk order per query. None when some chain is longer than `max_steps`
        (a damaged table): the caller walks those one by one."""
        empty = np.empty(0, dtype=np.intp)
        bloom = self.bloom_array
        if not self.nbuckets or bloom is None or not len(bloom) or not len(hashes):
            return empty, empty
        h = hashes.astype(np.uint64)
        bits = np.uint64(self.word_bits)
        words = bloom.astype(np.uint64)[((h // bits) & np.uint64(len(bloom) - 1)).astype(np.intp)]
        passes = ((words >> (h % bits)) & (words >> ((h >> np.uint64(self.shift)) % bits)) & np.uint64(1)) == 1
        start = self.buckets_array.astype(np.int64)[(h % np.uint64(self.nbuckets)).astype(np.intp)]
        queries = np.flatnonzero(passes & (start != 0) & (start >= self.symoffset))
        position, wanted = start[queries], hashes[queries].astype(np.uint32)
        chain, found_q, found_i = self.chain_array, [], []
        for _ in range(max_steps):
            inside = position - self.symoffset < len(chain)
            queries, position, wanted = queries[inside], position[inside], wanted[inside]
            if not len(queries):
                break
            value = chain[position - self.symoffset].astype(np.uint32)
            match = ((value ^ wanted) >> 1) == 0
            found_q.append(queries[match])
            found_i.append(position[match])
            more = (value & 1) == 0
            queries, position, wanted = queries[more], position[more] + 1, wanted[more]
        else:
            if len(queries):
                return None
        if not found_q:
            return empty, empty
        q, i = np.concatenate(found_q), np.concatenate(found_i)
        order = np.lexsort((i, q))
        return q[order], i[order]

    def candidates(self, gnu: int, sysv: int) -> Iterator[int]:
        if not self.nbuckets:
            return
        buckets, chain, bloom = self._lists
        if self.kind == "sysv":
            i, seen = buckets[sysv % self.nbuckets], 0
            while i != 0 and i < len(chain) and seen <= len(chain):
                yield i
                i = chain[i]
                seen += 1
            return
        if not bloom:
            return
        bits = self.word_bits
        word = bloom[(gnu // bits) & (len(bloom) - 1)]
        if not ((word >> (gnu % bits)) & (word >> ((gnu >> self.shift) % bits)) & 1):
            return
        i = buckets[gnu % self.nbuckets]
        if i == 0 or i < self.symoffset:
            return
        while i - self.symoffset < len(chain):
            value = chain[i - self.symoffset]
            if (value ^ gnu) >> 1 == 0:
                yield i
            if value & 1:
                return
            i += 1


@cache
def _sym_dtype(elf_class: int, endian: str) -> np.dtype:
    if elf_class == 64:
        return np.dtype([("st_name", endian + "u4"), ("st_info", "u1"), ("st_other", "u1"),
                         ("st_shndx", endian + "u2"), ("st_value", endian + "u8"), ("st_size", endian + "u8")])
    return np.dtype([("st_name", endian + "u4"), ("st_value", endian + "u4"), ("st_size", endian + "u4"),
                     ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", endian + "u2")])


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def open_mapped(path: str) -> tuple[mmap.mmap | bytes, FileIdentity]:
    """Map a file read-only; every OS-level failure becomes an ElfError naming the file. Opened without
    blocking (a FIFO is refused, not waited on) and only if it is a regular file."""
    from customops import safeio

    try:
        fd = safeio.open_regular(path)
    except InputError as exc:
        raise ElfError(path, "is a directory, not an ELF file" if exc.reason == "not a regular file (a directory)"
                       else exc.reason) from None
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            raise ElfError(path, "empty file, not an ELF object")
        data: mmap.mmap | bytes = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ElfError(path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    return data, FileIdentity.of(st)


def parse_elf(path: str, data: mmap.mmap | bytes, identity: FileIdentity) -> ElfInfo:
    """Parse a mapped file. Any structural problem is reported as ElfError(path, reason)."""
    try:
        return _Parser(path, data, identity).parse()
    except ElfError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, TypeError, UnicodeError) as exc:
        raise ElfError(path, f"malformed ELF file ({exc})") from None


def symtab_strings(path: str, pattern: bytes) -> list[bytes]:
    """Names in the `.strtab` of `.symtab` (local symbols included) that contain `pattern`: found in the raw
    string table, without iterating the (often huge) symbol table. Empty when the file has no `.symtab`."""
    import re

    data, _identity = open_mapped(path)
    try:
        is64, little = data[4] == ELFCLASS64, data[5] == ELFDATA2LSB
        endian = "<" if little else ">"
        header = struct.unpack_from(endian + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"), data, 16)
        shoff, shentsize, shnum = header[5], header[10], header[11]
        fmt = endian + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
        sections = [struct.unpack_from(fmt, data, shoff + i * shentsize) for i in range(shnum)]
        symtab = next((s for s in sections if s[1] == SHT_SYMTAB), None)
        if symtab is None or symtab[6] >= len(sections):
            return []
        strtab = sections[symtab[6]]
        start, size = strtab[4], strtab[5]
        if start + size > len(data):
            return []
        table = bytes(data[start:start + size])
    except (struct.error, IndexError):
        return []
    found = []
    for match in re.finditer(re.escape(pattern), table):
        begin = table.rfind(b"\0", 0, match.start()) + 1
        end = table.find(b"\0", match.end())
        found.append(table[begin:end if end >= 0 else len(table)])
    return sorted(set(found))


def loader_ranges(path: str) -> list[tuple[int, int]]:
    """The byte ranges of a file the dynamic linker reads (and this reader parses), relocations aside:
    what a container profile keeps of each library. Merged, sorted (offset, length) pairs."""
    data, identity = open_mapped(path)
    parser = _Parser(path, data, identity)
    parser.touched = [(0, 16)]
    try:
        parser.parse()
    except (struct.error, ValueError, IndexError, OverflowError, TypeError, UnicodeError) as exc:
        raise ElfError(path, f"malformed ELF file ({exc})") from None
    merged: list[tuple[int, int]] = []
    for start, length in sorted(parser.touched):
        if merged and start <= merged[-1][0] + merged[-1][1]:
            last_start, last_length = merged[-1]
            merged[-1] = (last_start, max(last_length, start + length - last_start))
        elif length:
            merged.append((start, length))
    return merged


class Segment(NamedTuple):
    """One program header."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


class _Mappings:
    """Whether the kernel grants one mmap() of ld.so's, from its length, file offset and protection alone
    (where it lands in the address space depends on the process, which no model of a file can know)."""

    def __init__(self, elf_class: int, machine: int, page: int) -> None:
        # TASK_SIZE: x86-64 with 4-level page tables, AArch64 with 48-bit addresses, a 32-bit process
        self.space = (1 << 47) - page if machine == 62 else 1 << 48 if elf_class == 64 else (1 << 32) - 2 * page
        self.page = page
        self.commit = _commit_limit()

    def fits(self, length: int, offset: int | None, writable: bool) -> bool:
        if not length or length > self.space:  # EINVAL, ENOMEM
            return False
        if offset is not None and offset + length > (1 << 63) - 1:  # EOVERFLOW: past the largest file offset
            return False
        # A private writable mapping is charged against the commit limit when it is made.
        return not (writable and self.commit is not None and length > self.commit)


@cache
def _commit_limit() -> int | None:
    """The largest private writable mapping this machine's kernel commits, in bytes (None: no limit):
    vm.overcommit_memory 0 refuses one larger than RAM plus swap, 2 beyond the commit limit, 1 nothing."""
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            mode = int(f.read())
        with open("/proc/meminfo") as f:
            info = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f if ":" in line)}
        if mode == 1:
            return None
        if mode == 2:
            return info["CommitLimit"] - info["Committed_AS"]
        return info["MemTotal"] + info["SwapTotal"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


class _Parser:
    def __init__(self, path: str, data: mmap.mmap | bytes, identity: FileIdentity) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.identity = identity
        self.touched: list[tuple[int, int]] | None = None

    def fail(self, reason: str) -> ElfError:
        return ElfError(self.path, reason)

    def need(self, offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise self.fail(f"{what} lies past the end of the file (offset {offset}, {length} bytes)")
        if self.touched is not None and what != "relocation table":
            self.touched.append((offset, length))

    # -- header ------------------------------------------------------------------------------
    def parse(self) -> ElfInfo:
        data = self.data
        if self.size < 16 or data[:4] != b"\x7fELF":
            kind = not_elf_kind(bytes(data[:len(GIT_LFS_POINTER)]))
            raise self.fail(f"not an ELF file: {NOT_ELF_KINDS[kind]}" if kind else "not an ELF file (bad magic)")
        ei_class, ei_data, _ver, osabi = data[4], data[5], data[6], data[7]
        if ei_class not in (ELFCLASS32, ELFCLASS64):
            raise self.fail(f"invalid ELF class {ei_class}")
        if ei_data not in (ELFDATA2LSB, ELFDATA2MSB):
            raise self.fail(f"invalid ELF data encoding {ei_data}")
        self.elf_class = 64 if ei_class == ELFCLASS64 else 32
        self.endian = "<" if ei_data == ELFDATA2LSB else ">"
        self.byte_order = "little" if ei_data == ELFDATA2LSB else "big"
        fmt = self.endian + ("HHIQQQIHHHHHH" if self.elf_class == 64 else "HHIIIIIHHHHHH")
        self.need(16, struct.calcsize(fmt), "ELF header")
        (e_type, e_machine, _v, _entry, e_phoff, e_shoff, _flags, _ehsize,
         e_phentsize, e_phnum, e_shentsize, e_shnum, _shstrndx) = struct.unpack_from(fmt, data, 16)
        self.machine = e_machine
        if e_phnum == PN_XNUM:
            raise self.fail("program header count in section 0 (PN_XNUM) is not supported")
        segments = self._program_headers(e_phoff, e_phentsize, e_phnum)
        self.loads = [s for s in segments if s.type == PT_LOAD]
        self._check_mapping(segments, e_type)
        interp = self._interpreter(segments)
        has_shdrs, has_symtab, dynsym_shdr_count = self._section_headers(e_shoff, e_shentsize, e_shnum)
        dyn = self._dynamic(segments)
        return self._build(e_type, osabi, interp, dyn, has_shdrs, has_symtab, dynsym_shdr_count)

    def _program_headers(self, off: int, entsize: int, num: int) -> list[Segment]:
        fmt = self.endian + ("IIQQQQQQ" if self.elf_class == 64 else "IIIIIIII")
        want = struct.calcsize(fmt)
        if num and entsize < want:
            raise self.fail(f"program header entry size {entsize} is too small")
        self.need(off, entsize * num, "program header table")
        out = []
        for i in range(num):
            f = struct.unpack_from(fmt, self.data, off + i * entsize)
            if self.elf_class == 64:
                p_type, p_flags, p_offset, p_vaddr, _pa, p_filesz, p_memsz, p_align = f
            else:
                p_type, p_offset, p_vaddr, _pa, p_filesz, p_memsz, p_flags, p_align = f
            out.append(Segment(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align))
        return out

    def _check_mapping(self, segments: list[Segment], e_type: int) -> None:
        """What _dl_map_object_from_fd and _dl_map_segments (glibc 2.36) refuse, in their order and with
        their messages, for the page size of this machine: every PT_LOAD's address and offset congruent
        modulo the page size; at least one PT_LOAD; a dynamic section; then the mappings themselves. The
        first segment reserves the whole image (last end - first start, unsigned, so segments out of order
        wrap around), each later one is mapped over it; with gaps between segments, the last must not start
        below the first one's end. A mapping fails when it is empty, larger than the address space, past the
        largest file offset, or writable and larger than the kernel will commit (vm.overcommit_memory).
        Segments may overlap or be out of order otherwise: ld.so maps them anyway, the later over the
        earlier. ET_EXEC files are refused by the loader before mapping, and executables are the kernel's."""
        page, wrap = mmap.PAGESIZE, (1 << self.elf_class) - 1
        loads: list[tuple[int, int, int, int, int, bool]] = []  # mapstart, mapend, dataend, allocend, mapoff, writable
        align_max, dynamic, empty_dynamic = 0, 0, False
        for s in segments:
            if s.type == PT_DYNAMIC:
                if s.filesz == 0:
                    empty_dynamic = True  # usually separate debug information
                else:
                    dynamic = s.vaddr
            elif s.type == PT_LOAD:
                if (s.vaddr - s.offset) & (page - 1):
                    raise self.fail("ELF load command address/offset not page-aligned")
                loads.append((s.vaddr & ~(page - 1), (s.vaddr + s.filesz + page - 1) & ~(page - 1) & wrap,
                              (s.vaddr + s.filesz) & wrap, (s.vaddr + s.memsz) & wrap, s.offset & ~(page - 1),
                              bool(s.flags & PF_W)))
                if s.align & (s.align - 1) == 0 and s.align > align_max:  # powerof2()
                    align_max = s.align
        if not loads:
            raise self.fail("object file has no loadable segments")
        if e_type != ET_DYN:
            return
        if not dynamic or empty_dynamic:
            raise self.fail("object file has no dynamic section")
        maps = _Mappings(self.elf_class, self.machine, page)
        first, last = loads[0], loads[-1]
        length = (last[3] - first[0]) & wrap
        if align_max > page:  # a PROT_NONE reservation large enough to align the image, then the image in it
            reserve = (length + align_max if length >= align_max else 2 * align_max) & wrap
            if not maps.fits(reserve, None, False):
                raise self.fail("failed to map segment from shared object")
        if not maps.fits(length, first[4], first[5]):
            raise self.fail("failed to map segment from shared object")
        if any(a[1] != b[0] for a, b in pairwise(loads)) and last[0] < first[1]:
            raise self.fail("ELF load command address/offset not page-aligned")
        for i, (mapstart, mapend, dataend, allocend, mapoff, writable) in enumerate(loads):
            if i and mapend > mapstart and not maps.fits(mapend - mapstart, mapoff, writable):
                raise self.fail("failed to map segment from shared object")
            zeropage = min((dataend + page - 1) & ~(page - 1), allocend)
            if allocend > dataend and allocend > zeropage and not maps.fits(allocend - zeropage, None, writable):
                raise self.fail("cannot map zero-fill pages")

    def _interpreter(self, segments: list[Segment]) -> str | None:
        for s in segments:
            if s.type == PT_INTERP:
                self.need(s.offset, s.filesz, "PT_INTERP")
                return _decode(bytes(self.data[s.offset:s.offset + s.filesz]).split(b"\0", 1)[0])
        return None

    def _section_headers(self, off: int, entsize: int, num: int) -> tuple[bool, bool, int | None]:
        """Only a hint for the loader-invisible parts; a broken table is ignored, as ld.so ignores it."""
        fmt = self.endian + ("IIQQQQIIQQ" if self.elf_class == 64 else "IIIIIIIIII")
        if not off or not num or entsize < struct.calcsize(fmt) or off + entsize * num > self.size:
            return False, False, None
        has_symtab, dynsym_count = False, None
        for i in range(num):
            f = struct.unpack_from(fmt, self.data, off + i * entsize)
            sh_type, sh_size, sh_entsize = f[1], f[5], f[9]
            if sh_type == SHT_SYMTAB:
                has_symtab = True
            elif sh_type == SHT_DYNSYM and sh_entsize:
                dynsym_count = sh_size // sh_entsize
        return True, has_symtab, dynsym_count

    def _dynamic(self, segments: list[Segment]) -> list[tuple[int, int]]:
        """The entries of the last non-empty PT_DYNAMIC, read where it is mapped (as ld.so's l_ld)."""
        dyn_seg = next((s for s in reversed(segments) if s.type == PT_DYNAMIC and s.filesz), None)
        if dyn_seg is None:
            raise self.fail("object file has no dynamic section")
        filesz = dyn_seg.filesz
        entsize = 16 if self.elf_class == 64 else 8
        off = self.offset_of(dyn_seg.vaddr, filesz, "dynamic section")
        words = np.frombuffer(
            self.data, self.endian + ("i8" if self.elf_class == 64 else "i4"), (filesz // entsize) * 2, off
        ).reshape(-1, 2)
        tags = words[:, 0]
        end = np.flatnonzero(tags == DT_NULL)
        n = int(end[0]) if len(end) else len(tags)
        dtype = self.endian + ("u8" if self.elf_class == 64 else "u4")
        values = np.frombuffer(self.data, dtype, (filesz // entsize) * 2, off).reshape(-1, 2)[:n, 1]
        return list(zip(tags[:n].tolist(), values.tolist(), strict=True))

    # -- tables ------------------------------------------------------------------------------
    def offset_of(self, vaddr: int, length: int, what: str) -> int:
        """Translate a virtual address (as in PT_DYNAMIC values) to a file offset through PT_LOAD; where
        segments overlap, the later one is mapped over the earlier, so it is the one read."""
        for s in reversed(self.loads):
            if s.vaddr <= vaddr and vaddr + length <= s.vaddr + s.filesz:
                off = vaddr - s.vaddr + s.offset
                self.need(off, length, what)
                return off
        raise self.fail(f"{what} at address {vaddr:#x} ({length} bytes) is not inside any loaded segment")

    def _build(self, e_type, osabi, interp, dyn, has_shdrs, has_symtab, dynsym_shdr_count) -> ElfInfo:  # type: ignore[no-untyped-def]
        single: dict[int, int] = {}
        needed_offsets: list[int] = []
        for tag, value in dyn:
            if tag == DT_NEEDED:
                needed_offsets.append(value)
            else:
                single[tag] = value  # as elf_get_dynamic_info: a later entry overrides an earlier one
        if DT_STRTAB not in single:
            raise self.fail("dynamic section has no DT_STRTAB")
        strsz = single.get(DT_STRSZ, 0)
        stroff = self.offset_of(single[DT_STRTAB], strsz, "dynamic string table")

        def string(offset: int) -> str:
            if offset >= strsz:
                raise self.fail(f"string offset {offset} is past the end of the dynamic string table")
            end = self.data.find(b"\0", stroff + offset, stroff + strsz)
            if end < 0:
                raise self.fail("dynamic string table is not NUL-terminated")
            return _decode(bytes(self.data[stroff + offset:end]))

        if DT_SYMTAB not in single:
            raise self.fail("dynamic section has no DT_SYMTAB")
        symoff_addr = single[DT_SYMTAB]
        syment = 24 if self.elf_class == 64 else 16
        if single.get(DT_SYMENT, syment) != syment:
            raise self.fail(f"unexpected DT_SYMENT {single[DT_SYMENT]}")
        gnu_off = sysv_off = None
        if DT_GNU_HASH in single:
            gnu_off = self.offset_of(single[DT_GNU_HASH], 16, "DT_GNU_HASH table")
        if DT_HASH in single:
            sysv_off = self.offset_of(single[DT_HASH], 8, "DT_HASH table")
        count = self._symbol_count(gnu_off, sysv_off, dynsym_shdr_count)
        symtab_off = self.offset_of(symoff_addr, count * syment, "dynamic symbol table")
        self._check_hash_tables(gnu_off, sysv_off, count)
        versym_off = None
        if DT_VERSYM in single:
            versym_off = self.offset_of(single[DT_VERSYM], count * 2, "version symbol table")
        layout = TableLayout(symtab_off, count, stroff, strsz, versym_off, gnu_off, sysv_off)
        reloc_class, reloc_first = self._relocation_classes(single, count)
        symbols = SymbolTable(self.path, self.data, layout, self.elf_class, self.byte_order,
                              self.machine, reloc_class, reloc_first)
        return ElfInfo(
            path=self.path,
            identity=self.identity,
            elf_class=self.elf_class,
            byte_order=self.byte_order,
            machine_code=self.machine,
            elf_type=ET_NAMES.get(e_type, f"ET_{e_type:#x}"),
            osabi_code=osabi,
            interpreter=interp,
            soname=string(single[DT_SONAME]) if DT_SONAME in single else None,
            needed=tuple(string(o) for o in needed_offsets),
            rpath=_split_path(string(single[DT_RPATH])) if DT_RPATH in single else (),
            runpath=_split_path(string(single[DT_RUNPATH])) if DT_RUNPATH in single else (),
            flags=single.get(DT_FLAGS, 0) | (DF_SYMBOLIC if DT_SYMBOLIC in single else 0)
            | (DF_BIND_NOW if DT_BIND_NOW in single else 0),
            flags_1=single.get(DT_FLAGS_1, 0),
            version_definitions=self._verdefs(single, string),
            version_needs=self._verneeds(single, string),
            has_section_headers=has_shdrs,
            has_symtab=has_symtab,
            layout=layout,
            symbols=symbols,
        )

    def _symbol_count(self, gnu_off: int | None, sysv_off: int | None, shdr_count: int | None) -> int:
        """How many dynamic symbols there are, from the hash tables as libtree and ld.so see them."""
        if sysv_off is not None:
            wide = self.elf_class == 64 and self.machine in WIDE_SYSV_HASH_MACHINES
            word = self.endian + ("u8" if wide else "u4")
            return int(np.frombuffer(self.data, word, 2, sysv_off)[1])
        if gnu_off is not None:
            nbuckets, symoffset, nwords, _shift = np.frombuffer(self.data, self.endian + "u4", 4, gnu_off).tolist()
            boff = gnu_off + 16 + nwords * (self.elf_class // 8)
            self.need(boff, 4 * nbuckets, "DT_GNU_HASH buckets")
            buckets = np.frombuffer(self.data, self.endian + "u4", nbuckets, boff)
            top = int(buckets.max()) if nbuckets else 0
            if top < symoffset:
                return symoffset
            chain_off = boff + 4 * nbuckets
            i = top - symoffset
            step = 4096
            while True:
                start = chain_off + 4 * i
                avail = (self.size - start) // 4
                if avail <= 0:
                    raise self.fail("DT_GNU_HASH chain runs past the end of the file")
                chunk = np.frombuffer(self.data, self.endian + "u4", min(step, avail), start)
                ends = np.flatnonzero(chunk & 1)
                if len(ends):
                    return symoffset + i + int(ends[0]) + 1
                i += len(chunk)
        return shdr_count or 0

    def _check_hash_tables(self, gnu_off: int | None, sysv_off: int | None, count: int) -> None:
        if gnu_off is not None:
            nbuckets, symoffset, nwords, _ = np.frombuffer(self.data, self.endian + "u4", 4, gnu_off).tolist()
            if symoffset > count:
                raise self.fail(f"DT_GNU_HASH symbol offset {symoffset} exceeds the symbol count {count}")
            size = 16 + nwords * (self.elf_class // 8) + 4 * nbuckets + 4 * (count - symoffset)
            self.need(gnu_off, size, "DT_GNU_HASH table")
        if sysv_off is not None:
            wide = self.elf_class == 64 and self.machine in WIDE_SYSV_HASH_MACHINES
            size = 8 if wide else 4
            nbucket, nchain = np.frombuffer(self.data, self.endian + ("u8" if wide else "u4"), 2, sysv_off).tolist()
            self.need(sysv_off, size * (2 + nbucket + nchain), "DT_HASH table")

    def _relocation_classes(self, single: dict[int, int], count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per symbol: needed by a relocation at load (now) or only through the PLT (lazy), and the
        position of its first relocation in the order ld.so processes them (DT_REL/DT_RELA, then
        DT_JMPREL), which decides which undefined symbol an error message names."""
        classes = np.zeros(count, dtype=np.uint8)
        first = np.full(count, 0xFFFFFFFF, dtype=np.uint32)  # no relocation
        if not count:
            return classes, first
        shift, mask = (32, 0xFFFFFFFF) if self.elf_class == 64 else (8, 0xFF)
        word = "u8" if self.elf_class == 64 else "u4"
        plt_range: tuple[int, int] | None = None
        if DT_JMPREL in single and single.get(DT_PLTRELSZ):
            plt_range = (single[DT_JMPREL], single[DT_JMPREL] + single[DT_PLTRELSZ])
        position = 0
        for tag, size_tag, is_rela in ((DT_REL, DT_RELSZ, False), (DT_RELA, DT_RELASZ, True)):
            if tag not in single or not single.get(size_tag):
                continue
            start, size = single[tag], single[size_tag]
            if plt_range and start < plt_range[1] and plt_range[0] < start + size:
                # Some linkers make DT_RELA cover .rela.plt too; ld.so does not process it twice.
                size = max(0, plt_range[0] - start)
            if not size:
                continue
            info = self._rel_info(start, size, self._rel_entsize(is_rela), word)
            syms = info >> shift
            used = np.flatnonzero((syms > 0) & (syms < count))
            classes[syms[used]] = RELOC_NOW
            copy_type = COPY_BY_MACHINE.get(self.machine)
            if copy_type is not None:
                copies = used[(info[used] & mask) == copy_type]
                classes[syms[copies]] = RELOC_COPY
            np.minimum.at(first, syms[used].astype(np.intp), (used + position).astype(np.uint32))
            position += len(info)
        if plt_range:
            plt_is_rela = single.get(DT_PLTREL, DT_RELA) == DT_RELA
            info = self._rel_info(plt_range[0], plt_range[1] - plt_range[0], self._rel_entsize(plt_is_rela), word)
            syms, types = info >> shift, info & mask
            valid = (syms > 0) & (syms < count)
            jump_slot = JUMP_SLOT_BY_MACHINE.get(self.machine)
            lazy = valid if jump_slot is None else valid & (types == jump_slot)
            lazy_syms = syms[lazy]
            classes[lazy_syms[classes[lazy_syms] == RELOC_NONE]] = RELOC_LAZY
            classes[syms[valid & ~lazy]] = RELOC_NOW
            idx = np.flatnonzero(valid)
            np.minimum.at(first, syms[idx].astype(np.intp), (idx + position).astype(np.uint32))
        return classes, first

    def _rel_entsize(self, is_rela: bool) -> int:
        if self.elf_class == 64:
            return 24 if is_rela else 16
        return 12 if is_rela else 8

    def _rel_info(self, vaddr: int, size: int, entsize: int, word: str) -> np.ndarray:
        n = size // entsize
        off = self.offset_of(vaddr, n * entsize, "relocation table")
        wsize = 8 if word == "u8" else 4
        table = np.frombuffer(self.data, self.endian + word, n * (entsize // wsize), off).reshape(n, -1)
        return table[:, 1].astype(np.uint64)

    def _walk(self, start: int, count: int, size: int, next_at: int, what: str) -> Iterator[int]:
        """Offsets of a chained table (vd_next, vn_next, vda_next, vna_next are relative links).
        A link that loops back or leaves the file is an error, never a hang."""
        seen: set[int] = set()
        off = start
        for _ in range(count):
            self.need(off, size, what)
            if off in seen:
                raise self.fail(f"{what} entries form a loop")
            seen.add(off)
            yield off
            nxt = struct.unpack_from(self.endian + "I", self.data, off + next_at)[0]
            if not nxt:
                return
            off += nxt

    def _verdefs(self, single: dict[int, int], string) -> tuple[VersionDefinition, ...]:  # type: ignore[no-untyped-def]
        if DT_VERDEF not in single:
            return ()
        start = self.offset_of(single[DT_VERDEF], 20, "version definitions")
        out = []
        for off in self._walk(start, single.get(DT_VERDEFNUM, 0), 20, 16, "version definition"):
            _v, flags, ndx, cnt, vhash, aux, _next = struct.unpack_from(self.endian + "HHHHIII", self.data, off)
            names = []
            for aoff in self._walk(off + aux, cnt, 8, 4, "version definition name"):
                names.append(string(struct.unpack_from(self.endian + "I", self.data, aoff)[0]))
            out.append(VersionDefinition(ndx, flags, vhash, tuple(names)))
        return tuple(out)

    def _verneeds(self, single: dict[int, int], string) -> tuple[VersionNeed, ...]:  # type: ignore[no-untyped-def]
        if DT_VERNEED not in single:
            return ()
        start = self.offset_of(single[DT_VERNEED], 16, "version needs")
        out = []
        for off in self._walk(start, single.get(DT_VERNEEDNUM, 0), 16, 12, "version need"):
            _v, cnt, vfile, aux, _next = struct.unpack_from(self.endian + "HHIII", self.data, off)
            reqs = []
            for aoff in self._walk(off + aux, cnt, 16, 12, "version need entry"):
                vhash, flags, other, name, _anext = struct.unpack_from(self.endian + "IHHII", self.data, aoff)
                reqs.append(VersionRequirement(string(name), other, flags, vhash))
            out.append(VersionNeed(string(vfile), tuple(reqs)))
        return tuple(out)


def _split_path(value: str) -> tuple[str, ...]:
    """DT_RPATH/DT_RUNPATH are colon-separated; ld.so keeps empty elements (they mean the cwd)."""
    return tuple(value.split(":"))


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
