"""The dynamic symbol table as the loader sees it: numpy views over the mapped file, names left as bytes in
the string table until asked for."""

from __future__ import annotations

import re
from functools import cache, cached_property

import numpy as np

from customops.elf.constants import SHN_UNDEF, STB_GLOBAL, STB_GNU_UNIQUE, STB_WEAK, STV_DEFAULT, STV_PROTECTED
from customops.elf.hashes import HashKind, HashTable, gnu_hash, gnu_hashes, sysv_hash
from customops.elf.image import FileImage
from customops.elf.records import TableLayout
from customops.errors import ElfError


class SymbolTable:
    """The dynamic symbol table as read-only numpy views over the mapped file.

    Names stay bytes in the string table until asked for: ld.so matches raw bytes plus version,
    and most symbols of a framework library are never looked at.
    """

    def __init__(self, image: FileImage, layout: TableLayout, reloc_class: np.ndarray,
                 reloc_first: np.ndarray) -> None:
        self.path = image.path
        self._data = data = image.data
        self.count = layout.symbol_count
        endian = image.endian
        self.entries = np.frombuffer(
            data, dtype=_sym_dtype(image.elf_class, endian), count=self.count, offset=layout.symtab_offset
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
        self._hash = HashTable.open(image, layout)

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
        if self._hash.kind is HashKind.GNU:
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
        if self._hash.kind is not HashKind.GNU:
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
        if self._hash is not None and self._hash.kind is HashKind.GNU:
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
        return self._hash is not None and self._hash.kind is HashKind.GNU

    @property
    def has_hash_table(self) -> bool:
        """ld.so skips objects whose hash table is empty (l_nbuckets == 0) during lookups."""
        return self._hash is not None and self._hash.nbuckets > 0

    # -- vectorised views --------------------------------------------------------------------
    @cached_property
    def binds(self) -> np.ndarray:
        return self.entries["st_info"] >> 4  # ELF64_ST_BIND

    @cached_property
    def types(self) -> np.ndarray:
        return self.entries["st_info"] & 0xF  # ELF64_ST_TYPE

    @cached_property
    def visibilities(self) -> np.ndarray:
        return self.entries["st_other"] & 0x3  # ELF64_ST_VISIBILITY

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

    def names_starting(self, prefix: bytes) -> np.ndarray:
        """Indices of the symbols whose name starts with `prefix`: the prefix is found in the string table and
        each occurrence matched to the names that start there (no other name is looked at, unlike
        names_containing, whose spans of every name cost a framework library's table a few hundred ms)."""
        data, end, found = self._data, self._strtab_end, []
        at = data.find(prefix, self._strtab_offset, end)  # bytes.find: several times faster than a regex here
        while at != -1:
            found.append(at - self._strtab_offset)
            at = data.find(prefix, at + 1, end)
        if not found:
            return np.empty(0, dtype=np.intp)
        return np.isin(self.entries["st_name"].astype(np.int64), np.array(found, dtype=np.int64)).nonzero()[0]

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


@cache
def _sym_dtype(elf_class: int, endian: str) -> np.dtype:
    if elf_class == 64:
        return np.dtype([("st_name", endian + "u4"), ("st_info", "u1"), ("st_other", "u1"),
                         ("st_shndx", endian + "u2"), ("st_value", endian + "u8"), ("st_size", endian + "u8")])
    return np.dtype([("st_name", endian + "u4"), ("st_value", endian + "u4"), ("st_size", endian + "u4"),
                     ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", endian + "u2")])
