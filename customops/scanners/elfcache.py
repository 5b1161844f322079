"""Read ELF files once: an in-process memo plus an on-disk cache keyed by (dev, inode, size, mtime_ns).

A cache entry holds the parsed header, dynamic section, version tables and table layout, plus the
per-symbol relocation classes (the only costly derived data). The symbol and string tables are not
copied: on a hit they are viewed again in the freshly mapped file, whose identity must still equal
the key. Entries are written to a temporary file and renamed into place, so concurrent runs never see
a half-written entry; an entry that is corrupt, truncated or from another format version is ignored
and rebuilt, and a cache directory that cannot be written only costs speed.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import numpy as np

from customops.cachedir import default_cache_dir
from customops.errors import ElfError
from customops.scanners.elf import (
    ElfInfo,
    FileIdentity,
    SymbolTable,
    TableLayout,
    VersionDefinition,
    VersionNeed,
    VersionRequirement,
    open_mapped,
    parse_elf,
)

FORMAT = b"COELF\x00\x05\x00"  # bump the last bytes whenever the entry layout or ElfInfo changes
_HEADER = struct.Struct("<8sII")  # magic+version, json length, number of non-zero relocation classes


class ElfReader:
    """Parses each distinct file at most once per process, and at most once per change on disk."""

    def __init__(self, cache_dir: Path | None = None, use_cache: bool = True) -> None:
        self.cache_dir = (cache_dir or default_cache_dir()) if use_cache else None
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
            info = parse_elf(path, data, identity)
            if self.cache_dir:
                self._store(info)
        else:
            self.hits += 1
        self._memo[identity] = info
        return info

    def facts(self, info: ElfInfo, name: str, compute: Callable[[ElfInfo], dict]) -> dict:
        """Derived facts about a file (JSON-able), computed once per change on disk, cached beside its entry."""
        key = (info.identity, name)
        if key in self._facts:
            return self._facts[key]
        path = self._entry_path(info.identity).with_suffix(f".{name}") if self.cache_dir else None
        value = None
        if path is not None:
            try:
                stored = json.loads(path.read_bytes())
                if stored.get("format") == FORMAT.hex():
                    value = stored["value"]
            except (OSError, ValueError, AttributeError, KeyError):
                value = None
        if value is None:
            value = compute(info)
            if path is not None:
                _write_atomically(path, json.dumps({"format": FORMAT.hex(), "value": value}).encode())
        self._facts[key] = value
        return value

    # -- disk ------------------------------------------------------------------------------
    def _entry_path(self, identity: FileIdentity) -> Path:
        assert self.cache_dir is not None
        key = f"{identity.dev:x}-{identity.ino:x}-{identity.size:x}-{identity.mtime_ns:x}"
        return self.cache_dir / key[-2:] / key

    def _load(self, path: str, data, identity: FileIdentity) -> ElfInfo | None:  # type: ignore[no-untyped-def]
        try:
            raw = self._entry_path(identity).read_bytes()
        except OSError:
            return None
        try:
            return _decode_entry(path, data, identity, raw)
        except ElfError:
            raise
        except Exception:  # a corrupt or foreign entry is a miss, never a crash
            return None

    def _store(self, info: ElfInfo) -> None:
        _write_atomically(self._entry_path(info.identity), _encode_entry(info))


def _write_atomically(target: Path, data: bytes) -> None:
    """Write to a temporary file and rename it into place: readers see the old entry or the new one."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # read-only or full cache directory: correct results, just slower


def _with_path(info: ElfInfo, path: str) -> ElfInfo:
    from dataclasses import replace

    return replace(info, path=path)


def _plain(value):  # type: ignore[no-untyped-def]
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _encode_entry(info: ElfInfo) -> bytes:
    meta = {f.name: _plain(getattr(info, f.name)) for f in fields(info) if f.name not in ("symbols", "path")}
    nonzero = np.flatnonzero(info.symbols.reloc_class).astype("<u4")
    classes = info.symbols.reloc_class[nonzero].astype("u1")
    first = info.symbols.reloc_first[nonzero].astype("<u4")
    body = json.dumps(meta, separators=(",", ":")).encode()
    return (_HEADER.pack(FORMAT, len(body), len(nonzero)) + body + nonzero.tobytes() + first.tobytes()
            + classes.tobytes())


def _decode_entry(path: str, data, identity: FileIdentity, raw: bytes) -> ElfInfo | None:  # type: ignore[no-untyped-def]
    magic, body_len, n = _HEADER.unpack_from(raw, 0)
    if magic != FORMAT or len(raw) != _HEADER.size + body_len + 9 * n:
        return None
    meta = json.loads(raw[_HEADER.size:_HEADER.size + body_len])
    if FileIdentity(**meta.pop("identity")) != identity:
        return None
    layout = TableLayout(**meta.pop("layout"))
    pos = _HEADER.size + body_len
    indices = np.frombuffer(raw, "<u4", n, pos)
    first = np.frombuffer(raw, "<u4", n, pos + 4 * n)
    classes = np.frombuffer(raw, "u1", n, pos + 8 * n)
    reloc_class = np.zeros(layout.symbol_count, dtype=np.uint8)
    reloc_class[indices] = classes
    reloc_first = np.full(layout.symbol_count, np.iinfo(np.uint32).max, dtype=np.uint32)
    reloc_first[indices] = first
    meta["version_definitions"] = tuple(
        VersionDefinition(d["index"], d["flags"], d["hash"], tuple(d["names"])) for d in meta["version_definitions"]
    )
    meta["version_needs"] = tuple(
        VersionNeed(n_["file"], tuple(VersionRequirement(**v) for v in n_["versions"])) for n_ in meta["version_needs"]
    )
    for key in ("needed", "rpath", "runpath"):
        meta[key] = tuple(meta[key])
    symbols = SymbolTable(path, data, layout, meta["elf_class"], meta["byte_order"], meta["machine_code"], reloc_class,
                          reloc_first)
    return ElfInfo(path=path, identity=identity, layout=layout, symbols=symbols, **meta)
