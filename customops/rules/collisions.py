"""CO401-CO405 and CO407: definitions that compete, ranked rather than dumped (symbol lookup in glibc's
elf/dl-lookup.c: the first definition in scope order wins; STB_GNU_UNIQUE is merged process-wide).

Vague-linkage duplicates (weak, same size) are the norm in C++ and are not reported. What is reported:
strong definitions a preload imposes on other libraries (CO401), strong duplicates between the custom
libraries of one scope (CO402), data objects whose sizes differ (CO403), an op library's copies of its
framework's symbols (CO404, info), GNU_UNIQUE merging (CO405), and one SONAME for two files (CO407).
Preloaded protobuf descriptor tables that make a library register a file twice are CO406, from
customops.rules.descriptors, and two libraries registering one file into one protobuf runtime are CO406, from
customops.rules.descriptor_pools. The competing definitions are grouped by the two libraries (`Rivals`); each group
counts toward the first of CO405, CO402, CO401 and CO404 whose test (PAIRINGS) gives it a pair of libraries,
and that code's emitter makes the finding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from customops.codes import Code
from customops.elf.constants import SymbolBind, SymbolType
from customops.elf.demangle import demangle
from customops.emitters import emits
from customops.errors import ElfError
from customops.findings import Finding, Related
from customops.linker.types import BindingReason, Definition
from customops.rules import descriptor_pools, descriptors
from customops.rules.context import RuleContext
from customops.triton.plan import LoadStep

NEEDS_PREDICTION = True
SHOWN = 10


@dataclass(frozen=True)
class Scope:
    """Whose definitions compete: the custom libraries (by container path), the preloads, the system's
    directories (each ending in /)."""

    custom: dict[str, LoadStep]
    preloaded: set[str]
    system: tuple[str, ...]

    def model(self, *libraries: str) -> str | None:
        """The model of the first of `libraries` that is a custom library loaded for one."""
        return next((self.custom[p].model for p in libraries if p in self.custom and self.custom[p].model), None)


class Rivals(NamedTuple):
    """Two libraries whose definitions compete: the one that wins, the one that loses, whether both
    definitions are strong (STB_GLOBAL) and whether they are merged process-wide (STB_GNU_UNIQUE)."""

    winner: str
    loser: str
    strong: bool
    unique: bool


def check(ctx: RuleContext) -> list[Finding]:
    prediction = ctx.prediction
    assert prediction is not None
    target = ctx.triton.container.target
    scope = Scope({s.path: s for s in ctx.custom_steps}, {s.path for s in ctx.plan.preloads},
                  tuple(d.rstrip("/") + "/" for d in target.system_dirs) if target else ())
    rivals: dict[tuple[str, str, bool, bool], list[bytes]] = defaultdict(list)  # Rivals -> the symbols
    sized: list[tuple[bytes, Definition, Definition]] = []  # data objects: their sizes may differ
    for binding in prediction.interpositions(involving=set(scope.custom) | scope.preloaded):
        winner, unique = binding.winner, binding.reason is BindingReason.GNU_UNIQUE
        assert winner is not None
        for loser in binding.losers:
            if loser.object != winner.object:
                strong = winner.binding is SymbolBind.GLOBAL and loser.binding is SymbolBind.GLOBAL
                rivals[(winner.object, loser.object, strong, unique)].append(binding.symbol)
                if winner.type is SymbolType.OBJECT and loser.type is SymbolType.OBJECT:
                    sized.append((binding.symbol, winner, loser))
    pairs: dict[tuple[Code, str, str], list[bytes]] = defaultdict(list)
    for key, symbols in rivals.items():
        paired = next(((code, pair) for code, pairing in PAIRINGS if (pair := pairing(Rivals(*key), scope))), None)
        if paired is not None:
            pairs[(paired[0], *paired[1])] += symbols
    findings = sizes_differ(sized, scope)
    for (code, first, second), names in sorted(pairs.items()):
        findings.append(PAIRED[code](first, second, sorted({demangle(s) for s in names}), scope))
    return findings + same_soname(ctx, scope) + descriptors.check(ctx) + descriptor_pools.check(ctx)


@emits(Code.CO403)
def sizes_differ(sized: list[tuple[bytes, Definition, Definition]], scope: Scope) -> list[Finding]:
    """Data objects of a custom library whose competing definitions have different sizes."""
    findings, reported = [], set()
    for symbol, winner, loser in sized:
        if winner.size != loser.size and (winner.object in scope.custom or loser.object in scope.custom) and \
                (symbol, winner.object, loser.object) not in reported:
            reported.add((symbol, winner.object, loser.object))
            name = demangle(symbol)
            findings.append(Finding(
                Code.CO403, f"{name}: {winner.object} defines it with size {winner.size}, {loser.object} with size "
                            f"{loser.size}; the first wins for both", library=winner.object, symbol=name,
                model=scope.model(winner.object, loser.object), related=(Related(loser.object),),
                evidence=(f"winner: {winner.object} ({winner.binding} {winner.type} size {winner.size})",
                          f"loser: {loser.object} ({loser.binding} {loser.type} size {loser.size})")))
    return findings


# Which pair of libraries competing definitions count against, for each of the codes that report pairs: the
# first code of PAIRINGS whose test gives a pair (the winner, or the op library, first) takes the definitions.
Pairing = Callable[[Rivals, Scope], tuple[str, str] | None]


def _merged(r: Rivals, scope: Scope) -> tuple[str, str] | None:
    custom = r.winner in scope.custom or r.loser in scope.custom
    return (r.winner, r.loser) if r.unique and custom else None


def _between_custom(r: Rivals, scope: Scope) -> tuple[str, str] | None:
    return (r.winner, r.loser) if r.strong and r.winner in scope.custom and r.loser in scope.custom else None


def _over_others(r: Rivals, scope: Scope) -> tuple[str, str] | None:
    imposed = r.winner in scope.preloaded and not r.loser.startswith(scope.system)
    return (r.winner, r.loser) if r.strong and imposed else None


def _of_framework(r: Rivals, scope: Scope) -> tuple[str, str] | None:
    if not r.strong or (r.winner in scope.custom) == (r.loser in scope.custom):
        return None
    op_library, framework = (r.winner, r.loser) if r.winner in scope.custom else (r.loser, r.winner)
    return None if framework.startswith(scope.system) else (op_library, framework)


PAIRINGS: tuple[tuple[Code, Pairing], ...] = (
    (Code.CO405, _merged), (Code.CO402, _between_custom), (Code.CO401, _over_others), (Code.CO404, _of_framework))


def _pair(code: Code, message: str, first: str, second: str, names: list[str], scope: Scope) -> Finding:
    step = scope.custom.get(first) or scope.custom.get(second)
    return Finding(code, message, model=scope.model(first, second), library=first,
                   file=step.host_path if step else None, symbol=names[0], related=(Related(second),),
                   evidence=(f"winner: {first}", f"loser: {second}", *(f"symbol: {n}" for n in names[:SHOWN])))


def _shown(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


@emits(Code.CO401)
def preload_overrides(first: str, second: str, names: list[str], scope: Scope) -> Finding:
    """A preload's strong definitions that win over those of a library outside the system directories."""
    return _pair(Code.CO401, f"preloaded {first} overrides {len(names)} strong definition(s) of {second} for the "
                             f"whole process: {_shown(names)}", first, second, names, scope)


