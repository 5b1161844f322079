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
    """The batch remembers a lookup for every object of its scope, but never a failure: its message names the
    object whose relocation failed (it named the first one to fail for all of them)."""
    scenario = _two_referrers_of_a_version_their_named_file_lacks(tmp_path, loader)
    for model in (linker, Linker(linker.target, linker.reader, few=0), Linker(linker.target, batch=False)):
        failing = model.run(scenario).outcomes[-1].unresolved
        assert sorted(b.referrer for b in failing) == [f"{tmp_path}/liba.so", f"{tmp_path}/libb.so"]
        assert all(b.failure is not None and b.failure.name == b.referrer for b in failing), failing


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="glibc 2.36 reports `undefined symbol: foo, version V1` where the model predicts `symbol "
                   "foo version V1 not defined in file libnamed.so with link time reference` (the named-file rule "
                   "of older loaders)")
def test_a_version_missing_from_its_sysv_hashed_named_file_fails_as_ld_so_says(linker, loader, tmp_path):
    agree(linker, _two_referrers_of_a_version_their_named_file_lacks(tmp_path, loader))
