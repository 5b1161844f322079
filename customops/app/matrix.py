"""`check --triton-release A,B,C` (or `A..B`, `latest`): the upgrade question, every model against every target in
one run. Each target is one check of the same request against that release's cited facts
(customops.triton.releases); the ELF facts of each library are read once for all of them (the reader's cache).
What the matrix says is derived from those runs: each model's failing codes per target, each distinct finding with
the targets it occurs in, and the newest target where everything loads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from customops.app.checking import CheckRun, check_repositories
from customops.app.request import CheckRequest
from customops.findings import Finding
from customops.memo import read_once


@dataclass(frozen=True)
class Matrix:
    targets: tuple[str, ...]  # oldest first
    runs: tuple[CheckRun, ...]  # one per target, in that order
    _cells: dict[int, tuple[dict, dict]] = field(default_factory=dict, compare=False, repr=False)

    def models(self) -> list[str | None]:
        """Every model (one a finding names that no repository has: --load-model's), then None for the server
        itself where a finding or an undecided library is of no one model (a preload: the server does not start,
        or starts without it, for every model)."""
        names: list[str | None] = [*sorted({m.name for run in self.runs for m in run.result.models} |
                                           {f.model for run in self.runs for f in run.result.findings if f.model})]
        process_wide = any(f.model is None for run in self.runs for f in run.result.findings) or \
            any(u.model is None for run in self.runs for u in run.result.undecided)
        return [*names, None] if process_wide else names

    def failing(self, model: str | None, index: int) -> tuple[str, ...]:
        """The codes that fail `model` (None: the server) against the target at `index` (findings at or above
        --fail-on)."""
        return self._by_model(index)[0].get(model, ())

    def undecided(self, model: str | None, index: int) -> tuple[str, ...]:
        """What the target's facts cannot decide of `model`'s libraries ("libcudart.so.12: CUDA")."""
        return self._by_model(index)[1].get(model, ())

    def _by_model(self, index: int) -> tuple[dict[str | None, tuple[str, ...]], dict[str | None, tuple[str, ...]]]:
        """The target's failing codes and undecided needs, by model: read once per target."""
        if index not in self._cells:
            run = self.runs[index]
            failing: dict[str | None, set[str]] = {}
            for f in run.result.findings:
                if f.level >= run.fail_on:
                    failing.setdefault(f.model, set()).add(str(f.code))
            undecided: dict[str | None, set[str]] = {}
            for u in run.result.undecided:
                undecided.setdefault(u.model, set()).add(f"{u.needed}: {u.unknown}")
            self._cells[index] = ({m: tuple(sorted(c)) for m, c in failing.items()},
                                  {m: tuple(sorted(n)) for m, n in undecided.items()})
        return self._cells[index]

    def decided(self, index: int) -> bool:
        """Whether the target's facts decide every model: no library needs what they do not say."""
        return not self.runs[index].result.undecided

    def findings(self) -> list[tuple[Finding, tuple[str, ...]]]:
        """Each distinct finding once, with the targets it occurs in (in the order they first occur)."""
        found: dict[tuple, tuple[Finding, list[str]]] = {}
        for target, run in zip(self.targets, self.runs, strict=True):
            for f in run.result.findings:
                key = (f.code, f.model, f.library, f.symbol, f.version, f.message)
                found.setdefault(key, (f, []))[1].append(target)
        return [(f, tuple(dict.fromkeys(targets))) for f, targets in found.values()]  # a finding twice: once

    def differing(self) -> list[tuple[Finding, tuple[str, ...]]]:
        """The findings some targets have and others do not: what an upgrade changes."""
        return [(f, t) for f, t in self.findings() if len(t) != len(self.targets)]

    def passes(self, index: int) -> bool:
        """Whether the target passes: no finding at or above --fail-on, and nothing its facts cannot decide."""
        return self.runs[index].exit_code == 0 and self.decided(index)

    def exit_code(self, target: str | None = None) -> int:
        """The worst target's (or `target`'s) exit status: 1 where it does not pass, an undecided one included (a
        gate passes only what the facts show)."""
        chosen = [self.targets.index(target)] if target is not None else range(len(self.targets))
        return 0 if all(self.passes(i) for i in chosen) else 1

    def newest_passing(self) -> str | None:
        """The newest target where every model loads: no finding at or above --fail-on, and nothing its facts
        cannot decide (a target whose CUDA no source states does not pass a library that needs libcudart)."""
        return next((self.targets[i] for i in reversed(range(len(self.targets))) if self.passes(i)), None)


def release_targets(request: CheckRequest) -> tuple[str, ...]:
    """The releases `--triton-release` names (none without it); CustomopsError for one the table cannot check."""
    from customops.triton.releases import targets

    return targets(request.container.release) if request.container.release else ()


def with_release(request: CheckRequest, target: str) -> CheckRequest:
    return replace(request, container=replace(request.container, release=target))


def run_matrix(request: CheckRequest, targets: tuple[str, ...]) -> Matrix:
    """One check per target, each against that release's facts."""
    with read_once():  # the same files for every release
        runs = tuple(check_repositories(with_release(request, target)) for target in targets)
    return Matrix(targets, runs)
