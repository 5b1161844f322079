"""Read ELF files once: an in-process memo plus an on-disk cache keyed by (dev, inode, size, mtime_ns, ctime_ns).

What is cached is only what is costly to derive: the per-symbol relocation classes and first relocation
positions, from a pass over every relocation of the file. Everything else (header, dynamic section, version
tables, table layout) is parsed again from the freshly mapped file on every hit, which costs little, so a
cache entry cannot change what a file needs, exports or is named. An entry is used only if customops.cachedir
trusts it (written by this user, in directories no one else can write) and it decodes exactly: magic and
format version, the file's identity, the symbol count of the mapped file, indices strictly increasing and
within the table, known classes, and relocations of the file picked at random all naming symbols the entry
gives a class. Anything else is a miss and the file is parsed in full; a cache directory
that cannot be written, or is not trusted, only costs speed. Entries are renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from customops import cachedir
from customops.elf.constants import RELOC_COPY, RELOC_LAZY
from customops.elf.parse import Parser, open_mapped, parse_elf
from customops.elf.records import ElfInfo, FileIdentity
from customops.elf.relocations import NO_RELOCATION, rel_entsize, relocation_tables, table_at

FORMAT = b"COELF\x00\x08\x00"  # bump the last bytes whenever the entry layout or its meaning changes
_HEADER = struct.Struct("<8sQQQqqII")  # magic+version, identity (dev, ino, size, mtime, ctime), symbols, entries
SUBDIR = "elf"
SPOT_CHECKS = 32  # relocations per table compared with a cache entry on every hit
_random = random.Random()  # seeded from os.urandom: which relocations are checked cannot be foreseen

# Derived facts kept beside an entry, each with the exact shape it must have to be used.
FACT_SHAPES: dict[str, object] = {"cxx-abi": cachedir.CXX_ABI_SHAPE}


class ElfReader:
    """Parses each distinct file at most once per process, and at most once per change on disk."""

    def __init__(self, cache_dir: Path | None = None, use_cache: bool = True, relocations: bool = True) -> None:
        """`relocations=False`: a reader for a load tree alone, which skips the pass over relocations (the only
        thing an entry caches), so it neither reads nor writes the cache."""
        use_cache = use_cache and relocations
        self.cache_dir = cachedir.trusted_root(cache_dir) if use_cache else None  # None: no cache, or untrusted
        self.relocations = relocations
        self._memo: dict[FileIdentity, ElfInfo] = {}
        self._facts: dict[tuple[FileIdentity, str], dict] = {}
        self.hits = 0
        self.misses = 0

    def read(self, path: str | os.PathLike[str]) -> ElfInfo:
        path = os.fspath(path)
        data, identity = open_mapped(path)
        memo = self._memo.get(identity)
        if memo is not None:
            return memo if memo.path == path else _with_path(memo, path)
        info = self._load(path, data, identity) if self.cache_dir else None
        if info is None:
            self.misses += 1
            info = parse_elf(path, data, identity, self.relocations)
            if self.cache_dir:
                cachedir.write_entry(self.cache_dir, _entry_names(identity), encode_entry(info))
        else:
            self.hits += 1
        self._memo[identity] = info
        return info

    def facts(self, info: ElfInfo, name: str, compute: Callable[[ElfInfo], dict]) -> dict:
        """Derived facts about a file (JSON-able), computed once per change on disk, cached beside its entry
        when FACT_SHAPES gives their shape (a stored value of another shape, or out of range, is recomputed)."""
        key = (info.identity, name)
        if key in self._facts:
            return self._facts[key]
        shape = FACT_SHAPES.get(name)
        root = self.cache_dir if shape is not None else None
        names = _entry_names(info.identity, f".{name}")
        value = decode_fact(cachedir.read_entry(root, names), shape, info) if root is not None else None
        if value is None:
            value = compute(info)
            if root is not None:
                cachedir.write_entry(root, names, json.dumps({"format": FORMAT.hex(), "value": value}).encode())
        self._facts[key] = value
        return value

    def _load(self, path: str, data, identity: FileIdentity) -> ElfInfo | None:
        raw = cachedir.read_entry(self.cache_dir, _entry_names(identity)) if self.cache_dir else None
        if raw is None:
            return None
        try:
            return _CachedParser(path, data, identity, raw).parse()
        except Exception:  # a stale, foreign or damaged entry is a miss: the full parse decides (and reports)
            return None


def _entry_names(identity: FileIdentity, suffix: str = "") -> tuple[str, str, str]:
    key = f"{identity.dev:x}-{identity.ino:x}-{identity.size:x}-{identity.mtime_ns:x}-{identity.ctime_ns:x}"
    return SUBDIR, key[-2:], key + suffix


def _with_path(info: ElfInfo, path: str) -> ElfInfo:
    from dataclasses import replace

    return replace(info, path=path)


def encode_entry(info: ElfInfo) -> bytes:
    nonzero = np.flatnonzero(info.symbols.reloc_class).astype("<u4")
    classes = info.symbols.reloc_class[nonzero].astype("u1")
    first = info.symbols.reloc_first[nonzero].astype("<u4")
    i = info.identity
    return (_HEADER.pack(FORMAT, i.dev, i.ino, i.size, i.mtime_ns, i.ctime_ns, info.layout.symbol_count, len(nonzero))
            + nonzero.tobytes() + first.tobytes() + classes.tobytes())


class StaleEntry(Exception):
    """A cache entry that does not belong to the mapped file, or does not decode exactly."""


def decode_relocations(raw: bytes, identity: FileIdentity, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(reloc_class, reloc_first) for a file of `count` dynamic symbols, from an entry checked in full."""
    if len(raw) < _HEADER.size:
        raise StaleEntry("truncated header")
    magic, dev, ino, size, mtime_ns, ctime_ns, symbols, n = _HEADER.unpack_from(raw, 0)
    if magic != FORMAT or FileIdentity(dev, ino, size, mtime_ns, ctime_ns) != identity:
        raise StaleEntry("another format or another file")
    if symbols != count or n > count or len(raw) != _HEADER.size + 9 * n:
        raise StaleEntry("sizes do not match the file")
    indices = np.frombuffer(raw, "<u4", n, _HEADER.size)
    first = np.frombuffer(raw, "<u4", n, _HEADER.size + 4 * n)
    classes = np.frombuffer(raw, "u1", n, _HEADER.size + 8 * n)
    if n and (indices[0] < 1 or indices[-1] >= count or not np.all(indices[1:] > indices[:-1])):
        raise StaleEntry("symbol indices out of order or out of range")
    if not np.all((classes >= RELOC_LAZY) & (classes <= RELOC_COPY)) or np.any(first == NO_RELOCATION):
        raise StaleEntry("unknown relocation class")
    reloc_class = np.zeros(count, dtype=np.uint8)
    reloc_class[indices] = classes
    reloc_first = np.full(count, NO_RELOCATION, dtype=np.uint32)
    reloc_first[indices] = first
    return reloc_class, reloc_first


