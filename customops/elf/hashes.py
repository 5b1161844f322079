"""The dynamic linker's symbol hash tables: the hash functions, and DT_GNU_HASH / DT_HASH walked exactly as
do_lookup_x (glibc elf/dl-lookup.c) walks them, one name at a time (`HashTable.candidates`) and for many
names at once (`HashTable.gnu_candidates`, numpy); tests/test_elf_header.py checks that the two agree."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from functools import cached_property

import numpy as np

from customops.elf.constants import GNU_HASH_HEADER_WORDS, SYSV_HASH_HEADER_WORDS, WIDE_SYSV_HASH_MACHINES
from customops.elf.image import FileImage
from customops.elf.records import TableLayout

_GNU_HEADER = 4 * GNU_HASH_HEADER_WORDS  # bytes before the Bloom filter


class HashKind(Enum):
    GNU = "DT_GNU_HASH"
    SYSV = "DT_HASH"


def gnu_hash(name: bytes) -> int:
    """dl_new_hash (glibc elf/dl-new-hash.h): the DT_GNU_HASH function."""
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    """_dl_elf_hash (glibc sysdeps/generic/dl-hash.h): the DT_HASH function."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


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


def _sysv_word(image: FileImage) -> tuple[str, int]:
    """DT_HASH's word: 4 bytes, except 8 on the 64-bit machines that say so."""
    wide = image.elf_class == 64 and image.machine in WIDE_SYSV_HASH_MACHINES
    return image.endian + ("u8" if wide else "u4"), 8 if wide else 4


