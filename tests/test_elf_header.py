"""elf.header agrees with binutils' readelf -h and -l on every fixture, refuses what is not an ELF header with
a typed problem, and the hash tables' one-name walk and batch walk (elf.hashes) find the same symbols."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from elf_tools import readelf
from hypothesis import given, settings
from hypothesis import strategies as st
from test_elf_reader import fixture_elfs

from customops.elf.constants import ELFCLASS64, ELFDATA2LSB, PF_R, PF_W, PF_X
from customops.elf.hashes import HashKind, HashTable, gnu_hash, gnu_hashes
from customops.elf.header import (
    ElfHeaderError,
    HeaderProblem,
    program_headers,
    read_header,
    section_headers,
)
from customops.elf.image import FileImage
from customops.elf.parse import open_mapped
from customops.elf.records import TableLayout
from customops.errors import ElfError

# readelf's names for the machines and file types the fixtures use
MACHINES = {"Advanced Micro Devices X86-64": 62, "Intel 80386": 3, "IBM S/390": 22, "AArch64": 183}
TYPES = {"NONE": 0, "REL": 1, "EXEC": 2, "DYN": 3, "CORE": 4}
SEGMENT_FLAGS = {"R": PF_R, "W": PF_W, "E": PF_X}


def _readelf_header(path: Path) -> dict[str, str]:
    fields = {}
    for line in readelf(str(path), "-h").splitlines():
        name, sep, value = line.strip().partition(":")
        if sep:
            fields.setdefault(name, value.strip())  # "Version" comes twice: e_ident's first
    return fields


def _number(text: str) -> int:
    return int(text.split()[0], 0)


def test_the_header_of_every_fixture_agrees_with_readelf(tree):
    files = fixture_elfs(tree)
    assert len(files) > 20
    for path in files:
        theirs = _readelf_header(path)
        ours = read_header(path.read_bytes(), str(path))
        assert (ours.bits, ours.byte_order) == (int(theirs["Class"][3:]), theirs["Data"].split()[-2]), path
        assert ours.type == TYPES[theirs["Type"].split()[0]], path
        assert ours.machine == MACHINES[theirs["Machine"]], path
        assert (ours.entry, ours.flags) == (int(theirs["Entry point address"], 16), int(theirs["Flags"].split()[0], 16))
        assert (ours.phoff, ours.shoff) == (_number(theirs["Start of program headers"]),
                                            _number(theirs["Start of section headers"])), path
        assert (ours.ehsize, ours.phentsize, ours.phnum) == (
            _number(theirs["Size of this header"]), _number(theirs["Size of program headers"]),
            _number(theirs["Number of program headers"])), path
        assert (ours.shentsize, ours.shnum, ours.shstrndx) == (
            _number(theirs["Size of section headers"]), _number(theirs["Number of section headers"]),
            _number(theirs["Section header string table index"])), path
        assert ours.size == ours.ehsize and ours.program_header_size == ours.phentsize, path


_SEGMENT = re.compile(r"^\s+(\S+)\s+(0x\w+) (0x\w+) 0x\w+ (0x\w+) (0x\w+) (.{3}) (0x\w+)$")


def test_the_program_headers_of_every_fixture_agree_with_readelf(tree):
    for path in fixture_elfs(tree):
        data = path.read_bytes()
        ours = program_headers(data, read_header(data, str(path)), str(path))
        theirs = [m.groups() for m in map(_SEGMENT.match, readelf(str(path), "-l").splitlines()) if m]
        assert len(ours) == len(theirs), path
        for segment, (_type, offset, vaddr, filesz, memsz, flags, align) in zip(ours, theirs, strict=True):
            flag_bits = sum(SEGMENT_FLAGS[c] for c in flags if c != " ")
            assert (segment.offset, segment.vaddr, segment.filesz, segment.memsz, segment.flags, segment.align) == (
                int(offset, 16), int(vaddr, 16), int(filesz, 16), int(memsz, 16), flag_bits, int(align, 16)), path


def test_the_section_headers_of_every_fixture_are_as_many_as_readelf_lists(tree):
    for path in fixture_elfs(tree):
        data = path.read_bytes()
        header = read_header(data, str(path))
        sections = section_headers(data, header)
        assert len(sections or ()) == header.shnum, path
        listed = len(re.findall(r"^\s+\[\s*\d+\]", readelf(str(path), "-S"), re.M))
        assert listed == header.shnum, path


@pytest.mark.parametrize(("content", "problem", "reason"), [
    (b"", HeaderProblem.NOT_ELF, "not an ELF file (bad magic)"),
    (b"\x7fELF\x02\x01", HeaderProblem.NOT_ELF, "not an ELF file (bad magic)"),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:0\n", HeaderProblem.NOT_ELF,
     "not an ELF file: a Git LFS pointer, not the library"),
    (b"\x7fELF\x03\x01" + bytes(58), HeaderProblem.BAD_CLASS, "invalid ELF class 3"),
    (b"\x7fELF\x02\x00" + bytes(58), HeaderProblem.BAD_DATA, "invalid ELF data encoding 0"),
    (b"\x7fELF\x02\x01" + bytes(40), HeaderProblem.TRUNCATED,
     "ELF header lies past the end of the file (offset 16, 48 bytes)"),
])
def test_what_is_not_an_elf_header_is_refused_with_a_typed_problem(content, problem, reason):
    with pytest.raises(ElfHeaderError) as caught:
        read_header(content, "lib.so")
    assert (caught.value.problem, caught.value.reason, caught.value.path) == (problem, reason, "lib.so")


def test_a_program_header_table_past_the_end_is_an_error(tree):
    data = bytearray((tree / "e/libvuser.so").read_bytes())
    header = read_header(data)
    assert header.class_ is ELFCLASS64 and header.data is ELFDATA2LSB
    with pytest.raises(ElfError, match="program header table lies past the end of the file"):
        program_headers(data[:header.phoff + header.phentsize], header)


# -- the one-name walk and the batch walk of elf.hashes ---------------------------------------------------
def _gnu_table(path: Path) -> tuple[HashTable | None, list[bytes]]:
    """The library's hash table, opened through the header API, and the names of its dynamic symbols."""
    from customops.elf.cache import ElfReader

    info = ElfReader(use_cache=False).read(path)
    data, _identity = open_mapped(str(path))
    header = read_header(data, str(path))
    image = FileImage(str(path), data)
    image.adopt(header, program_headers(data, header))
    names = [info.symbols.name(i) for i in range(1, info.symbols.count)]
    return HashTable.open(image, info.layout), names


