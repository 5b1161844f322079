"""`check --triton-release A,B,C` (or `A..B`, `latest`), with `--profile`, `--image` and `--container-root` as
columns beside them: the upgrade question, every model against every target in one run. A release is checked
against its cited facts (customops.triton.releases); a profile, an image or a root is checked in full, and stands
for its own release (its server's version), whose facts column it replaces. What is read of the files is read once
for all of them (customops.memo). What the matrix says is derived from those runs: each model's failing codes per
target, each distinct finding with the targets it occurs in, and the newest target where everything loads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from customops.app.checking import CheckRun, check_repositories
from customops.app.request import CheckRequest
from customops.app.target import ContainerChoice
from customops.findings import Finding
from customops.memo import read_once
from customops.textenum import TextEnum


class Source(TextEnum):
    """What a column is checked against."""

    FACTS = "facts"  # a release's cited facts (--triton-release)
    PROFILE = "profile"
    IMAGE = "image"
    ROOT = "root"  # --container-root


@dataclass(frozen=True)
class Column:
    """One target of the matrix: its heading, what it checks against, and the Triton release it is (a profile's,
    an image's or a root's from its server version, once read; None where that names no release)."""

    name: str
    choice: ContainerChoice
    source: Source
    release: str | None = None


@dataclass(frozen=True)
class Matrix:
    targets: tuple[str, ...]  # the columns' names, oldest release first
    runs: tuple[CheckRun, ...]  # one per target, in that order
    columns: tuple[Column, ...] = ()  # one per target, in that order
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
        chosen = [self.index(target)] if target is not None else range(len(self.targets))
        return 0 if all(self.passes(i) for i in chosen) else 1

    def index(self, target: str) -> int:
        """The column a name picks: its own name, or the release a profile's or image's column is (ValueError)."""
        if target in self.targets:
            return self.targets.index(target)
        found = next((i for i, c in enumerate(self.columns) if c.release == target), None)
        if found is None:
            raise ValueError(f"not a target of the matrix: {target}")
        return found

    @property
    def facts_only(self) -> bool:
        """Whether every column is a release's facts (no profile, image or root)."""
        return all(c.source is Source.FACTS for c in self.columns)

    def newest_passing(self) -> str | None:
        """The newest target where every model loads: no finding at or above --fail-on, and nothing its facts
        cannot decide (a target whose CUDA no source states does not pass a library that needs libcudart)."""
        return next((self.targets[i] for i in reversed(range(len(self.targets))) if self.passes(i)), None)


def columns_of(request: CheckRequest, choices: tuple[ContainerChoice, ...]) -> tuple[Column, ...]:
    """The matrix's columns: each container named (`choices`; none but the request's own when only
    --triton-release is given), a release list expanded into a column per release. CustomopsError for a release
    the table cannot check. A single column is no matrix: the caller checks it as one check."""
    from customops.triton.releases import targets

    columns: list[Column] = []
    for choice in choices or (request.container,):
        if choice.release:
            columns += [Column(r, replace(choice, release=r), Source.FACTS, r) for r in targets(choice.release)]
        elif choice.profile or choice.image or choice.root:
            source, name = ((Source.PROFILE, choice.profile) if choice.profile else
                            (Source.IMAGE, choice.image) if choice.image else (Source.ROOT, choice.root))
            columns.append(Column(str(name), choice, source))
    return tuple(columns)


def run_matrix(request: CheckRequest, columns: tuple[Column, ...]) -> Matrix:
    """One check per column. The profiles, images and roots are checked first: each stands for the release its
    server is, and a facts column of the same release is left out (its files say more). Then the columns are ordered
    by release, oldest first; those that name none come last, in the order given."""
    from customops.triton.releases import months, release_of_server

    with read_once():  # the same files for every column
        full = []
        for column in (c for c in columns if c.source is not Source.FACTS):
            run = check_repositories(replace(request, container=column.choice))
            full.append((replace(column, release=release_of_server(run.result.container.facts.triton_version)),
                         run))
        covered = {c.release for c, _ in full}
        facts = [(c, check_repositories(replace(request, container=c.choice))) for c in columns
                 if c.source is Source.FACTS and c.release not in covered]
    given = {c: i for i, c in enumerate(columns)}
    ordered = sorted([*full, *facts], key=lambda cr: (cr[0].release is None, months(cr[0].release or "00.01"),
                                                        given[_unreleased(cr[0])]))
    return Matrix(tuple(c.name for c, _ in ordered), tuple(r for _, r in ordered), tuple(c for c, _ in ordered))


def _unreleased(column: Column) -> Column:
    """The column as given (a full column's release is learnt from its check)."""
    return column if column.source is Source.FACTS else replace(column, release=None)