class HashTable:
    """DT_GNU_HASH (preferred by ld.so when present) or DT_HASH. Arrays stay numpy views over the file;
    Python lists for the one-name walk are made on first use."""

    def __init__(self, kind: HashKind, nbuckets: int, symoffset: int, buckets: np.ndarray, chain: np.ndarray,
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
    def open(cls, image: FileImage, layout: TableLayout) -> HashTable | None:
        """The table ld.so would use (DT_GNU_HASH first), or None when the object has neither."""
        data, endian, count = image.data, image.endian, layout.symbol_count
        if layout.gnu_hash_offset is not None:
            off = layout.gnu_hash_offset
            nbuckets, symoffset, nwords, shift = np.frombuffer(data, endian + "u4", GNU_HASH_HEADER_WORDS, off).tolist()
            bloom = np.frombuffer(data, endian + ("u8" if image.elf_class == 64 else "u4"), nwords, off + _GNU_HEADER)
            boff = off + _GNU_HEADER + nwords * (image.elf_class // 8)
            buckets = np.frombuffer(data, endian + "u4", nbuckets, boff)
            chain = np.frombuffer(data, endian + "u4", max(count - symoffset, 0), boff + 4 * nbuckets)
            return cls(HashKind.GNU, nbuckets, symoffset, buckets, chain, bloom, shift, image.elf_class)
        if layout.sysv_hash_offset is not None:
            off = layout.sysv_hash_offset
            word, size = _sysv_word(image)
            nbucket, nchain = np.frombuffer(data, word, SYSV_HASH_HEADER_WORDS, off).tolist()
            buckets = np.frombuffer(data, word, nbucket, off + SYSV_HASH_HEADER_WORDS * size)
            chain = np.frombuffer(data, word, min(nchain, count), off + (SYSV_HASH_HEADER_WORDS + nbucket) * size)
            return cls(HashKind.SYSV, nbucket, 0, buckets, chain)
        return None

    def candidates(self, gnu: int, sysv: int) -> Iterator[int]:
        """The symbol indices do_lookup_x compares for one name with these hashes, in walk order."""
        if not self.nbuckets:
            return
        buckets, chain, bloom = self._lists
        if self.kind is HashKind.SYSV:
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

    def gnu_candidates(self, hashes: np.ndarray, max_steps: int = 64) -> tuple[np.ndarray, np.ndarray] | None:
        """`candidates` for many GNU hashes at once: (query index, symbol index) of every chain entry the walk
        meets whose hash matches, in walk order per query. None when some chain is longer than `max_steps`
        (a damaged table): the caller walks those one by one."""
        empty = np.empty(0, dtype=np.intp)
        bloom = self.bloom_array
        if not self.nbuckets or bloom is None or not len(bloom) or not len(hashes):
            return empty, empty
        queries, position = self._bloom_passes(bloom, hashes)
        wanted = hashes[queries].astype(np.uint32)
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

    def _bloom_passes(self, bloom: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The queries that pass the Bloom filter and have a non-empty bucket, with their first chain index."""
        h = hashes.astype(np.uint64)
        bits = np.uint64(self.word_bits)
        words = bloom.astype(np.uint64)[((h // bits) & np.uint64(len(bloom) - 1)).astype(np.intp)]
        passes = ((words >> (h % bits)) & (words >> ((h >> np.uint64(self.shift)) % bits)) & np.uint64(1)) == 1
        start = self.buckets_array.astype(np.int64)[(h % np.uint64(self.nbuckets)).astype(np.intp)]
        queries = np.flatnonzero(passes & (start != 0) & (start >= self.symoffset))
        return queries, start[queries]


def symbol_count(image: FileImage, gnu_off: int | None, sysv_off: int | None, shdr_count: int | None) -> int:
    """How many dynamic symbols there are, from the hash tables as libtree and ld.so see them: DT_HASH's
    nchain, else one past the end of DT_GNU_HASH's last chain, else the section headers' count."""
    if sysv_off is not None:
        word, _size = _sysv_word(image)
        return int(np.frombuffer(image.data, word, SYSV_HASH_HEADER_WORDS, sysv_off)[1])  # nchain
    if gnu_off is not None:
        return _gnu_symbol_count(image, gnu_off)
    return shdr_count or 0


def hashes_no_symbol(image: FileImage, gnu_off: int | None, sysv_off: int | None, count: int) -> bool:
    """Whether the count came from a DT_GNU_HASH (without DT_HASH) that hashes no symbol: every bucket empty,
    so the count is its symoffset, which need not reach past the imports (it may be 1)."""
    if sysv_off is not None or gnu_off is None:
        return False
    return count == int(np.frombuffer(image.data, image.endian + "u4", GNU_HASH_HEADER_WORDS, gnu_off)[1])


def _gnu_symbol_count(image: FileImage, gnu_off: int) -> int:
    data, u4 = image.data, image.endian + "u4"
    nbuckets, symoffset, nwords, _shift = np.frombuffer(data, u4, GNU_HASH_HEADER_WORDS, gnu_off).tolist()
    boff = gnu_off + _GNU_HEADER + nwords * (image.elf_class // 8)
    image.need(boff, 4 * nbuckets, "DT_GNU_HASH buckets")
    buckets = np.frombuffer(data, u4, nbuckets, boff)
    top = int(buckets.max()) if nbuckets else 0
    if top < symoffset:
        return symoffset
    chain_off = boff + 4 * nbuckets
    i = top - symoffset
    step = 4096
    while True:
        start = chain_off + 4 * i
        avail = (image.size - start) // 4
        if avail <= 0:
            raise image.fail("DT_GNU_HASH chain runs past the end of the file")
        chunk = np.frombuffer(data, u4, min(step, avail), start)
        ends = np.flatnonzero(chunk & 1)
        if len(ends):
            return symoffset + i + int(ends[0]) + 1
        i += len(chunk)


def check_hash_tables(image: FileImage, gnu_off: int | None, sysv_off: int | None, count: int) -> None:
    """Both tables lie whole inside the file for `count` symbols (ElfError otherwise)."""
    if gnu_off is not None:
        header = np.frombuffer(image.data, image.endian + "u4", GNU_HASH_HEADER_WORDS, gnu_off)
        nbuckets, symoffset, nwords, _shift = header.tolist()
        if symoffset > count:
            raise image.fail(f"DT_GNU_HASH symbol offset {symoffset} exceeds the symbol count {count}")
        size = _GNU_HEADER + nwords * (image.elf_class // 8) + 4 * nbuckets + 4 * (count - symoffset)
        image.need(gnu_off, size, "DT_GNU_HASH table")
    if sysv_off is not None:
        word, size = _sysv_word(image)
        nbucket, nchain = np.frombuffer(image.data, word, SYSV_HASH_HEADER_WORDS, sysv_off).tolist()
        image.need(sysv_off, size * (SYSV_HASH_HEADER_WORDS + nbucket + nchain), "DT_HASH table")
