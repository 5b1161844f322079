"""Part of `loading`: what the linker model found of the constructors that call a function defined nowhere
(linker.constructors), in words. A constructor's call is the function's first: the server dies at start
(CO304, through loading's emitter); a function no constructor is known to call stays a first-call warning
(CO305), saying so where the constructors' code could not be followed."""

from __future__ import annotations

from customops.elf.demangle import demangle
from customops.inspect.registrations import Registration
from customops.linker.types import Binding, ConstructorCall, StepOutcome
from customops.rules.context import RuleContext
from customops.rules.framework_drift import framework_of, rebuild_against
from customops.triton.plan import LoadStep

STATIC_INITIALIZER = "_GLOBAL__sub_I_"  # GCC and Clang's name of a translation unit's static initializer


def first_call(outcome: StepOutcome) -> ConstructorCall | None:
    """The call of a function defined nowhere that kills the process first: ld.so runs the constructors in
    the order of outcome.constructors, each one's calls first reached first."""
    return next((reach.calls[0] for reach in outcome.constructors if reach.calls), None)


def constructor(call: ConstructorCall) -> str:
    """ "the static initializer _GLOBAL__sub_I_ops.cpp", or "the constructor run"."""
    name = call.chain[0] if call.chain else call.constructor
    return f"the {'static initializer' if name.startswith(STATIC_INITIALIZER) else 'constructor'} {_demangled(name)}"


def path(call: ConstructorCall) -> str:
    """ "the static initializer _GLOBAL__sub_I_ops.cpp (DT_INIT_ARRAY[1]) calls Registration::Registration(char
    const*), which calls torch::Library::Library(...)": each function on the way."""
    called = [*(_demangled(n) for n in call.chain[1:]), demangle(call.binding.symbol)]
    return f"{constructor(call)} ({call.where}) calls {', which calls '.join(called)}"


def why(call: ConstructorCall, shown: str) -> str:
    return (f"ld.so runs the library's constructors ({call.where} here) before the server's main: their call of "
            f"{shown} is its first, and the lookup that fails kills the process (exit 127)")


def built_against(rules: RuleContext, step: LoadStep | None,
                  symbol: Binding) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """(how the message ends, the hint, evidence naming the registrations) for a constructor's call of `symbol`:
    where a framework library of the container owns the function's namespace, the library was built against
    another version of it (CO504's facts), and the fix names the version to build against."""
    found = framework_of(symbol, symbol.referrer, rules.triton, rules.reader, rules.files.backends)
    where = (f"which the container's {found[0]} does not define: {symbol.referrer} was built against another "
             f"version of it" if found else "which is defined nowhere")
    hint = {"hint": rebuild_against(step, *found, rules.triton)} if found and step is not None else {}
    blocks = registering(rules.files.registrations.get(step.host_path, ())) if step else ""
    return where, hint, (f"its static initializers register {blocks}",) if blocks else ()


def registering(found: tuple[Registration, ...]) -> str:
    """What a library's static initializers register, as its source wrote it: "TORCH_LIBRARY_FRAGMENT(torchtext)"
    ("" when nothing is known): the registration a constructor's failing call belongs to."""
    suffix = {"namespace": "", "fragment": "_FRAGMENT", "impl": "_IMPL"}
    blocks = [f"{'STABLE_' if r.api == 'stable' else ''}TORCH_LIBRARY{suffix[r.kind]}({r.name})" for r in found
              if r.kind in suffix and r.name]
    return ", ".join(dict.fromkeys(blocks))


def undecided(outcome: StepOutcome, referrer: str) -> str:
    """Why the constructors of `referrer` may call more than the model followed ("" when it followed all)."""
    reason = next((r.undecided for r in outcome.constructors if r.library == referrer), "")
    return (f"whether a constructor of {referrer} calls it at load (which would stop the server at start) "
            f"cannot be decided: {reason}") if reason else ""


def not_first(outcome: StepOutcome, call: ConstructorCall) -> tuple[Binding, ...]:
    """The referrer's other functions defined nowhere: first-call failures, once the first one is fixed."""
    return tuple(b for b in outcome.lazy_failures if b.referrer == call.binding.referrer and b is not call.binding)


def _demangled(name: str) -> str:
    return demangle(name.encode())
