"""Symbol versions: version nodes checked at load (dl-version.c), per-symbol versions at binding."""

import re
from pathlib import Path

import pytest
from elf_tools import gcc_shared
from oracle import agree

from customops.linker.messages import lazy_failure_messages
from customops.linker.process import Linker
from customops.linker.types import Dlopen, Environment, Scenario


def test_a_missing_version_node_fails_the_load(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/v1only"),
                                           (Dlopen(user),)))
    assert prediction.outcomes[-1].message == \
        f"{tree}/e/v1only/libv.so: version `V2' not found (required by {user})"


def test_a_missing_version_node_fails_even_under_lazy_binding(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/v1only"),
                                           (Dlopen(user, lazy=True),)))
    assert prediction.outcomes[-1].status == "failed"


def test_a_present_node_without_the_symbol_fails_per_symbol(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/nobar"),
                                           (Dlopen(user),)))
    assert prediction.outcomes[-1].message == f"{user}: undefined symbol: bar, version V2"


def test_a_missing_versioned_function_fails_at_its_first_call_when_lazy(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/nobar"),
                                                (Dlopen(user, lazy=True, calls=("use_bar",)),)))
    assert oracle.returncode == 127
    assert lazy_failure_messages(prediction.outcomes[-1], loader) == [
        f"{loader}: symbol lookup error: {user}: undefined symbol: bar, version V2"]


def test_an_unversioned_provider_named_in_the_verneed_trips_ld_so_assertion(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/unver"),
                                                (Dlopen(user),)))
    assert oracle.returncode == 127
    assert re.search(r"Inconsistency detected by ld\.so: dl-lookup\.c: .*check_match", prediction.exit_message)


def test_an_unversioned_interposer_captures_versioned_references(linker, loader, tree):
    user, pre = f"{tree}/e/libvuser.so", f"{tree}/e/libpf_unver.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/v12", preload=pre),
                                           (Dlopen(user, calls=("use_foo",)),)))
    assert prediction.binding(user, "foo").winner.object == pre


def test_an_interposer_under_another_version_node_does_not_interpose(linker, loader, tree):
    user = f"{tree}/e/libvuser.so"
    env = Environment(library_path=f"{tree}/e/v12", preload=f"{tree}/e/libpf_myver.so")
    prediction, _ = agree(linker, Scenario(loader, env, (Dlopen(user, calls=("use_foo",)),)))
    assert prediction.binding(user, "foo").winner.object == f"{tree}/e/v12/libv.so"


def test_an_interposer_with_the_same_version_node_interposes(linker, loader, tree):
    user, pre = f"{tree}/e/libvuser.so", f"{tree}/e/libpf_v1.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(library_path=f"{tree}/e/v12", preload=pre),
                                           (Dlopen(user, calls=("use_foo",)),)))
    assert prediction.binding(user, "foo").winner.object == pre


def test_an_unversioned_reference_takes_the_oldest_version(linker, loader, tree):
    user = f"{tree}/e/libold_user.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(user, calls=("call_foo",)),)))
    assert prediction.binding(user, "foo").winner.version == "V1"
    assert oracle.calls == [("call_foo", "1")]


def test_dlsym_returns_the_default_version(linker, loader, tree):
    lib = f"{tree}/e/libv2def.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib, calls=("foo",)),)))
    assert prediction.outcomes[-1].calls[0].definition.version == "V2"
    assert oracle.calls == [("foo", "2")]



def _two_referrers_of_a_version_their_named_file_lacks(directory: Path, loader: str) -> Scenario:
    """libtop needs liba and libb, which both reference foo@V1 from libnamed.so; the libnamed.so found at run
    time (SysV hash only) has version V1 but no foo."""
    sysv = ("-Wl,--hash-style=sysv", "-Wl,-soname,libnamed.so")
    script = directory / "v1.map"
    script.write_text("V1 { global: *; };\n")
    gcc_shared(directory / "link/libnamed.so", "int foo(void) { return 1; }\n", *sysv,
               f"-Wl,--version-script={script}")
    gcc_shared(directory / "run/libnamed.so", "int other(void) { return 2; }\n", *sysv,
               f"-Wl,--version-script={script}")
    for name in ("a", "b"):
        gcc_shared(directory / f"lib{name}.so", f"int foo(void);\nint {name}_fn(void) {{ return foo(); }}\n",
                   f"-L{directory / 'link'}", "-lnamed", f"-Wl,-soname,lib{name}.so")
    top = gcc_shared(directory / "libtop.so",
                     "int a_fn(void);\nint b_fn(void);\nint top(void) { return a_fn() + b_fn(); }\n",
                     f"-L{directory}", "-la", "-lb")
    return Scenario(loader, Environment(library_path=f"{directory / 'run'}:{directory}"), (Dlopen(str(top)),))


