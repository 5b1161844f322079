"""The other libraries of a collision (Finding.related) in the reports: each where the text that makes Triton
load it is (customops.app.text_locations), as SARIF relatedLocations, a JSON list, and a sentence the text-only
reports (GitHub annotations, GitLab Code Quality) add to the finding's."""

from __future__ import annotations

import os

from customops.findings import Finding, Related


def _inside(path: str | None, base: str | None) -> str | None:
    """`path` relative to `base` where it lies below it (any path without a base), else None."""
    if path is None or base is None:
        return path
    path, base = os.path.abspath(path), os.path.abspath(base)
    return os.path.relpath(path, base) if path.startswith(base.rstrip("/") + "/") else None


def records(f: Finding, base: str | None) -> list[dict]:
    """JSON: each related library, with the file (relative to `base` where inside it), line and column naming it."""
    def shown(path: str | None) -> str | None:
        return _inside(path, base) or path

    return [{"library": r.library, "file": shown(r.file), "line": r.line, "column": r.column} for r in f.related]


def placed(f: Finding, base: str | None) -> list[tuple[Related, str]]:
    """The related libraries that have a line in the checkout, with that file relative to `base`."""
    return [(r, path) for r in f.related if r.line is not None and (path := _inside(r.file, base)) is not None]


def sarif_locations(f: Finding, base: str | None, artifact, first_id: int) -> list[dict]:
    """SARIF relatedLocations of the related libraries that have a line in the checkout (`artifact`: the
    artifactLocation of a path), numbered from `first_id`."""
    return [{"id": first_id + i, "physicalLocation": {"artifactLocation": artifact(path), "region": {
        "startLine": r.line, **({"startColumn": r.column} if r.column else {})}},
        "message": {"text": f"the other library: {r.library}"}} for i, (r, path) in enumerate(placed(f, base))]


def sentence(f: Finding, base: str | None) -> str:
    """For a report of text alone: where the other libraries are named (" | other library: m/config.pbtxt:4
    (/models/m/libb.so)"), "" when none is in the checkout."""
    where = [f"{path}:{r.line} ({r.library})" for r, path in placed(f, base)]
    return f" | other librar{'ies' if len(where) > 1 else 'y'}: {', '.join(where)}" if where else ""
