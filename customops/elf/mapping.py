"""Whether ld.so can map a shared object's PT_LOAD segments: what _dl_map_object_from_fd (glibc
elf/dl-load.c) and _dl_map_segments (elf/dl-map-segments.h, glibc 2.36) refuse, with their messages."""

from __future__ import annotations

import mmap
from functools import cache
from itertools import pairwise
from typing import NamedTuple

from customops.elf.constants import EM_X86_64, ET_DYN, PF_W, PT_DYNAMIC, PT_LOAD
from customops.elf.header import Segment
from customops.elf.image import FileImage

NOT_ALIGNED = "ELF load command address/offset not page-aligned"
CANNOT_MAP = "failed to map segment from shared object"
NO_DYNAMIC = "object file has no dynamic section"


class _Load(NamedTuple):
    """One PT_LOAD as _dl_map_object_from_fd's struct loadcmd: page-rounded, wrapped to the word size."""

    mapstart: int
    mapend: int
    dataend: int
    allocend: int
    mapoff: int
    writable: bool


class _Mappings:
    """Whether the kernel grants one mmap() of ld.so's, from its length, file offset and protection alone
    (where it lands in the address space depends on the process, which no model of a file can know)."""

    def __init__(self, elf_class: int, machine: int, page: int) -> None:
        # TASK_SIZE: x86-64 with 4-level page tables, AArch64 with 48-bit addresses, a 32-bit process
        self.space = (1 << 47) - page if machine == EM_X86_64 else 1 << 48 if elf_class == 64 else (1 << 32) - 2 * page
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


def check_mapping(image: FileImage, segments: list[Segment], e_type: int) -> None:
    """Refuse, as ld.so does and in its order, for the page size of this machine: a PT_LOAD whose address and
    offset are not congruent modulo the page size; no PT_LOAD; no dynamic section; then the mappings
    themselves. ET_EXEC files are refused by the loader before mapping, and executables are the kernel's."""
    page = mmap.PAGESIZE
    loads, align_max, has_dynamic = _load_commands(image, segments, page)
    if not loads:
        raise image.fail("object file has no loadable segments")
    if e_type != ET_DYN:
        return
    if not has_dynamic:
        raise image.fail(NO_DYNAMIC)
    _check_segment_maps(image, loads, align_max, page)


def _load_commands(image: FileImage, segments: list[Segment], page: int) -> tuple[list[_Load], int, bool]:
    """The PT_LOADs as load commands, the largest power-of-two alignment among them, and whether there is
    a usable PT_DYNAMIC (one with an empty PT_DYNAMIC, usually separate debug information, is not)."""
    wrap = (1 << image.elf_class) - 1
    loads: list[_Load] = []
    align_max, dynamic, empty_dynamic = 0, 0, False
    for s in segments:
        if s.type == PT_DYNAMIC:
            if s.filesz == 0:
                empty_dynamic = True
            else:
                dynamic = s.vaddr
        elif s.type == PT_LOAD:
            if (s.vaddr - s.offset) & (page - 1):
                raise image.fail(NOT_ALIGNED)
            loads.append(_Load(s.vaddr & ~(page - 1), (s.vaddr + s.filesz + page - 1) & ~(page - 1) & wrap,
                               (s.vaddr + s.filesz) & wrap, (s.vaddr + s.memsz) & wrap, s.offset & ~(page - 1),
                               bool(s.flags & PF_W)))
            if s.align & (s.align - 1) == 0 and s.align > align_max:  # powerof2()
                align_max = s.align
    return loads, align_max, bool(dynamic) and not empty_dynamic


def _check_segment_maps(image: FileImage, loads: list[_Load], align_max: int, page: int) -> None:
    """The first segment reserves the whole image (last end - first start, unsigned, so segments out of
    order wrap around), each later one is mapped over it; with gaps between segments, the last must not
    start below the first one's end. A mapping fails when it is empty, larger than the address space, past
    the largest file offset, or writable and larger than the kernel will commit (vm.overcommit_memory).
    Segments may overlap or be out of order otherwise: ld.so maps them anyway, the later over the earlier."""
    wrap = (1 << image.elf_class) - 1
    maps = _Mappings(image.elf_class, image.machine, page)
    first, last = loads[0], loads[-1]
    length = (last.allocend - first.mapstart) & wrap
    if align_max > page:  # a PROT_NONE reservation large enough to align the image, then the image in it
        reserve = (length + align_max if length >= align_max else 2 * align_max) & wrap
        if not maps.fits(reserve, None, False):
            raise image.fail(CANNOT_MAP)
    if not maps.fits(length, first.mapoff, first.writable):
        raise image.fail(CANNOT_MAP)
    if any(a.mapend != b.mapstart for a, b in pairwise(loads)) and last.mapstart < first.mapend:
        raise image.fail(NOT_ALIGNED)
    for i, load in enumerate(loads):
        if i and load.mapend > load.mapstart and not maps.fits(load.mapend - load.mapstart, load.mapoff,
                                                               load.writable):
            raise image.fail(CANNOT_MAP)
        zeropage = min((load.dataend + page - 1) & ~(page - 1), load.allocend)
        if load.allocend > load.dataend and load.allocend > zeropage and not maps.fits(
                load.allocend - zeropage, None, load.writable):
            raise image.fail("cannot map zero-fill pages")