@emits(Code.CO402)
def strong_duplicates(first: str, second: str, names: list[str], scope: Scope) -> Finding:
    """Strong definitions two custom libraries of one scope share: the first in scope order wins."""
    return _pair(Code.CO402, f"{first} and {second} both define {len(names)} strong symbol(s); {first} wins for both: "
                             f"{_shown(names)}", first, second, names, scope)


@emits(Code.CO404)
def framework_copies(first: str, second: str, names: list[str], scope: Scope) -> Finding:
    """An op library's copies of strong definitions of a (non-system) library it is loaded with."""
    return _pair(Code.CO404, f"{first} re-defines {len(names)} symbol(s) of {second}; which copy runs depends on "
                             "scope order", first, second, names, scope)


@emits(Code.CO405)
def unique_merged(first: str, second: str, names: list[str], scope: Scope) -> Finding:
    """STB_GNU_UNIQUE definitions of a custom library merged with another library's across RTLD_LOCAL."""
    return _pair(Code.CO405, f"GNU_UNIQUE symbols of {first} and {second} are merged across RTLD_LOCAL: "
                             f"{_shown(names)}", first, second, names, scope)


PAIRED = {Code.CO401: preload_overrides, Code.CO402: strong_duplicates, Code.CO404: framework_copies,
          Code.CO405: unique_merged}


@emits(Code.CO407)
def same_soname(ctx: RuleContext, scope: Scope) -> list[Finding]:
    """Two different loaded files with one SONAME: ld.so tells files apart by device and inode, not by path
    (the file identities of FileFacts), and binds a DT_NEEDED name to the first loaded."""
    assert ctx.prediction is not None
    identity = ctx.files.identities.get
    by_soname: dict[str, dict[tuple[int, int] | None, str]] = defaultdict(dict)
    for obj in ctx.prediction.objects:
        if obj.soname:
            by_soname[obj.soname][identity(obj.path)] = obj.name
    findings = []
    for path, step in scope.custom.items():
        soname = _soname_of(step.host_path, ctx)
        files = by_soname.get(soname or "", {})
        others = {name for key, name in files.items() if key != identity(step.host_path)}
        if soname and others:
            findings.append(Finding(
                Code.CO407, f"{path} has SONAME {soname}, as a different loaded file does; every DT_NEEDED entry "
                            f"naming {soname} binds to whichever was loaded first", model=step.model, library=path,
                file=step.host_path, evidence=tuple(f"also loaded with this SONAME: {p}" for p in sorted(others)),
                related=tuple(Related(p) for p in sorted(others))))
    return findings


def _soname_of(path: str, ctx: RuleContext) -> str | None:
    try:
        return ctx.reader.read(path).soname
    except ElfError:
        return None
