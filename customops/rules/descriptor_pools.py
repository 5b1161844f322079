"""CO406 for protobuf: two libraries of the process register one .proto file into one protobuf runtime's
generated pool. The server aborts as the second registers it.

Each library's generated code registers its files from static initialisers through the registration
function its `.dynsym` names (customops.inspect.protobuf_registrations); the runtime that receives them is the
object that function binds to in the modelled process, followed through the runtime's own calls to the last
stage (the linker model's bindings: RTLD_LOCAL does not separate two backends that need one libprotobuf.so,
which ld.so loads once). A file's table is registered once however many references reach it: a library whose
reference to its own `descriptor_table_<file>` binds to another object's table (one loaded RTLD_GLOBAL or
preloaded before it) registers that table, already registered, and nothing happens. Two different tables of
one file in one pool abort: `File already exists in database: <file>`, then the runtime's CHECK on adding it
(read from the runtime's own text, GOOGLE_CHECK's or ABSL_CHECK's; protobuf's classic line where the runtime
does not hold it). The same file in two pools (each library with its own runtime, two different libprotobuf
files) loads. Which duplicate the second library meets first depends on the order of its initialisers; the
prediction names the first by name.

A preload's tables that stand in for another library's and import private copies are
customops.rules.descriptors; a library whose runtime is hidden is not read (nobody else reaches its pool).
"""

from __future__ import annotations

from collections import defaultdict

from customops.findings import Finding, Related
from customops.inspect.protobuf_descriptors import table_symbol
from customops.inspect.protobuf_registrations import STAGES, Registrar
from customops.linker.prediction import Prediction
from customops.linker.types import LoadedObject
from customops.rules.context import RuleContext
from customops.rules.registrations import duplicate_registration
from customops.triton.plan import LoadStep

SHOWN = 10
CLASSIC_CHECK = "CHECK failed: GeneratedDatabase()->Add(encoded_file_descriptor, size):"


def check(ctx: RuleContext) -> list[Finding]:
    prediction = ctx.prediction
    if prediction is None or not ctx.files.registrars:
        return []
    # in the order their initialisers run: step by step, and within a step an object's dependencies first
    ordered = sorted(enumerate(prediction.objects), key=lambda at: (at[1].step, -at[0]))
    registrars = {o.name: (o, ctx.files.registrars[o.path]) for _i, o in ordered if o.path in ctx.files.registrars}
    first: dict[tuple[str, str], tuple[str, str]] = {}  # (runtime, file) -> (table's object, library)
    twice: dict[tuple[str, str, str], list[str]] = defaultdict(list)  # (runtime, first, second) -> files
    for name, (_obj, registrar) in registrars.items():
        runtime = _runtime(prediction, name, registrars)
        if runtime is None:
            continue
        for proto in registrar.files:
            table = _table(prediction, name, proto, registrar)
            known = first.setdefault((runtime, proto), (table, name))
            if known[0] != table:
                twice[(runtime, known[1], name)].append(proto)
    return [_finding(ctx, registrars, runtime, earlier, later, files)
            for (runtime, earlier, later), files in twice.items()]


def _runtime(prediction: Prediction, name: str, registrars: dict[str, tuple[LoadedObject, Registrar]]
             ) -> str | None:
    """The object whose generated pool a library's registrations reach: its calls followed stage by stage
    through the objects they bind to; itself where it binds none (it defines them, not interposed); None
    where a call is left undefined (the library does not load)."""
    current = name
    for stage in range(len(STAGES)):
        found = registrars.get(current)
        if found is None:
            return current
        for at, symbol in found[1].calls:
            if at != stage:
                continue
            binding = prediction.binding(current, symbol)
            if binding is None:
                continue
            if binding.winner is None:
                return None
            current = binding.winner.object
            break
    return current


def _table(prediction: Prediction, name: str, proto: str, registrar: Registrar) -> str:
    """The object whose table of `proto` the library's initialiser registers: the one its reference binds
    to, where its table is exported; its own otherwise."""
    if proto not in registrar.tables:
        return name
    binding = prediction.binding(name, table_symbol(proto))
    return binding.winner.object if binding is not None and binding.winner is not None else name


def _finding(ctx: RuleContext, registrars: dict[str, tuple[LoadedObject, Registrar]], runtime: str, earlier: str,
             later: str, files: list[str]) -> Finding:
    proto = files[0]
    held = registrars[runtime][1].check if runtime in registrars else None
    check = (held or CLASSIC_CHECK).rstrip()
    step = _step(ctx, registrars[later][0])
    library = step.path if step is not None else later
    brought = [] if library == later else [f"{later} is loaded by {library}"]
    return duplicate_registration(
        f"{earlier} and {later} both register {len(files)} .proto file(s) into one protobuf runtime, {runtime}: "
        f"the server aborts at start, as {later} registers {proto} again",
        model=step.model if step is not None else None, library=library,
        file=step.host_path if step is not None else registrars[later][0].path,
        symbol=proto, related=(Related(earlier),), predicted=f"File already exists in database: {proto}",
        evidence=(f"first: {earlier}", f"second: {later}", *brought, f"protobuf runtime: {runtime}",
                  *(f"registered twice: {p}" for p in files[:SHOWN]),
                  *([f"and {len(files) - SHOWN} more file(s) registered twice"] if len(files) > SHOWN else []),
                  f"then: {check}" + ("" if held else " (protobuf's classic text: the runtime's own was not read)"),
                  "link the generated code of each .proto file into one library that both use, or give each "
                  "library its own protobuf runtime, linked statically and hidden (-Wl,--exclude-libs,ALL)"))


def _step(ctx: RuleContext, obj: LoadedObject) -> LoadStep | None:
    """The plan step whose load brought the object in."""
    prediction = ctx.prediction
    assert prediction is not None
    if not 0 <= obj.step < len(prediction.outcomes):
        return None
    outcome = prediction.outcomes[obj.step]
    return next((step for step, paired in ctx.outcomes if paired is outcome), None)
