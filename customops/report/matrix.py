"""The upgrade matrix (`check --triton-release A,B,C`, or several containers): models by targets, each cell `ok` or
the codes that fail there, then the findings that differ between targets (once each, with the targets they occur
in), and the newest target where everything loads. JSON: schema customops.matrix/1."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from customops import schemas
from customops.app.matrix import Matrix, Source
from customops.report.check import finding_record, github_line, gitlab_issue, sarif_document, sarif_result
from customops.report.escape import dumps

if TYPE_CHECKING:
    from customops.app.checking import CheckRun

SERVER_ROW = "(the server)"  # findings of no one model: a preload that fails every model
NOT_CHECKED = ("loading, symbol resolution, collisions and registrations need each release's files: give its "
               "profile or image (--profile, --image) to check them")


def render_text(matrix: Matrix) -> str:
    models = matrix.models()
    rows = [[m or SERVER_ROW, *(_cell(matrix, m, i) for i in range(len(matrix.targets)))] for m in models]
    header = ["model", *matrix.targets]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    facts = any(c.source is Source.FACTS for c in matrix.columns)
    lines = ["Models against Triton releases (each cell: ok, the codes that fail there, or ? where the release's "
             "facts cannot decide):" if matrix.facts_only else "Models against targets (each cell: ok, the codes "
             "that fail there" + (", or ? where a release's facts cannot decide):" if facts else "):"), ""]
    lines += [f"  {c.name}: the {c.source} of {f'Triton {c.release}' if c.release else 'no known release'}, "
              "checked in full" for c in matrix.columns if c.source is not Source.FACTS]
    lines += [""] * (not matrix.facts_only)
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
        last = matrix.columns[-1]
        again = (f"--triton-release {last.name}" if last.source is Source.FACTS else
                 f"--{'container-root' if last.source is Source.ROOT else last.source} {last.name}")
        lines += ["", f"{everywhere} finding(s) in every {'release' if matrix.facts_only else 'target'} "
                      f"(customops check {again} shows them)."]
    lines += ["", f"not checked: {NOT_CHECKED}"] * facts + [""]
    lines.append(_newest_line(matrix, matrix.newest_passing()))
    return "\n".join(lines) + "\n"


def _newest_line(matrix: Matrix, newest: str | None) -> str:
    if matrix.facts_only:
        return (f"Newest release where everything loads, as far as its facts tell: {newest}" if newest else
                "No release where everything loads, as far as its facts tell.")
    return f"Newest target where everything loads: {target_label(matrix, newest)}" if newest else \
        "No target where everything loads."


def target_label(matrix: Matrix, target: str) -> str:
    """A target as a sentence names it: "Triton 25.08" (a release's facts), "old.json (Triton 24.12)" (a profile
    of that release), "old.json" (one of no known release)."""
    column = matrix.columns[matrix.targets.index(target)]
    if column.source is Source.FACTS:
        return f"Triton {column.name}"
    return f"{column.name} (Triton {column.release})" if column.release else column.name


def _cell(matrix: Matrix, model: str | None, index: int) -> str:
    failing = " ".join(matrix.failing(model, index))
    unknown = "?" if matrix.undecided(model, index) else ""
    return " ".join(p for p in (failing, unknown) if p) or "ok"


def as_json(matrix: Matrix, base: str | None) -> str:
    body: dict[str, Any] = {
        "schema": schemas.MATRIX, "ok": matrix.exit_code() == 0, "newest_passing": matrix.newest_passing(),
        "targets": [{"target": c.name, "source": str(c.source), "release": c.release, "ok": matrix.passes(i),
                     "decided": matrix.decided(i), "fail_on": str(run.fail_on)}
                    for i, (c, run) in enumerate(zip(matrix.columns, matrix.runs, strict=True))],
        "models": [{"name": m, "failing": {t: list(matrix.failing(m, i)) for i, t in enumerate(matrix.targets)},
                    "undecided": {t: list(matrix.undecided(m, i)) for i, t in enumerate(matrix.targets)
                                  if matrix.undecided(m, i)}} for m in matrix.models()],
        "findings": [{**finding_record(f, base), "targets": list(targets)} for f, targets in matrix.findings()],
        "not_checked": NOT_CHECKED}
    return json.dumps(body, indent=2) + "\n"


def as_github(matrix: Matrix, base: str | None) -> str:
    """GitHub workflow annotations: each distinct finding once, its targets leading its message ("Triton 25.08,
    25.10: ..."), then a notice naming the newest target where everything loads."""
    lines = [github_line(f, _run_of(matrix, targets).result, base, _lead(matrix, targets) + ": ")
             for f, targets in matrix.findings()]
    newest = matrix.newest_passing()
    lines.append(f"::notice title=customops::{_newest_line(matrix, newest)}")
    return "\n".join(lines) + "\n"


def as_gitlab(matrix: Matrix, base: str | None) -> str:
    """GitLab Code Quality: each distinct finding once, its targets leading its description and joining its
    fingerprint, so that "breaks in 25.08" and "breaks in 25.08, 25.10" are issues of their own."""
    return dumps([gitlab_issue(f, _run_of(matrix, targets).result, base, _lead(matrix, targets) + ": ")
                  for f, targets in matrix.findings()], indent=2)


def _run_of(matrix: Matrix, targets: tuple[str, ...]) -> CheckRun:
    """The run of the first target a finding occurs in: where its location is read."""
    return matrix.runs[matrix.targets.index(targets[0])]


def _lead(matrix: Matrix, targets: tuple[str, ...]) -> str:
    """The targets a finding occurs in, as its message leads with them."""
    return (f"Triton {', '.join(targets)}" if matrix.facts_only else
            ", ".join(target_label(matrix, t) for t in targets))


def as_sarif(matrix: Matrix, base: str | None) -> str:
    """SARIF: each distinct finding once, its message led by the releases it occurs in ("Triton 25.08, 25.10:"),
    which its `properties.targets` list, and a fingerprint of its own per set of releases, so that one upload
    shows where a model breaks."""
    found = matrix.findings()
    used = sorted({f.code for f, _ in found})
    results = []
    for f, targets in found:
        entry = sarif_result(f, used, _run_of(matrix, targets).result, base)
        entry["message"]["text"] = f"{_lead(matrix, targets)}: {entry['message']['text']}"
        entry["properties"] = {**entry.get("properties", {}), "targets": list(targets)}
        entry["partialFingerprints"]["customops/targets/v1"] = ",".join(targets)
        results.append(entry)
    scope = "release facts" if matrix.facts_only else "release facts and containers" if any(
        c.source is Source.FACTS for c in matrix.columns) else "containers"
    return sarif_document(used, results, base, {"properties": {"scope": scope,
                                                                "targets": list(matrix.targets)}})