def _one_at_a_time(table: HashTable, hashes: np.ndarray) -> list[list[int]]:
    return [list(table.candidates(int(h), 0)) for h in hashes.tolist()]


def _batch(table: HashTable, hashes: np.ndarray) -> list[list[int]] | None:
    found = table.gnu_candidates(hashes)
    if found is None:
        return None
    out: list[list[int]] = [[] for _ in range(len(hashes))]
    for q, i in zip(*(a.tolist() for a in found), strict=True):
        out[q].append(i)
    return out


def test_the_batch_gnu_hash_walk_meets_the_same_symbols_as_the_one_name_walk_on_every_fixture(tree):
    checked = 0
    for path in fixture_elfs(tree):
        try:
            table, names = _gnu_table(path)
        except ElfError:  # damaged on purpose: not this test's subject
            continue
        if table is None or table.kind is not HashKind.GNU:
            continue
        hashes = gnu_hashes([*names, b"no_such_symbol", b"_Z3absentv"])
        assert _batch(table, hashes) == _one_at_a_time(table, hashes), path
        checked += 1
    assert checked > 20


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.integers(0, 4), st.data())
def test_the_batch_walk_agrees_with_the_one_name_walk_on_arbitrary_tables(nbuckets, symoffset, draw):
    """Damaged tables too: buckets below symoffset or past the chain, chains without an end bit."""
    chain_length = draw.draw(st.integers(0, 12))
    chain = np.array(draw.draw(st.lists(st.integers(0, 2**32 - 1), min_size=chain_length, max_size=chain_length)),
                     dtype=np.uint32)
    buckets = np.array(draw.draw(st.lists(st.integers(0, symoffset + chain_length + 2), min_size=nbuckets,
                                          max_size=nbuckets)), dtype=np.uint32)
    bloom = np.array(draw.draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=1)), dtype=np.uint64)
    table = HashTable(HashKind.GNU, nbuckets, symoffset, buckets, chain, bloom, draw.draw(st.integers(0, 31)), 64)
    names = draw.draw(st.lists(st.binary(max_size=8), max_size=10))
    hashes = np.array([gnu_hash(n) for n in names] + (chain >> 1 << 1).tolist(), dtype=np.uint32)
    batch = _batch(table, hashes)
    assert batch is None or batch == _one_at_a_time(table, hashes)


def test_a_layout_without_hash_tables_opens_none():
    layout = TableLayout(0, 0, 0, 0, None, None, None)
    assert HashTable.open(FileImage("x", b""), layout) is None
