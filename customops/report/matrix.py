"""The upgrade matrix (`check --triton-release A,B,C`): models by targets, each cell `ok` or the codes that fail
there, then the findings that differ between targets (once each, with the targets they occur in), and the newest
target where everything loads. JSON: schema customops.matrix/1."""

from __future__ import annotations

import json
from typing import Any

from customops import schemas
from customops.app.matrix import Matrix
from customops.report.check import finding_record, sarif_document, sarif_result

SERVER_ROW = "(the server)"  # findings of no one model: a preload that fails every model
NOT_CHECKED = ("loading, symbol resolution, collisions and registrations need each release's files: give its "
               "profile or image (--profile, --image) to check them")


def render_text(matrix: Matrix) -> str:
    models = matrix.models()
    rows = [[m or SERVER_ROW, *(_cell(matrix, m, i) for i in range(len(matrix.targets)))] for m in models]
    header = ["model", *matrix.targets]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = ["Models against Triton releases (each cell: ok, the codes that fail there, or ? where the release's "
             "facts cannot decide):", ""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    differing = matrix.differing()
    if differing:
        lines += ["", "What changes between them:"]
        for f, targets in differing:
            where = f" {f.model}:" if f.model else ""
            lines.append(f"  {f.code} {f.level!s}{where} {f.message}  [{', '.join(targets)}]")
    undecided: dict[tuple[str, str], list[str]] = {}
    for i, target in enumerate(matrix.targets):
        for m in models:
            for need in matrix.undecided(m, i):
                undecided.setdefault((m or SERVER_ROW, need), []).append(target)
    if undecided:
        lines += ["", "Not decided by the releases' facts (no cited source states the version):"]
        lines += [f"  {m}: needs {need}  [{', '.join(targets)}]" for (m, need), targets in undecided.items()]
    everywhere = len(matrix.findings()) - len(differing)
    if everywhere:
        lines += ["", f"{everywhere} finding(s) in every release (customops check --triton-release "
                      f"{matrix.targets[-1]} shows them)."]
    lines += ["", f"not checked: {NOT_CHECKED}", ""]
    newest = matrix.newest_passing()
    lines.append(f"Newest release where everything loads, as far as its facts tell: {newest}" if newest else
                 "No release where everything loads, as far as its facts tell.")
    return "\n".join(lines) + "\n"


def _cell(matrix: Matrix, model: str | None, index: int) -> str:
    failing = " ".join(matrix.failing(model, index))
    unknown = "?" if matrix.undecided(model, index) else ""
    return " ".join(p for p in (failing, unknown) if p) or "ok"


def as_json(matrix: Matrix, base: str | None) -> str:
    body: dict[str, Any] = {
        "schema": schemas.MATRIX, "ok": matrix.exit_code() == 0, "newest_passing": matrix.newest_passing(),
        "targets": [{"target": t, "ok": matrix.passes(i), "decided": matrix.decided(i),
                     "fail_on": str(run.fail_on)} for i, (t, run) in enumerate(zip(matrix.targets, matrix.runs,
                                                                                   strict=True))],
        "models": [{"name": m, "failing": {t: list(matrix.failing(m, i)) for i, t in enumerate(matrix.targets)},
                    "undecided": {t: list(matrix.undecided(m, i)) for i, t in enumerate(matrix.targets)
                                  if matrix.undecided(m, i)}} for m in matrix.models()],
        "findings": [{**finding_record(f, base), "targets": list(targets)} for f, targets in matrix.findings()],
        "not_checked": NOT_CHECKED}
    return json.dumps(body, indent=2) + "\n"


def as_sarif(matrix: Matrix, base: str | None) -> str:
    """SARIF: each distinct finding once, its message led by the releases it occurs in ("Triton 25.08, 25.10:"),
    which its `properties.targets` list, and a fingerprint of its own per set of releases, so that one upload
    shows where a model breaks."""
    found = matrix.findings()
    used = sorted({f.code for f, _ in found})
    results = []
    for f, targets in found:
        run = matrix.runs[matrix.targets.index(targets[0])]
        entry = sarif_result(f, used, run.result, base)
        entry["message"]["text"] = f"Triton {', '.join(targets)}: {entry['message']['text']}"
        entry["properties"] = {**entry.get("properties", {}), "targets": list(targets)}
        entry["partialFingerprints"]["customops/targets/v1"] = ",".join(targets)
        results.append(entry)
    return sarif_document(used, results, base, {"properties": {"scope": "release facts",
                                                                "targets": list(matrix.targets)}})
