"""Program headers ld.so refuses to map, and those it maps anyway (glibc 2.36 elf/dl-load.c open_verify and
_dl_map_object_from_fd, elf/dl-map-segments.h): one scenario per rule, each compared with the real ld.so.

The library is a gcc-built one with four PT_LOADs (R, RX, R, RW; no constructors, so a library mapped
strangely is still dlopen()ed without running code) whose program headers each test rewrites."""

import struct
import subprocess
from pathlib import Path

import pytest
from oracle import agree

from customops.elf.mapping import _commit_limit
from customops.linker.types import Dlopen, Scenario

PHDR = struct.Struct("<IIQQQQQQ")  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
TYPE, FLAGS, OFFSET, VADDR, PADDR, FILESZ, MEMSZ, ALIGN = range(8)
PT_NULL, PT_LOAD, PT_DYNAMIC, PF_X, PF_W, PF_R = 0, 1, 2, 1, 2, 4
NOT_PAGE_ALIGNED = "ELF load command address/offset not page-aligned"
CANNOT_MAP = "failed to map segment from shared object"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("segments")
    (out / "tiny.c").write_text("int tiny_value = 7;\nint tiny(void) { return tiny_value; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-nostartfiles", "-o", str(out / "tiny.so"), str(out / "tiny.c")],
                   check=True)
    loads = [p for p in _headers(bytearray((out / "tiny.so").read_bytes())) if p[TYPE] == PT_LOAD]
    assert [p[FLAGS] for p in loads] == [PF_R, PF_R | PF_X, PF_R, PF_R | PF_W]  # the layout the tests edit
    return out / "tiny.so"


def _headers(data: bytearray) -> list[list[int]]:
    phoff, phnum = struct.unpack_from("<Q", data, 32)[0], struct.unpack_from("<H", data, 56)[0]
    return [list(PHDR.unpack_from(data, phoff + PHDR.size * i)) for i in range(phnum)]


def patched(tiny: Path, name: str, edit=None, header: tuple[int, str, int] | None = None) -> str:  # type: ignore[no-untyped-def]
    """A copy of the library with `edit(loads, headers)` applied to its program headers (`loads` are the
    PT_LOAD rows, in file order), or one ELF header field (offset, struct format, value) replaced."""
    data = bytearray(tiny.read_bytes())
    if edit is not None:
        headers = _headers(data)
        edit([p for p in headers if p[TYPE] == PT_LOAD], headers)
        phoff = struct.unpack_from("<Q", data, 32)[0]
        for i, p in enumerate(headers):
            PHDR.pack_into(data, phoff + PHDR.size * i, *p)
    if header is not None:
        struct.pack_into(header[1], data, header[0], header[2])
    path = tiny.parent / name
    path.write_bytes(data)
    return str(path)


def dlopen_error(linker, loader, path: str) -> str | None:  # type: ignore[no-untyped-def]
    """Both the model and ld.so dlopen `path` (agree() asserts they say the same); ld.so's dlerror()."""
    _prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(path),)))
    return oracle.error_of(path)


def move(row: list[int], vaddr: int) -> None:
    row[VADDR] = row[PADDR] = vaddr


def setting(load: int, field: int, value: int):  # type: ignore[no-untyped-def]
    """An edit setting one field of one PT_LOAD."""
    return lambda loads, _headers: loads[load].__setitem__(field, value)


def dropping_loads(loads: list[list[int]], _headers: list[list[int]]) -> None:
    for p in loads:
        p[TYPE] = PT_NULL


def test_a_load_segment_whose_address_and_offset_differ_modulo_the_page_size_is_refused(linker, loader, tiny):
    path = patched(tiny, "misaligned.so", lambda loads, _: move(loads[1], loads[1][VADDR] + 0x10))
    assert dlopen_error(linker, loader, path) == f"{path}: {NOT_PAGE_ALIGNED}"


def test_an_object_without_load_segments_is_refused(linker, loader, tiny):
    path = patched(tiny, "noload.so", dropping_loads)
    assert dlopen_error(linker, loader, path) == f"{path}: object file has no loadable segments"


def test_an_object_whose_dynamic_segment_is_empty_is_refused(linker, loader, tiny):
    def empty(_loads, headers):  # as in a separate debug-information file
        next(p for p in headers if p[TYPE] == PT_DYNAMIC)[FILESZ] = 0
    path = patched(tiny, "nodynamic.so", empty)
    assert dlopen_error(linker, loader, path) == f"{path}: object file has no dynamic section"


def test_a_last_segment_starting_below_the_first_ones_end_is_refused_when_segments_leave_gaps(linker, loader, tiny):
    path = patched(tiny, "lastoverlaps.so", lambda loads, _: move(loads[3], loads[3][VADDR] - 0x3000))
    assert dlopen_error(linker, loader, path) == f"{path}: {NOT_PAGE_ALIGNED}"


