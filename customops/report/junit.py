"""JUnit XML as Jenkins' schema (junit-10.xsd, which GitLab and most dashboards read) has it, with GitLab's `file`
on each testcase."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from customops.codes import CODES, Severity
from customops.findings import Finding, model_of
from customops.report.check import location, relative
from customops.report.escape import printable, xml
from customops.report.summary import CONFIGS_ONLY, scope

if TYPE_CHECKING:
    from customops.app.matrix import Matrix


def to_junit(result, fail_on: Severity, base: str | None, elapsed: float = 0.0) -> str:
    """JUnit XML as Jenkins' schema (junit-10.xsd) has it: a testsuite per model, named by its directory so that
    two repositories' models of one name stay apart, and a testcase per finding, failing at or above
    `fail_on`, passing with the finding as its output below it, so that dashboards show warnings too; a model
    without findings is one passing testcase. Each testcase has the `file` GitLab shows beside it: the file the
    finding points at (customops.report.check.location), a passing model's config. `elapsed`: the check's
    seconds, the root's time."""
    body, tests, failures = _suites(result, fail_on, base)
    return _document("customops check", body, tests, failures, elapsed)


def to_junit_matrix(matrix: Matrix, base: str | None) -> str:
    """The upgrade matrix as JUnit: each target's suites as to_junit makes them, each named with its target
    ("ranker_pt (Triton 25.08)", "ranker_pt (old.json)"), so that one report shows where a model breaks."""
    from customops.report.matrix import target_label

    body: list[str] = []
    tests = failures = 0
    runs = matrix.runs
    for target, run in zip(matrix.targets, runs, strict=True):
        found = _suites(run.result, run.fail_on, base, f" ({target_label(matrix, target)})")
        body, tests, failures = body + found[0], tests + found[1], failures + found[2]
    return _document("customops check (releases)", body, tests, failures, sum(r.seconds for r in runs))


def _suites(result, fail_on: Severity, base: str | None, suffix: str = "") -> tuple[list[str], int, int]:
    """A testsuite per model (and one for the server), the tests and the failures they hold."""
    groups: dict[int, list[Finding]] = defaultdict(list)  # by the model's position: names may repeat
    for f in result.findings:
        model = model_of(f, result.models) if f.model else None
        groups[-1 if model is None else result.models.index(model)].append(f)
    suites = [(relative(m.path, base) or m.name, m.name, groups.get(i, []), relative(m.config_path or m.path, base))
              for i, m in enumerate(result.models)]
    if groups.get(-1):
        suites.append(("(server)", "(server)", groups[-1], None))
    body, tests, failures = [], 0, 0
    for suite, model, found, config in suites:
        cases = _junit_cases(model, found, fail_on, config, [location(f, result, base)[0] for f in found])
        failed = sum('<failure ' in c for c in cases)
        tests, failures = tests + len(cases), failures + failed
        body.append(f'  <testsuite name="{xml(printable(suite + suffix), True)}" tests="{len(cases)}" '
                    f'failures="{failed}" errors="0" skipped="0" time="0">\n' + _properties(result)
                    + "".join(f"    {c}\n" for c in cases) + "  </testsuite>")
    return body, tests, failures


def _document(name: str, body: list[str], tests: int, failures: int, elapsed: float) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name="{name}" tests="{tests}" failures="{failures}" errors="0" '
            f'time="{elapsed:.3f}">\n' + "\n".join(body) + ("\n" if body else "") + "</testsuites>\n")


def _properties(result) -> str:
    """Each suite's `<properties>` (junit-10.xsd has them on a testsuite only): `customops.scope`, what the run
    checked (full, or configs only: the server's loads not modelled, its passing tests no proof that they load)."""
    value = "full" if scope(result) == "full" else CONFIGS_ONLY
    return f'    <properties><property name="customops.scope" value="{value}"/></properties>\n'


def _junit_cases(model: str, found: list[Finding], fail_on: Severity, config: str | None,
                 files: list[str]) -> list[str]:
    """The model's testcases: one per finding, at `files` (one per finding), else `loads`, at its `config`."""
    classname = xml(printable(f"customops.{model}"), True)
    if not found:
        return [f'<testcase classname="{classname}" name="loads" file="{xml(printable(config or ""), True)}" '
                'time="0"/>']
    cases, seen = [], Counter[str]()
    for f, file in zip(found, files, strict=True):
        name = f"{f.code} {CODES[f.code].title}" + (f" ({os.path.basename(f.library)})" if f.library else "")
        seen[name] += 1
        name += f" #{seen[name]}" if seen[name] > 1 else ""
        text = xml(f"{f.level}: {printable(f.stated)}" + (f"\n  predicted: {_lines(f.predicted)}" if f.predicted
                                                           else "") + f"\n  fix: {printable(f.hint)}")
        inner = (f'<failure type="{f.code}" message="{xml(printable(f.stated), True)}">{text}</failure>'
                 if f.level >= fail_on else f"<system-out>{text}</system-out>")
        cases.append(f'<testcase classname="{classname}" name="{xml(printable(name), True)}" '
                     f'file="{xml(printable(file), True)}" time="0">{inner}</testcase>')
    return cases


def _lines(text: str) -> str:
    """Multi-line text (a runtime's message) with every line printable and continuation lines indented, so
    none of them can start with `::` (a GitHub workflow command, were the XML echoed into a job log)."""
    return "\n    ".join(printable(line) for line in text.split("\n"))
