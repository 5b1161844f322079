"""A finding is data: a stable code, a severity, one greppable line, what it is about, the evidence, and a fix.
Only its code's emitter makes one (customops.emitters); `amended` copies one with fields changed."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from customops.codes import CODES, Code, Severity
from customops.emitters import check_maker, making
from customops.textenum import TextEnum


class SuppressedBy(TextEnum):
    """What kind of text suppressed a finding."""

    MANIFEST = "manifest"  # a [check] ignore entry of the manifest
    CONFIG = "config"  # a `# customops: ignore[...]` comment in a config.pbtxt


@dataclass(frozen=True)
class Suppression:
    """What suppressed a finding, where it is, and its reason."""

    suppressed_by: SuppressedBy
    file: str | None
    line: int | None
    reason: str | None = None


@dataclass(frozen=True)
class Related:
    """Another library a finding is about (the other one of a collision) and, once located
    (customops.app.text_locations), the line of the text that makes Triton load it."""

    library: str  # as the server opens it (a container path)
    file: str | None = None
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Finding:
    code: Code
    message: str
    severity: Severity | None = None  # None: the code's default severity
    model: str | None = None
    library: str | None = None  # the library as the server opens it (a container path)
    symbol: str | None = None
    version: str | None = None
    file: str | None = None  # the file to point at (checkout path): a config.pbtxt, a library, the manifest
    line: int | None = None
    column: int | None = None
    predicted: str | None = None  # the runtime's own message for the failure this predicts
    evidence: tuple[str, ...] = field(default=())  # search trace, winning/losing definitions, ...
    hint: str = ""
    suppression: Suppression | None = None  # set on a suppressed finding (customops.app.suppressions)
    assumes: str | None = None  # found only by modelling a fix of what stops the server (customops.app.as_if_fixed)
    artifact: str | None = None  # the library file it is about, when `file` is the text naming it (text_locations)
    related: tuple[Related, ...] = ()  # the other libraries of a collision, each where the text naming it is

    @property
    def stated(self) -> str:
        """The message, with the assumption it was found under: for reports that have one text per finding."""
        return self.message + (f" (found assuming {self.assumes})" if self.assumes else "")

    def __post_init__(self) -> None:
        if not isinstance(self.code, Code):
            raise TypeError(f"a finding's code is a Code, not {self.code!r}")
        check_maker(self.code)
        if self.severity is None:
            object.__setattr__(self, "severity", CODES[self.code].severity)
        if not self.hint:
            object.__setattr__(self, "hint", CODES[self.code].fix)

    @property
    def level(self) -> Severity:
        assert self.severity is not None
        return self.severity


def amended(finding: Finding, **changes: Any) -> Finding:
    """The finding with `changes` (its place, a suppression, an assumption, more evidence): still a finding of
    its code, as its emitter made it."""
    with making(finding.code):
        return replace(finding, **changes)


def suppressed(finding: Finding, ignores) -> bool:
    """An ignore entry of the manifest matches on its code and, where given, on library and symbol globs
    (the rest of suppressing: customops.app.suppressions)."""
    for rule in ignores:
        if rule.code != finding.code:
            continue
        if rule.library and not any(fnmatch.fnmatch(p or "", rule.library) for p in (finding.file, finding.library)):
            continue
        if rule.symbol and not fnmatch.fnmatchcase(finding.symbol or "", rule.symbol):
            continue
        return True
    return False


def sort_key(finding: Finding) -> tuple:
    """Worst first, then by model, library and code, so reports are stable."""
    return (-int(finding.level), finding.model or "", finding.library or "", finding.code, finding.message)


class _Model(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...


M = TypeVar("M", bound=_Model)


def model_of(finding: Finding, models: Sequence[M]) -> M | None:
    """The model a finding is about: the one whose directory holds its file or its library file (two
    repositories may each have a model of its name), else the only model of its name."""
    for path in (finding.file, finding.artifact):
        if path:
            held = [m for m in models if os.path.abspath(path).startswith(os.path.abspath(m.path).rstrip("/") + "/")]
            if held:
                return max(held, key=lambda m: len(m.path))
    named = [m for m in models if m.name == finding.model]
    return named[0] if len(named) == 1 else None