def test_overlapping_segments_are_mapped_over_each_other_when_the_last_one_starts_after_the_first(linker, loader,
                                                                                                    tiny):
    path = patched(tiny, "overlap.so", lambda loads, _: move(loads[2], loads[1][VADDR]))
    assert dlopen_error(linker, loader, path) is None


def test_segments_out_of_order_between_the_first_and_the_last_are_mapped(linker, loader, tiny):
    def swap(loads, headers):
        a, b = headers.index(loads[0]), headers.index(loads[1])
        headers[a], headers[b] = headers[b], headers[a]
    path = patched(tiny, "unsorted.so", swap)
    assert dlopen_error(linker, loader, path) is None


def test_an_image_whose_last_segment_ends_before_the_first_begins_wraps_around_and_cannot_be_mapped(linker, loader,
                                                                                                     tiny):
    def last_first(loads, headers):
        a, b = headers.index(loads[0]), headers.index(loads[3])
        headers[a], headers[b] = headers[b], headers[a]
    path = patched(tiny, "wraps.so", last_first)
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"


def test_an_image_larger_than_the_address_space_cannot_be_mapped(linker, loader, tiny):
    path = patched(tiny, "huge.so", setting(3, MEMSZ, 1 << 47))
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"


def test_an_empty_image_cannot_be_mapped(linker, loader, tiny):
    def empty(loads, headers):
        dropping_loads(loads[1:], headers)
        loads[0][FILESZ] = loads[0][MEMSZ] = 0
    path = patched(tiny, "empty.so", empty)
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"


def test_an_alignment_too_large_to_reserve_space_for_cannot_be_mapped(linker, loader, tiny):
    path = patched(tiny, "align62.so", setting(0, ALIGN, 1 << 62))
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"
    path = patched(tiny, "align63.so", setting(0, ALIGN, 1 << 63))  # twice the alignment wraps around to 0
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"


def test_an_alignment_that_is_not_a_power_of_two_or_not_page_sized_is_ignored(linker, loader, tiny):
    """glibc before 2.35 refused "ELF load command alignment not page-aligned"; 2.36 takes the largest
    power of two and ignores the rest."""
    assert dlopen_error(linker, loader, patched(tiny, "align4097.so", setting(0, ALIGN, 0x1001))) is None
    assert dlopen_error(linker, loader, patched(tiny, "align16.so", setting(0, ALIGN, 16))) is None


def test_a_segment_at_a_file_offset_past_the_largest_one_cannot_be_mapped(linker, loader, tiny):
    path = patched(tiny, "offset.so", setting(2, OFFSET, (1 << 63) - 0x1000))  # the segment's vaddr is page-aligned
    assert dlopen_error(linker, loader, path) == f"{path}: {CANNOT_MAP}"


def test_a_writable_segment_larger_than_the_kernel_commits_cannot_be_mapped(linker, loader, tiny):
    def writable(loads, _):
        loads[0][FLAGS] |= PF_W
        loads[3][MEMSZ] = 1 << 45
    path = patched(tiny, "commit.so", writable)
    assert dlopen_error(linker, loader, path) == (None if _commit_limit() is None else f"{path}: {CANNOT_MAP}")


def test_zero_fill_pages_larger_than_the_kernel_commits_cannot_be_mapped(linker, loader, tiny):
    path = patched(tiny, "bss.so", setting(3, MEMSZ, 1 << 46))
    expected = None if _commit_limit() is None else f"{path}: cannot map zero-fill pages"
    assert dlopen_error(linker, loader, path) == expected


def test_program_header_entries_of_another_size_are_refused(linker, loader, tiny):
    path = patched(tiny, "phentsize.so", header=(54, "<H", 57))
    assert dlopen_error(linker, loader, path) == f"{path}: ELF file's phentsize not the expected size"


def test_a_program_header_table_past_the_end_of_the_file_cannot_be_read(linker, loader, tiny):
    path = patched(tiny, "phoff.so", header=(32, "<Q", tiny.stat().st_size + 8))
    assert dlopen_error(linker, loader, path) == f"{path}: cannot read file data"
    path = patched(tiny, "phoff63.so", header=(32, "<Q", 1 << 63))  # pread(): EINVAL
    assert dlopen_error(linker, loader, path) == f"{path}: cannot read file data: Invalid argument"


def test_an_executable_cannot_be_dlopened(linker, loader, tree):
    path = f"{tree}/bin/loader_nopie"
    assert dlopen_error(linker, loader, path) == f"{path}: cannot dynamically load executable"


def test_a_position_independent_executable_cannot_be_dlopened_not_even_the_running_one(linker, loader):
    assert dlopen_error(linker, loader, loader) == f"{loader}: cannot dynamically load position-independent executable"