class _CachedParser(Parser):
    """The full parser, except that the relocation pass (the one costly part) is replaced by a cache entry,
    spot-checked against relocations of the file picked at random."""

    def __init__(self, path: str, data, identity: FileIdentity, entry: bytes) -> None:
        super().__init__(path, data, identity)
        self.entry = entry

    def relocation_classes(self, single: dict[int, int], count: int) -> tuple[np.ndarray, np.ndarray]:
        classes, first = decode_relocations(self.entry, self.identity, count)
        self._spot_check(single, count, classes)
        return classes, first

    def _spot_check(self, single: dict[int, int], count: int, classes: np.ndarray) -> None:
        """Every relocation that names a symbol gives it a class in the full pass; SPOT_CHECKS of them, picked
        at random in each table, must have one here too. An entry that drops the file's references (or was
        never this file's) is then a miss, at the cost of a few dozen reads instead of the whole pass."""
        tables = relocation_tables(single)
        image = self.image
        word = image.elf_class // 8
        info = image.endian + ("Q" if word == 8 else "I")
        shift = 32 if word == 8 else 8
        for start, size, is_rela in tables:
            if size < rel_entsize(image.elf_class, is_rela):
                continue
            base, n, entsize = table_at(image, start, size, is_rela)
            for j in _random.sample(range(n), min(n, SPOT_CHECKS)):
                symbol = struct.unpack_from(info, image.data, base + j * entsize + word)[0] >> shift
                if 0 < symbol < count and not classes[symbol]:
                    raise StaleEntry(f"relocation {j} names symbol {symbol}, which the entry says is not referenced")


def decode_fact(raw: bytes | None, shape: object, info: ElfInfo) -> dict | None:
    """A stored derived fact, if it has exactly `shape` and its counts fit the file; else None."""
    if raw is None:
        return None
    try:
        stored = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not cachedir.matches(stored, {"format": FORMAT.hex(), "value": shape}):
        return None
    value = stored["value"]
    if any(type(v) is int and not 0 <= v <= info.symbols.count for v in value.values()):
        return None
    return value
