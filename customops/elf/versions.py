"""The symbol version tables reached through PT_DYNAMIC: DT_VERDEF (`.gnu.version_d`) and DT_VERNEED
(`.gnu.version_r`), read as _dl_check_map_versions (glibc elf/dl-version.c) reads them."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from customops.elf.constants import DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM
from customops.elf.image import FileImage
from customops.elf.records import VersionDefinition, VersionNeed, VersionRequirement

# Elf_Verdef, Elf_Verdaux, Elf_Verneed, Elf_Vernaux: (size, offset of the *_next link)
_VERDEF, _VERDAUX, _VERNEED, _VERNAUX = (20, 16), (8, 4), (16, 12), (16, 12)


def _walk(image: FileImage, start: int, count: int, entry: tuple[int, int], what: str) -> Iterator[int]:
    """Offsets of a chained table (vd_next, vn_next, vda_next, vna_next are relative links).
    A link that loops back or leaves the file is an error, never a hang."""
    size, next_at = entry
    seen: set[int] = set()
    off = start
    for _ in range(count):
        image.need(off, size, what)
        if off in seen:
            raise image.fail(f"{what} entries form a loop")
        seen.add(off)
        yield off
        nxt = struct.unpack_from(image.endian + "I", image.data, off + next_at)[0]
        if not nxt:
            return
        off += nxt


def version_definitions(image: FileImage, dynamic: dict[int, int],
                        string: Callable[[int], str]) -> tuple[VersionDefinition, ...]:
    if DT_VERDEF not in dynamic:
        return ()
    start = image.offset_of(dynamic[DT_VERDEF], _VERDEF[0], "version definitions")
    out = []
    for off in _walk(image, start, dynamic.get(DT_VERDEFNUM, 0), _VERDEF, "version definition"):
        _v, flags, ndx, cnt, vhash, aux, _next = struct.unpack_from(image.endian + "HHHHIII", image.data, off)
        names = []
        for aoff in _walk(image, off + aux, cnt, _VERDAUX, "version definition name"):
            names.append(string(struct.unpack_from(image.endian + "I", image.data, aoff)[0]))
        out.append(VersionDefinition(ndx, flags, vhash, tuple(names)))
    return tuple(out)


def version_needs(image: FileImage, dynamic: dict[int, int],
                  string: Callable[[int], str]) -> tuple[VersionNeed, ...]:
    if DT_VERNEED not in dynamic:
        return ()
    start = image.offset_of(dynamic[DT_VERNEED], _VERNEED[0], "version needs")
    out = []
    for off in _walk(image, start, dynamic.get(DT_VERNEEDNUM, 0), _VERNEED, "version need"):
        _v, cnt, vfile, aux, _next = struct.unpack_from(image.endian + "HHIII", image.data, off)
        reqs = []
        for aoff in _walk(image, off + aux, cnt, _VERNAUX, "version need entry"):
            vhash, flags, other, name, _anext = struct.unpack_from(image.endian + "IHHII", image.data, aoff)
            reqs.append(VersionRequirement(string(name), other, flags, vhash))
        out.append(VersionNeed(string(vfile), tuple(reqs)))
    return tuple(out)
