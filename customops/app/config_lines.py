"""Lines for findings that point at a config.pbtxt: the line and column where the config names what the finding
is about (the op_library_filename of its library, the backend or runtime it cannot find), so that a code-scanning
alert or a workflow annotation lands on that line rather than on the file."""

from __future__ import annotations

import os
import re
from dataclasses import replace

from customops import safeio
from customops.errors import InputError
from customops.findings import Finding
from customops.triton.repository import Model

FIELD = re.compile(r'\b(backend|runtime|platform)\s*:\s*"')


def with_config_lines(findings: list[Finding], models: list[Model]) -> list[Finding]:
    configs = {m.config_path: m for m in models if m.config_path}
    texts: dict[str, str | None] = {}
    located = []
    for f in findings:
        model = configs.get(f.file or "")
        if f.line is None and model is not None:
            if f.file not in texts:
                texts[f.file or ""] = _text(f.file or "")
            place = _place(texts[f.file or ""], f, model)
            if place is not None:
                f = replace(f, line=place[0], column=place[1])
        located.append(f)
    return located


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
    for needle in needles:
        at = text.find(needle)
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            return line, at - (text.rfind("\n", 0, at) + 1) + 1
    return None
