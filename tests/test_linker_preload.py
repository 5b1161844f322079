"""LD_PRELOAD: preloads join the global scope right after the executable (glibc elf/rtld.c: handle_preload
maps them before the executable's DT_NEEDED; elf/dl-deps.c _dl_map_object_deps orders the scope).

Each test states one rule, runs the fixture loader under the real ld.so, and checks that the model
predicts the same loads, messages and bindings (tests/oracle.py `agree`)."""

from conftest import needs_toolchain
from oracle import agree

from customops.linker.types import Dlopen, Environment, Scenario


def test_preload_interposes_on_a_dlopened_librarys_own_calls(linker, loader, tree):
    libfoo, libpre = f"{tree}/a/libfoo.so", f"{tree}/a/libpre.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=libpre),
                                                (Dlopen(libfoo, calls=("call_foo",)),)))
    assert prediction.binding(libfoo, "foo").winner.object == libpre
    assert [d.object for d in prediction.binding(libfoo, "foo").losers] == [libfoo]
    assert oracle.calls == [("call_foo", "2")]


def test_symbolic_library_keeps_its_own_references_despite_a_preload(linker, loader, tree):
    lib = f"{tree}/a/libfoo_symbolic.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=f"{tree}/a/libpre.so"),
                                                (Dlopen(lib, calls=("call_foo",)),)))
    # -Bsymbolic resolved the call at link time: no relocation is left for the preload to capture.
    assert prediction.binding(lib, "foo") is None
    assert oracle.calls == [("call_foo", "5")]


def test_first_preload_in_the_list_wins_and_spaces_separate_entries(linker, loader, tree):
    libfoo, pre, pre2 = f"{tree}/a/libfoo.so", f"{tree}/a/libpre.so", f"{tree}/a/libpre2.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=f"{pre2} {pre}"),
                                           (Dlopen(libfoo, calls=("call_foo",)),)))
    assert prediction.binding(libfoo, "foo").winner.object == pre2
    assert prediction.global_scope[1:3] == [pre2, pre]


def test_colons_also_separate_preload_entries(linker, loader, tree):
    libfoo, pre, pre2 = f"{tree}/a/libfoo.so", f"{tree}/a/libpre.so", f"{tree}/a/libpre2.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=f"{pre}:{pre2}"),
                                           (Dlopen(libfoo, calls=("call_foo",)),)))
    assert prediction.binding(libfoo, "foo").winner.object == pre


def test_missing_preload_is_only_a_warning_and_the_program_runs(linker, loader, tree):
    missing = f"{tree}/a/nonexist.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=missing)))
    assert oracle.returncode == 0
    assert prediction.outcomes[0].status == "ignored"
    assert "cannot be preloaded (cannot open shared object file): ignored." in prediction.outcomes[0].message


@needs_toolchain("m32")
def test_wrong_class_preload_is_ignored_with_a_warning(linker, loader, tree):
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=f"{tree}/g/badc/libw.so")))
    assert prediction.outcomes[0].status == "ignored"
    assert "(wrong ELF class: ELFCLASS32)" in prediction.outcomes[0].message


def test_preload_whose_own_dependency_is_missing_kills_the_program(linker, loader, tree):
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=f"{tree}/a/libpre_needs_missing.so")))
    assert oracle.returncode == 127
    assert prediction.exit_message.endswith(
        "error while loading shared libraries: libzz.so: cannot open shared object file: No such file or directory")


def test_preloaded_soname_satisfies_a_needed_entry_without_any_search(linker, loader, tree):
    pre = f"{tree}/a/libw_preload_soname.so"
    user = f"{tree}/g/libuse_bare.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(preload=pre),
                                                (Dlopen(user, calls=("call_where",)),)))
    assert "libw.so" not in oracle.tried
    assert all(s.name != "libw.so" for o in prediction.outcomes for s in o.searches)
    assert prediction.binding(user, "where").winner.object == pre


def test_each_object_belongs_to_the_step_that_loaded_it(linker, loader, tree):
    """The program and its dependencies are the startup step's, which comes after one step per preload entry."""
    preload = f"{tree}/g/d_llp/libw.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(preload=preload),
                                           (Dlopen(f"{tree}/g/i/libtop_runpath3.so"),)))
    assert [o.kind for o in prediction.outcomes] == ["preload", "startup", "dlopen"]
    assert all(o.name in prediction.outcomes[o.step].loaded for o in prediction.objects), prediction.objects
    assert [o.step for o in prediction.objects if o.name in (loader, preload)] == [1, 0]
