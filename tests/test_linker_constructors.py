"""Constructors call before main (glibc elf/dl-init.c _dl_init): a lazily bound function that nothing defines
fails at its first call, and when a constructor of a preloaded library makes that call, ld.so prints `symbol
lookup error` and the process exits before main. Which functions the constructors call is read from their code
(customops.elf.reach); each test runs the fixture loader under the real ld.so (tests/oracle.py `agree`)."""

import subprocess

import pytest
from oracle import agree

from customops.linker.types import Environment, Scenario

MISSING = "int missing_fn(void);\n"


def _library(tmp_path, name: str, source: str, cxx: bool = False, *flags: str) -> str:
    path = tmp_path / f"{name}.{'cpp' if cxx else 'c'}"
    path.write_text(source)
    lib = tmp_path / f"lib{name}.so"
    subprocess.run(["g++" if cxx else "gcc", "-shared", "-fPIC", *flags, str(path), "-o", str(lib)], check=True,
                   capture_output=True)
    return str(lib)


def _preloaded(linker, loader, lib: str):
    return agree(linker, Scenario(loader, Environment(preload=lib)))


@pytest.mark.parametrize("optimise", ["-O0", "-O2"])
def test_a_constructor_that_calls_a_function_defined_nowhere_stops_the_process_at_start(linker, loader, tmp_path,
                                                                                          optimise):
    lib = _library(tmp_path, "ctor", MISSING + "static void helper(void) { missing_fn(); }\n"
                   "__attribute__((constructor)) static void run(void) { helper(); }\n", False, optimise)
    prediction, oracle = _preloaded(linker, loader, lib)
    assert oracle.returncode == 127
    assert prediction.exit_message == f"{loader}: symbol lookup error: {lib}: undefined symbol: missing_fn"
    (startup,) = [o for o in prediction.outcomes if o.kind == "startup"]
    assert startup.status == "fatal"
    (reach,) = startup.constructors
    assert [c.binding.symbol for c in reach.calls] == [b"missing_fn"] and reach.calls[0].constructor == "run"


def test_a_static_initializer_that_calls_an_inline_function_calling_one_defined_nowhere_stops_the_process(
        linker, loader, tmp_path):
    """The inline function is the library's own (weak, called through its PLT): the traversal follows into it."""
    lib = _library(tmp_path, "registration", "void undefined_registrar(const char*);\n"
                   "inline void do_register(const char* n) { undefined_registrar(n); }\n"
                   "struct Registration { Registration(const char* n) { do_register(n); } };\n"
                   "static Registration registration(\"ns\");\n", True, "-O0")
    prediction, oracle = _preloaded(linker, loader, lib)
    assert oracle.returncode == 127
    assert prediction.exit_message.endswith(f"{lib}: undefined symbol: _Z19undefined_registrarPKc")
    (startup,) = [o for o in prediction.outcomes if o.kind == "startup"]
    assert startup.constructors[0].calls[0].constructor == "_GLOBAL__sub_I_registration.cpp"


def test_a_function_defined_nowhere_that_only_a_later_call_reaches_lets_the_process_start(linker, loader,
                                                                                            tmp_path):
    lib = _library(tmp_path, "later", MISSING + "int later(void) { return missing_fn(); }\n"
                   "__attribute__((constructor)) static void run(void) { }\n")
    prediction, oracle = _preloaded(linker, loader, lib)
    assert oracle.returncode == 0 and prediction.exit_message is None
    (startup,) = [o for o in prediction.outcomes if o.kind == "startup"]
    assert [b.symbol for b in startup.lazy_failures] == [b"missing_fn"]
    assert startup.constructors[0].calls == () and startup.constructors[0].undecided == ""


def test_a_constructor_calling_through_a_function_pointer_leaves_it_undecided(linker, loader, tmp_path):
    """The real process dies (the pointer's function calls it); the model cannot follow the pointer and says so:
    the function stays a first-call failure, with the reason the constructor's calls are not known."""
    lib = _library(tmp_path, "pointer", MISSING + "static void helper(void) { missing_fn(); }\n"
                   "void (*volatile pointer)(void) = helper;\n"
                   "__attribute__((constructor)) static void run(void) { pointer(); }\n")
    prediction, oracle = _preloaded(linker, loader, lib)
    assert oracle.returncode == 127 and prediction.exit_message is None
    (startup,) = [o for o in prediction.outcomes if o.kind == "startup"]
    assert "indirect call" in startup.constructors[0].undecided


def test_the_decoders_calls_from_a_static_initializer_are_those_objdump_shows(tmp_path):
    """elf.reach against binutils: the PLT calls of the static initializer, in program order."""
    import re

    from customops.elf.constructors import read_code
    from customops.elf.parse import open_mapped
    from customops.elf.reach import reach

    lib = _library(tmp_path, "calls", "#include <string>\nvoid undefined_registrar(const std::string&);\n"
                   "struct R { R(const char* n) { undefined_registrar(n); } };\n"
                   "static R first(\"a\"), second(\"b\");\n",
                   True, "-O2")
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True,
                          check=True).stdout
    body = dump.split("<_GLOBAL__sub_I_calls.cpp>:\n", 1)[1].split("\n\n", 1)[0]
    expected = list(dict.fromkeys(re.findall(r"(?:call|jmp)\s+[0-9a-f]+ <([^>@]+)@plt>", body)))
    data, _ = open_mapped(lib)
    found = reach(read_code(lib, data), lambda symbol: None)
    called = [c.symbol.decode() for c in found.calls if c.chain[:1] == ("_GLOBAL__sub_I_calls.cpp",)]
    assert called == expected == ["_ZN1RC1EPKc"]  # R::R, inline: the library's own, called through its PLT


def test_the_traversal_is_bounded_and_says_so(tmp_path):
    from customops.elf.constructors import read_code
    from customops.elf.parse import open_mapped
    from customops.elf.reach import reach

    lib = _library(tmp_path, "bounded", MISSING + "__attribute__((constructor)) static void run(void) "
                   "{ missing_fn(); }\n")
    data, _ = open_mapped(lib)
    found = reach(read_code(lib, data), lambda symbol: None, budget=3)
    assert "bound" in found.undecided
