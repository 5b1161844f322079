"""Locations in text for every finding that can have one: a code-scanning alert, a workflow annotation or a
Code Quality issue lands on a line, and a same-line ignore comment applies there.

A finding about a config.pbtxt gets the line and column where the config names what it is about (the
op_library_filename of its library, the backend or runtime it cannot find). A finding about a library
file (a binary, which no review shows) moves to the text that makes Triton load it: the line of the
model's config that names it, else the line of customops.toml that lists it; the library stays its
`artifact`. A library that no text names keeps its own location."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace

from customops import safeio
from customops.errors import InputError
from customops.findings import Finding, model_of
from customops.triton.repository import Model

FIELD = re.compile(r'\b(backend|runtime|platform)\s*:\s*"')


def with_text_locations(findings: list[Finding], models: list[Model], manifest: str | None) -> list[Finding]:
    by_config = {m.config_path: m for m in models if m.config_path}
    texts: dict[str, str | None] = {}

    def text(path: str) -> str | None:
        if path not in texts:
            texts[path] = _text(path)
        return texts[path]

    located = []
    for f in findings:
        path = f.file
        if f.line is None and path in by_config:
            f = _at(f, path, _place(text(path), f, by_config[path]))
        elif f.line is None and path and path != manifest and f.library:  # about the library file itself
            f = _named_by_text(f, model_of(f, models) if f.model else None, manifest, text)
        located.append(f)
    return located


def _named_by_text(f: Finding, model: Model | None, manifest: str | None,
                   text: Callable[[str], str | None]) -> Finding:
    """The library finding moved to the config line, else the manifest line, that names its library."""
    if model is not None and model.config_path:
        place = _place(text(model.config_path), f, model)
        if place is not None:
            return replace(f, file=model.config_path, line=place[0], column=place[1], artifact=f.file)
    if manifest and f.file:
        written = os.path.relpath(f.file, os.path.dirname(manifest))
        place = _find(text(manifest), [f'"{written}"', f"'{written}'"], offset=1)
        if place is not None:
            return replace(f, file=manifest, line=place[0], column=place[1], artifact=f.file)
    return f


def _at(f: Finding, path: str | None, place: tuple[int, int] | None) -> Finding:
    return f if place is None else replace(f, file=path, line=place[0], column=place[1])


def _text(path: str) -> str | None:
    try:
        return safeio.read_bytes(path, safeio.CONFIG_LIMIT).decode("utf-8", "replace")
    except (InputError, OSError):
        return None


def _place(text: str | None, f: Finding, model: Model) -> tuple[int, int] | None:
    """(line, column), both from 1, of the first mention of the finding's library as written in the config,
    else of the backend/runtime field a backend finding is about."""
    if not text:
        return None
    needles = []
    if f.library:
        needles += [w for w in model.op_libraries if w == f.library or os.path.basename(w) ==
                    os.path.basename(f.library)]
    if f.code[:3] == "CO2":
        needles += [m.group(0) for m in FIELD.finditer(text) if m.group(1) in ("runtime", "backend")]
    return _find(text, needles)


def _find(text: str | None, needles: list[str], offset: int = 0) -> tuple[int, int] | None:
    """(line, column) of the first needle found (`offset`: characters into it, past a quote)."""
    for needle in needles:
        at = text.find(needle) if text else -1
        if text and at >= 0:
            at += offset
            return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
    return None
