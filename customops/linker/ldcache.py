"""The target's /etc/ld.so.cache (format `glibc-ld.so.cache1.1`), as `_dl_load_cache_lookup` reads it.

Layout (glibc `sysdeps/generic/dl-cache.h`): a 48-byte header (magic "glibc-ld.so.cache", version
"1.1", nlibs, len_strings, flags, padding, extension_offset, unused[3]) then `nlibs` 24-byte entries
(flags, key, value, osversion, hwcap), whose key/value are offsets from the start of the file. A file
written by old ldconfig versions starts with the "ld.so-1.7.0" table and carries the new one after it.
Entries whose hwcap field marks a glibc-hwcaps extension entry are left out: ld.so takes them only
for the CPU it runs on, which a static check cannot know (the plain entry is then used).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from customops.errors import InputError

NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_MAGIC = b"ld.so-1.7.0"
_HEADER = struct.Struct("<20sIIB3sI12s")
_ENTRY = struct.Struct("<iIIIQ")
HWCAP_EXTENSION = 1 << 62  # DL_CACHE_HWCAP_EXTENSION

# _dl_cache_check_flags: the entry flags each host architecture accepts (FLAG_ELF_LIBC6 | arch bits).
CACHE_FLAGS_BY_MACHINE = {(62, 64): 0x0303, (3, 32): 0x0003, (183, 64): 0x0A03, (21, 64): 0x0503, (22, 64): 0x0603}


@dataclass(frozen=True)
class CacheEntry:
    name: str
    path: str
    flags: int


@dataclass(frozen=True)
class LdCache:
    entries: tuple[CacheEntry, ...]

    def lookup(self, name: str, machine: int, elf_class: int) -> str | None:
        want = CACHE_FLAGS_BY_MACHINE.get((machine, elf_class))
        for entry in self.entries:
            if entry.name == name and (want is None or entry.flags == want):
                return entry.path
        return None


def parse_ld_cache(data: bytes, path: str = "/etc/ld.so.cache") -> LdCache:
    start = 0
    if data.startswith(OLD_MAGIC):
        start = data.find(NEW_MAGIC)
        if start < 0:
            raise InputError(path, "only the old 'ld.so-1.7.0' cache format is present; it is not supported")
    if data[start:start + len(NEW_MAGIC)] != NEW_MAGIC:
        raise InputError(path, "not an ld.so cache (bad magic)")
    if len(data) < start + _HEADER.size:
        raise InputError(path, "truncated ld.so cache header")
    _magic, nlibs, _len_strings, _flags, _pad, _ext, _unused = _HEADER.unpack_from(data, start)
    table = start + _HEADER.size
    if nlibs > (len(data) - table) // _ENTRY.size:
        raise InputError(path, f"ld.so cache claims {nlibs} entries, more than the file holds")
    entries = []
    for i in range(nlibs):
        flags, key, value, _osv, hwcap = _ENTRY.unpack_from(data, table + i * _ENTRY.size)
        if hwcap & HWCAP_EXTENSION:
            continue
        # In the new format string offsets are relative to the start of the new-format header.
        entries.append(CacheEntry(_string(data, start + key, path), _string(data, start + value, path), flags))
    return LdCache(tuple(entries))


def _string(data: bytes, offset: int, path: str) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise InputError(path, f"ld.so cache string offset {offset} is out of range")
    return data[offset:end].decode("utf-8", "surrogateescape")
