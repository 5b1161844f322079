"""Lookup scopes: global = executable, preloads, breadth-first NEEDED, RTLD_GLOBAL dlopens; a dlopen'ed
object then sees its own breadth-first local scope (RTLD_DEEPBIND: first). glibc elf/dl-deps.c
_dl_map_object_deps, elf/dl-open.c dl_open_worker, elf/dl-lookup.c _dl_lookup_symbol_x."""

from oracle import agree

from customops.linker.types import Dlopen, Environment, Scenario


def test_rtld_local_libraries_each_bind_to_their_own_definition(linker, loader, tree):
    liba, libb = f"{tree}/b/liba.so", f"{tree}/b/libb.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(liba, calls=("call_a",)),
                                                               Dlopen(libb, calls=("call_b",)))))
    assert prediction.binding(liba, "foo").winner.object == liba
    assert prediction.binding(libb, "foo").winner.object == libb
    assert oracle.calls == [("call_a", "10"), ("call_b", "20")]


def test_a_preload_interposes_over_every_rtld_local_library(linker, loader, tree):
    liba, libb, pre = f"{tree}/b/liba.so", f"{tree}/b/libb.so", f"{tree}/a/libpre.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=pre),
                                           (Dlopen(liba, calls=("call_a",)), Dlopen(libb, calls=("call_b",)))))
    assert prediction.binding(liba, "foo").winner.object == pre
    assert prediction.binding(libb, "foo").winner.object == pre


def test_rtld_global_definitions_win_for_later_local_libraries(linker, loader, tree):
    liba, libb = f"{tree}/b/liba.so", f"{tree}/b/libb.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(liba, make_global=True),
                                                               Dlopen(libb, calls=("call_b",)))))
    assert prediction.binding(libb, "foo").winner.object == liba
    assert oracle.calls == [("call_b", "10")]


def test_deepbind_searches_the_local_scope_before_the_preload(linker, loader, tree):
    liba, pre = f"{tree}/b/liba.so", f"{tree}/a/libpre.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=pre),
                                                (Dlopen(liba, deepbind=True, calls=("call_a",)),)))
    assert prediction.binding(liba, "foo").winner.object == liba
    assert oracle.calls == [("call_a", "10")]


def test_dt_flags_1_global_has_no_effect_under_rtld_local(linker, loader, tree):
    libz, libb = f"{tree}/b/libzglobal.so", f"{tree}/b/libb.so"
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(libz), Dlopen(libb, calls=("call_b",)))))
    assert prediction.binding(libb, "foo").winner.object == libb


def test_a_nodlopen_library_cannot_be_dlopened(linker, loader, tree):
    lib = f"{tree}/b/libnoopen.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib),)))
    assert oracle.error_of(lib) == f"{lib}: shared object cannot be dlopen()ed"
    assert prediction.outcomes[-1].status == "failed"


def test_breadth_first_order_lets_a_sibling_win_over_a_dependency(linker, loader, tree):
    top, liba, libb = f"{tree}/bfs/libtop.so", f"{tree}/bfs/libA.so", f"{tree}/bfs/libB.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(top), Dlopen(liba, calls=("a_calls_who",)))))
    assert prediction.binding(liba, "who").winner.object == libb
    assert oracle.calls == [("a_calls_who", "2")]
