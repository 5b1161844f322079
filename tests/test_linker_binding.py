"""Binding rules of do_lookup_x/check_match: weak definitions, weak references, GNU_UNIQUE."""

from types import SimpleNamespace

import numpy as np
from elf_tools import gcc_shared
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import agree

from customops.linker.scopeindex import ScopeIndex, members
from customops.linker.types import Dlopen, Environment, Scenario


def test_the_first_definition_wins_even_if_weak(linker, loader, tree):
    top, weak, strong = f"{tree}/c/libwtop.so", f"{tree}/c/libweak.so", f"{tree}/c/libstrong.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(top, calls=("call_foo",)),)))
    binding = prediction.binding(top, "foo")
    assert binding.winner.object == weak and binding.winner.binding == "WEAK"
    assert [d.object for d in binding.losers] == [strong]
    assert oracle.calls == [("call_foo", "1")]


def test_ld_dynamic_weak_makes_a_later_strong_definition_win(linker, loader, tree):
    top, strong = f"{tree}/c/libwtop.so", f"{tree}/c/libstrong.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(dynamic_weak=True),
                                                (Dlopen(top, calls=("call_foo",)),)))
    assert prediction.binding(top, "foo").winner.object == strong
    assert oracle.calls == [("call_foo", "2")]


def test_an_unresolved_weak_reference_is_not_an_error(linker, loader, tree):
    lib = f"{tree}/c/libmaybe.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib, calls=("has_maybe",)),)))
    binding = prediction.binding(lib, "maybe")
    assert binding.weak_reference and binding.winner is None
    assert prediction.outcomes[-1].ok
    assert oracle.calls == [("has_maybe", "-1")]


def test_gnu_unique_definitions_are_shared_across_rtld_local(linker, loader, tree):
    liba, libb = f"{tree}/d/libua.so", f"{tree}/d/libub.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(liba, calls=("bump_a",)),
                                                               Dlopen(libb, calls=("bump_b",)))))
    binding = prediction.binding(libb, "_ZZ7countervE1c")
    assert binding.winner.object == liba and binding.winner.binding == "GNU_UNIQUE"
    assert [d.object for d in binding.losers] == [libb]
    assert oracle.calls == [("bump_a", "1"), ("bump_b", "2")]


def test_a_copy_relocation_binds_every_reference_to_the_executables_copy(linker, tree):
    exe = f"{tree}/bin/loader_nopie"
    prediction, _ = agree(linker, Scenario(exe, steps=(Dlopen(f"{tree}/b/liba.so"),)))
    assert prediction.binding(exe, "stdout").relocation == "copy"
    assert prediction.binding(exe, "stdout").winner.object == "/lib/x86_64-linux-gnu/libc.so.6"
    libc_reference = prediction.binding("/lib/x86_64-linux-gnu/libc.so.6", "stdout")
    assert libc_reference.winner.object == exe and libc_reference.reason.startswith("copy relocation")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=40), max_size=5), st.lists(st.integers(0, 60), max_size=400))
def test_the_bulk_membership_test_of_hash_halves_agrees_with_a_plain_one(sets, queries):
    """Which scope objects may export each relocated name: the fast path (small sets searched for in the
    sorted queries, or the sorted queries in a larger set) answers exactly as np.isin."""
    sorted_sets = [np.unique(np.array(s, dtype=np.uint32)) for s in sets]
    q = np.array(queries, dtype=np.uint32)
    for values, found in zip(sorted_sets, members(sorted_sets, q), strict=True):
        assert found.tolist() == np.isin(q, values).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=40), max_size=5), st.lists(st.integers(0, 60), max_size=400))
def test_the_scope_index_counts_the_exporters_of_each_hash_half_as_a_plain_count(sets, queries):
    """How many objects of a scope may export each relocated name (the queries searched in sorted order):
    exactly the number of objects whose export halves hold it."""
    exports = [np.unique(np.array(s, dtype=np.uint32)) for s in sets]
    objects = [SimpleNamespace() for _ in sets]
    halves = {id(o): (e, e[:0]) for o, e in zip(objects, exports, strict=True)}
    index = ScopeIndex([objects], lambda o: halves[id(o)])  # type: ignore[list-item]
    q = np.array(queries, dtype=np.uint32)
    assert index.count(q).tolist() == [sum(int(v in e) for e in exports) for v in queries]


def test_a_tls_reference_never_binds_to_another_objects_undefined_entry(linker, loader, tmp_path):
    """TLS relocations are of the PLT class for check_match, which therefore refuses an undefined entry (value
    0, exempt from the no-value test as TLS): libimport.so, first in the scope, lists the variable it imports
    in its SysV hash table (which, unlike DT_GNU_HASH, holds undefined symbols too); libtls.so's definition
    wins."""
    gcc_shared(tmp_path / "libtls.so", "__thread int tv = 7;\n", "-Wl,-soname,libtls.so")
    gcc_shared(tmp_path / "libimport.so", "extern __thread int tv;\nint imported(void) { return tv; }\n",
               "-Wl,--hash-style=sysv", f"-L{tmp_path}", "-ltls", "-Wl,-soname,libimport.so")
    top = gcc_shared(tmp_path / "libtlstop.so",
                     "extern __thread int tv;\nint imported(void);\nint top(void) { return tv + imported(); }\n",
                     f"-L{tmp_path}", "-Wl,--no-as-needed", "-limport", "-ltls")
    scenario = Scenario(loader, Environment(library_path=str(tmp_path)), (Dlopen(str(top), calls=("top",)),))
    prediction, oracle = agree(linker, scenario)
    assert prediction.binding(str(top), "tv").winner.object == f"{tmp_path}/libtls.so"
    assert oracle.calls == [("top", "14")]
