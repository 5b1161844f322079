"""Truncated and byte-mutated copies of real ELF files: the reader returns a record or raises its own
ElfError naming the file, quickly; never IndexError, struct.error, a hang or unbounded memory."""

from __future__ import annotations

import time

import pytest
from conftest import needs_fixture, toolchains_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from customops.elf.parse import parse_elf
from customops.elf.records import FileIdentity
from customops.elf.summary import scan_record
from customops.errors import ElfError
from fixtures.build import why_unavailable

ALL_SEEDS = ("e/libvuser.so", "elf/libkinds.so", "elf/libkinds32.so", "elf/libbe.so", "elf/libsysv.so",
             "elf/libkinds_stripped.so", "d/libua.so", "bin/loader")
# The seeds this machine's toolchains build (no gcc-multilib: no libkinds32; no s390x binutils: no libbe);
# test_every_seed_is_in_the_tree reports each left-out seed as a skip with the reason.
SEEDS = tuple(s for s in ALL_SEEDS if not any(why_unavailable(t) for t in toolchains_of(s)))


@pytest.mark.parametrize("seed", [pytest.param(s, marks=needs_fixture(s)) for s in ALL_SEEDS])
def test_every_seed_is_in_the_tree(tree, seed):
    assert (tree / seed).is_file()


def exercise(data: bytes) -> None:
    started = time.perf_counter()
    try:
        info = parse_elf("fuzzed.so", data, FileIdentity(0, 0, len(data), 0))
        scan_record(info, with_symbols=True)
        for need in info.version_needs:
            assert isinstance(need.file, str)
        for i in range(1, min(info.symbols.count, 64)):
            name = info.symbols.name(i)
            list(info.symbols.lookup(name, 0, 0))
    except ElfError as exc:
        assert str(exc).startswith("fuzzed.so: ")
    assert time.perf_counter() - started < 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_copies_fail_only_with_the_readers_own_error(tree, seed, data):
    path = tree / seed
    original = bytearray(path.read_bytes())
    mutations = data.draw(st.lists(st.tuples(st.integers(0, len(original) - 1), st.integers(0, 255)),
                                   min_size=1, max_size=16))
    for offset, value in mutations:
        original[offset] = value
    exercise(bytes(original))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS), cut=st.floats(0, 1))
def test_truncated_copies_fail_only_with_the_readers_own_error(tree, seed, cut):
    path = tree / seed
    original = path.read_bytes()
    exercise(original[: int(len(original) * cut)])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_headers_and_dynamic_tables(tree, seed, data):
    """Most damage that matters is in the first pages: header, program headers, PT_DYNAMIC, hash tables."""
    path = tree / seed
    original = bytearray(path.read_bytes())
    limit = min(len(original), 4096)
    for _ in range(data.draw(st.integers(1, 8))):
        offset = data.draw(st.integers(0, limit - 1))
        original[offset] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    exercise(bytes(original))
