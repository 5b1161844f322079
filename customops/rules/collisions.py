"""CO401-CO405 and CO407: definitions that compete, ranked rather than dumped (symbol lookup in glibc's
elf/dl-lookup.c: the first definition in scope order wins; STB_GNU_UNIQUE is merged process-wide).

Vague-linkage duplicates (weak, same size) are the norm in C++ and are not reported. What is reported:
strong definitions a preload imposes on other libraries (CO401), strong duplicates between the custom
libraries of one scope (CO402), data objects whose sizes differ (CO403), an op library's copies of its
framework's symbols (CO404, info), GNU_UNIQUE merging (CO405), and one SONAME for two files (CO407).
Preloaded protobuf descriptor tables that make a library register a file twice are CO406, from
customops.rules.descriptors.
"""

from __future__ import annotations

from collections import defaultdict

from customops.elf.constants import SymbolBind, SymbolType
from customops.elf.demangle import demangle
from customops.errors import ElfError
from customops.findings import Finding, Related
from customops.linker.types import BindingReason
from customops.rules import descriptors
from customops.rules.context import RuleContext

CODES = frozenset({"CO401", "CO402", "CO403", "CO404", "CO405", "CO407"})
NEEDS_PREDICTION = True
SHOWN = 10


def check(ctx: RuleContext) -> list[Finding]:
    prediction = ctx.prediction
    assert prediction is not None
    custom = {s.path: s for s in ctx.custom_steps}
    preloaded = {s.path for s in ctx.plan.preloads}
    target = ctx.triton.container.target
    system = tuple(d.rstrip("/") + "/" for d in target.system_dirs) if target else ()
    pairs: dict[tuple[str, str, str], list[bytes]] = defaultdict(list)
    findings: list[Finding] = []
    sizes_reported: set[tuple[bytes, str, str]] = set()
    for binding in prediction.interpositions(involving=set(custom) | preloaded):
        winner = binding.winner
        assert winner is not None
        symbol = binding.symbol
        for loser in binding.losers:
            if loser.object == winner.object:
                continue
            strong = winner.binding is SymbolBind.GLOBAL and loser.binding is SymbolBind.GLOBAL
            if winner.type is SymbolType.OBJECT and loser.type is SymbolType.OBJECT and winner.size != loser.size and (
                    winner.object in custom or loser.object in custom) and \
                    (symbol, winner.object, loser.object) not in sizes_reported:
                sizes_reported.add((symbol, winner.object, loser.object))
                name = demangle(symbol)
                findings.append(Finding(
                    "CO403", f"{name}: {winner.object} defines it with size {winner.size}, {loser.object} with "
                             f"size {loser.size}; the first wins for both", library=winner.object, symbol=name,
                    model=_model(custom, winner.object, loser.object), related=(Related(loser.object),),
                    evidence=(f"winner: {winner.object} ({winner.binding} {winner.type} size {winner.size})",
                              f"loser: {loser.object} ({loser.binding} {loser.type} size {loser.size})")))
            if binding.reason is BindingReason.GNU_UNIQUE and (winner.object in custom or loser.object in custom):
                pairs[("CO405", winner.object, loser.object)].append(symbol)
            elif strong and winner.object in custom and loser.object in custom:
                pairs[("CO402", winner.object, loser.object)].append(symbol)
            elif strong and winner.object in preloaded and not loser.object.startswith(system):
                pairs[("CO401", winner.object, loser.object)].append(symbol)
            elif strong and (winner.object in custom) != (loser.object in custom):
                op_library = winner.object if winner.object in custom else loser.object
                framework = loser.object if op_library == winner.object else winner.object
                if not framework.startswith(system):
                    pairs[("CO404", op_library, framework)].append(symbol)
    for (code, first, second), symbols in sorted(pairs.items()):
        findings.append(_pair(code, first, second, sorted({demangle(s) for s in symbols}), custom))
    return findings + _same_soname(ctx, custom) + descriptors.check(ctx)


def _pair(code: str, first: str, second: str, names: list[str], custom: dict) -> Finding:
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    step = custom.get(first) or custom.get(second)
    model = _model(custom, first, second)
    messages = {
        "CO401": f"preloaded {first} overrides {len(names)} strong definition(s) of {second} for the whole process: "
                 f"{shown}",
        "CO402": f"{first} and {second} both define {len(names)} strong symbol(s); {first} wins for both: {shown}",
        "CO404": f"{first} re-defines {len(names)} symbol(s) of {second}; which copy runs depends on scope order",
        "CO405": f"GNU_UNIQUE symbols of {first} and {second} are merged across RTLD_LOCAL: {shown}",
    }
    return Finding(code, messages[code], model=model, library=first, file=step.host_path if step else None,
                   symbol=names[0], related=(Related(second),), evidence=(f"winner: {first}", f"loser: {second}",
                                              *(f"symbol: {n}" for n in names[:SHOWN])))


def _same_soname(ctx: RuleContext, custom: dict) -> list[Finding]:
    """ld.so tells files apart by device and inode, not by path (the file identities of FileFacts)."""
    assert ctx.prediction is not None
    identity = ctx.files.identities.get
    by_soname: dict[str, dict[tuple[int, int] | None, str]] = defaultdict(dict)
    for obj in ctx.prediction.objects:
        if obj.soname:
            by_soname[obj.soname][identity(obj.path)] = obj.name
    findings = []
    for path, step in custom.items():
        soname = _soname_of(step.host_path, ctx)
        files = by_soname.get(soname or "", {})
        others = {name for key, name in files.items() if key != identity(step.host_path)}
        if soname and others:
            findings.append(Finding(
                "CO407", f"{path} has SONAME {soname}, as a different loaded file does; every DT_NEEDED entry "
                         f"naming {soname} binds to whichever was loaded first", model=step.model, library=path,
                file=step.host_path, evidence=tuple(f"also loaded with this SONAME: {p}" for p in sorted(others)),
                related=tuple(Related(p) for p in sorted(others))))
    return findings


def _model(custom: dict, *libraries: str) -> str | None:
    """The model of the first of `libraries` that is a custom library loaded for one."""
    return next((custom[p].model for p in libraries if p in custom and custom[p].model), None)


def _soname_of(path: str, ctx: RuleContext) -> str | None:
    try:
        return ctx.reader.read(path).soname
    except ElfError:
        return None
