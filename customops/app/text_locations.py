"""Locations in text for every finding that can have one: a code-scanning alert, a workflow annotation or a
Code Quality issue lands on a line, and a same-line ignore comment applies there.

A finding about a library points at the line of the text that makes Triton load it, as the load plan's
step records it (LoadStep.written): the model config's op_library_filename entry, the manifest's entry
([pytorch] ops, [tensorflow] preload, [host] preload, [tensorrt] plugins), or for a backend library the
config's runtime, backend or platform line. The value is matched as the text wrote it (quoted, outside
comments, the n-th of equal entries), by its file name only where nothing matches exactly. The library stays
its `artifact`. The other libraries of a collision (`related`) are located the same way; a finding whose
own library no text names (one of the container's) points at the first related one that has a line. A
finding about a config.pbtxt itself gets the line where the config names what it is about (the library, the
backend or runtime it cannot find). This is a pure step over the findings, the plan's steps and the texts."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from customops import safeio
from customops.comments import uncommented
from customops.errors import InputError
from customops.findings import Finding, Related, amended, model_of
from customops.triton.plan import LoadStep, Written
from customops.triton.python_stub import PARAMETER
from customops.triton.repository import Model

TABLE = re.compile(r"\s*\[\s*([^\]\[]+?)\s*\]")  # a TOML table header: [pytorch]
FIELDS = {"runtime": ("runtime",), "backend": ("backend", "platform")}  # a backend library's config fields

Place = tuple[int, int]  # (line, column), both from 1


def with_text_locations(findings: list[Finding], models: list[Model], manifest: str | None,
                        steps: Sequence[LoadStep] = ()) -> list[Finding]:
    """The findings, each placed on the line of the text that names what it is about (see the module)."""
    texts: dict[str, str | None] = {}

    def text(path: str) -> str | None:
        if path not in texts:
            texts[path] = _text(path)
        return texts[path]

    locate = _Locator(models, manifest, steps, text)
    return [locate.finding(f) for f in findings]


class _Locator:
    def __init__(self, models: list[Model], manifest: str | None, steps: Sequence[LoadStep],
                 text: Callable[[str], str | None]) -> None:
        self.models, self.manifest, self.text = models, manifest, text
        self.by_config = {m.config_path: m for m in models if m.config_path}
        self.steps: dict[str, list[LoadStep]] = {}
        for step in steps:
            self.steps.setdefault(os.path.normpath(step.path), []).append(step)

    def finding(self, f: Finding) -> Finding:
        related = tuple(self.related(r, f.model) for r in f.related)
        f = amended(f, related=related) if related else f
        if f.line is not None:
            return f
        named = self.written(f.library, f.model)
        if named is not None:
            file, place, step = named
            return amended(f, file=file, line=place[0], column=place[1], artifact=self.artifact(f, step.host_path))
        if f.file in self.by_config:
            return _at(f, f.file, _place(self.text(f.file or ""), f, self.by_config[f.file or ""]))
        if f.file and f.file != self.manifest and f.library:  # about a library file no step names
            f = self.named_by_text(f, model_of(f, self.models) if f.model else None)
        first = next((r for r in related if r.line is not None), None)
        if f.line is None and first is not None:  # its own library is the container's: the other one's line
            return amended(f, file=first.file, line=first.line, column=first.column, artifact=self.artifact(f))
        return f

    def related(self, r: Related, model: str | None) -> Related:
        if r.line is not None:
            return r
        named = self.written(r.library, model)
        return r if named is None else replace(r, file=named[0], line=named[1][0], column=named[1][1])

    def artifact(self, f: Finding, source: str | None = None) -> str | None:
        """The library file a finding moved to a text is about: its own file, where that was no text, else
        the `source` of the step loading it, where it had no file."""
        own = f.file if f.file and f.file not in self.by_config and f.file != self.manifest else None
        return f.artifact or own or (source if f.file is None else None)

    def written(self, library: str | None, model: str | None) -> tuple[str, Place, LoadStep] | None:
        """The file and place of the text that makes the server load `library` (a container path), if any."""
        steps = self.steps.get(os.path.normpath(library), []) if library else []
        step = next((s for s in steps if s.model == model and s.written), None) or next(
            (s for s in steps if s.written), None)
        if step is None or step.written is None:
            return None
        place = _written_place(self.text(step.written.file), step.written)
        return None if place is None else (step.written.file, place, step)

    def named_by_text(self, f: Finding, model: Model | None) -> Finding:
        """A library finding no plan step names: the config line, else the manifest line, naming its library."""
        if model is not None and model.config_path:
            place = _place(self.text(model.config_path), f, model)
            if place is not None:
                return amended(f, file=model.config_path, line=place[0], column=place[1], artifact=f.file)
        if self.manifest and f.file:
            written = os.path.relpath(f.file, os.path.dirname(self.manifest))
            place = _find(self.text(self.manifest), _quoted(written), literal="'")
            if place is not None:
                return amended(f, file=self.manifest, line=place[0], column=place[1], artifact=f.file)
        return f


def _at(f: Finding, path: str | None, place: Place | None) -> Finding:
    return f if place is None else amended(f, file=path, line=place[0], column=place[1])


def _text(path: str) -> str | None:
    try:
        return safeio.read_bytes(path, safeio.CONFIG_LIMIT).decode("utf-8", "replace")
    except (InputError, OSError):
        return None


def _written_place(text: str | None, w: Written) -> Place | None:
    """Where `w` is in its file's text: its value quoted (the n-th such entry), in its TOML table for a
    manifest entry, else its runtime/backend/platform field for a backend library."""
    if w.key in FIELDS:
        return _find(text, [_field(name) for name in FIELDS[w.key]])
    if w.key.startswith("["):
        table = w.key[1:].split("]")[0]
        return _find(text, _quoted(w.value), w.nth, table, "'") or _find(text, _quoted(w.value), w.nth, None, "'")
    return _find(text, _quoted(w.value), w.nth)


def _place(text: str | None, f: Finding, model: Model) -> Place | None:
    """The first mention of the finding's library in the config, as written (else one with its file name),
    else the backend/runtime field a backend finding is about, else for a library the config does not name (the
    Python backend's stub, the modules it imports) the execution environment's parameter or the backend field."""
    if not text:
        return None
    if f.library:
        exact = [p for w in model.op_libraries if w == f.library for p in _quoted(w)]
        same_name = [p for w in model.op_libraries if os.path.basename(w) == os.path.basename(f.library)
                     for p in _quoted(w)]
        place = _find(text, exact) or _find(text, same_name)
        if place is not None:
            return place
    if f.code[:3] == "CO2":
        return _find(text, [_field("runtime"), _field("backend")])
    if f.code[:3] == "CO3":  # a library the config does not name: a Python backend model's stub or its modules
        return _find(text, [*_quoted(PARAMETER), _field("backend")])
    return None


def _quoted(value: str) -> list[re.Pattern[str]]:
    """The value as a quoted string, either quote; the place is where the value starts."""
    return [re.compile(f"{q}(?P<at>){re.escape(value)}{q}") for q in ('"', "'")]


def _field(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?P<at>)\b{name}\s*:\s*[\"']")


def _find(text: str | None, needles: list[re.Pattern[str]], nth: int = 0, table: str | None = None,
          literal: str = "") -> Place | None:
    """(line, column) of the `nth` occurrence (else the last) of the first needle found outside comments
    (`literal`: TOML's quote without escapes), in the TOML `table` where one is given."""
    lines = [uncommented(line, literal)[0] for line in text.split("\n")] if text else []
    for needle in needles:
        found, current = [], None
        for number, line in enumerate(lines, 1):
            header = TABLE.match(line) if table is not None else None
            current = header[1] if header else current
            if table is None or current == table:
                found += [(number, m.start("at") + 1) for m in needle.finditer(line)]
        if found:
            return found[min(nth, len(found) - 1)]
    return None
