"""Lazy versus immediate binding: which undefined symbols fail at load, and which at their first call."""

from oracle import agree

from customops.linker.types import Dlopen, Environment, Scenario


def test_undefined_data_fails_at_load_even_when_lazy(linker, loader, tree):
    lib = f"{tree}/f/libu.so"
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(lib, lazy=True),)))
    assert prediction.outcomes[-1].message == f"{lib}: undefined symbol: missing_var"


def test_undefined_function_loads_lazily_and_kills_the_process_at_its_first_call(linker, loader, tree):
    lib = f"{tree}/f/libuf.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib, lazy=True, calls=("call_missing",)),)))
    assert prediction.outcomes[-1].ok
    assert [b.symbol for b in prediction.outcomes[-1].lazy_failures] == [b"missing_fn"]
    assert oracle.returncode == 127


def test_an_unused_missing_function_is_harmless_when_lazy(linker, loader, tree):
    lib = f"{tree}/f/libuf.so"
    prediction, oracle = agree(linker, Scenario(loader, steps=(Dlopen(lib, lazy=True, calls=("harmless",)),)))
    assert oracle.returncode == 0 and prediction.exit_message is None


def test_undefined_function_fails_dlopen_with_rtld_now(linker, loader, tree):
    lib = f"{tree}/f/libuf.so"
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(lib),)))
    assert prediction.outcomes[-1].message == f"{lib}: undefined symbol: missing_fn"


def test_a_z_now_library_fails_even_when_opened_lazily(linker, loader, tree):
    lib = f"{tree}/f/libuf_now.so"
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(lib, lazy=True),)))
    assert prediction.outcomes[-1].status == "failed"


def test_ld_bind_now_turns_lazy_into_now(linker, loader, tree):
    lib = f"{tree}/f/libuf.so"
    prediction, _ = agree(linker, Scenario(loader, Environment(bind_now=True), (Dlopen(lib, lazy=True),)))
    assert prediction.outcomes[-1].status == "failed"


def test_a_library_that_exports_nothing_fails_on_its_undefined_function_as_ld_so_does(linker, loader, tmp_path):
    """Its DT_GNU_HASH counts no symbol (symoffset 1): its imports are what its relocations name."""
    import subprocess

    source = tmp_path / "constructor_only.c"
    source.write_text("int missing_fn(void);\n__attribute__((constructor)) static void run(void) { missing_fn(); }\n")
    lib = tmp_path / "libconstructor_only.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--hash-style=gnu", str(source), "-o", str(lib)], check=True,
                   capture_output=True)
    prediction, _ = agree(linker, Scenario(loader, steps=(Dlopen(str(lib)),)))
    assert prediction.outcomes[-1].message == f"{lib}: undefined symbol: missing_fn"