def test_each_failing_relocation_names_its_own_referrer(linker, loader, tmp_path):
    """The batch remembers a lookup for every object of its scope, an undefined name too: each failure's
    message still names the object whose relocation failed."""
    scenario = _two_referrers_of_a_version_their_named_file_lacks(tmp_path, loader)
    for model in (linker, Linker(linker.target, linker.reader, few=0), Linker(linker.target, batch=False)):
        failing = model.run(scenario).outcomes[-1].unresolved
        assert sorted(b.referrer for b in failing) == [f"{tmp_path}/liba.so", f"{tmp_path}/libb.so"]
        assert [b.error for b in failing] == [f"{b.referrer}: undefined symbol: foo, version V1" for b in failing]


def test_a_version_missing_from_its_sysv_hashed_named_file_reads_as_an_undefined_symbol(linker, loader, tmp_path):
    """glibc 2.36 no longer says "not defined in file ... with link time reference" (older loaders did)."""
    prediction, _ = agree(linker, _two_referrers_of_a_version_their_named_file_lacks(tmp_path, loader))
    assert prediction.outcomes[-1].message == f"{tmp_path}/libb.so: undefined symbol: foo, version V1"


@pytest.mark.parametrize("hash_style", ["sysv", "gnu"])
def test_the_file_a_version_names_does_not_end_the_search_for_its_symbol(linker, loader, tmp_path, hash_style):
    """foo@V1 is missing from libnamed.so, the file liba's reference names, but defined by liblater.so, later
    in the scope: glibc 2.36 goes on past the named file (older loaders stopped there when its SysV hash
    chain ended, with "symbol foo version V1 not defined in file libnamed.so with link time reference")."""
    script = tmp_path / "v1.map"
    script.write_text("V1 { global: *; };\n")
    named = (f"-Wl,--hash-style={hash_style}", "-Wl,-soname,libnamed.so", f"-Wl,--version-script={script}")
    gcc_shared(tmp_path / "link/libnamed.so", "int foo(void) { return 1; }\n", *named)
    gcc_shared(tmp_path / "run/libnamed.so", "int other(void) { return 2; }\n", *named)
    gcc_shared(tmp_path / "liblater.so", "int foo(void) { return 3; }\n", "-Wl,-soname,liblater.so",
               f"-Wl,--version-script={script}")
    gcc_shared(tmp_path / "liba.so", "int foo(void);\nint a_fn(void) { return foo(); }\n",
               f"-L{tmp_path / 'link'}", "-lnamed", "-Wl,-soname,liba.so")
    gcc_shared(tmp_path / "libb.so", "int b_fn(void) { return 0; }\n", f"-L{tmp_path / 'link'}",
               f"-L{tmp_path}", "-Wl,--no-as-needed", "-lnamed", "-llater", "-Wl,-soname,libb.so")
    top = gcc_shared(tmp_path / "libtop.so", "int a_fn(void);\nint b_fn(void);\nint top(void) { return a_fn(); }\n",
                     f"-L{tmp_path}", "-Wl,--no-as-needed", "-la", "-lb")
    scenario = Scenario(loader, Environment(library_path=f"{tmp_path / 'run'}:{tmp_path}"),
                        (Dlopen(str(top), calls=("top",)),))
    prediction, oracle = agree(linker, scenario)
    scope = list(prediction.outcomes[-1].loaded)
    assert scope.index(f"{tmp_path}/run/libnamed.so") < scope.index(f"{tmp_path}/liblater.so")
    assert prediction.binding(f"{tmp_path}/liba.so", "foo").winner.object == f"{tmp_path}/liblater.so"
    assert oracle.calls == [("top", "3")]
