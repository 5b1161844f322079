"""Render a CheckResult: text (rich), json, sarif, junit, github. Reports only render.

Everything a report shows from the repository is untrusted (see customops.report.escape): JSON and SARIF
carry names exactly, except that a byte that is not UTF-8 becomes the text `\\xNN`, and SARIF's URIs
percent-encode the bytes of the path (`%FF`); JUnit and the text report show control characters escaped
(`\\x1b`, `\\n`), GitHub annotations too except line breaks (%0A, which GitHub decodes), so no name can end
a line, a command or an XML document, or reach a terminal as an escape sequence or rich markup.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict

from customops import PROJECT_URL, __version__, schemas
from customops.cachedir import key_bytes
from customops.codes import CODES, Severity, doc_page, docs_url
from customops.findings import Finding, model_of
from customops.probe.groups import ProbedGroup
from customops.report.escape import console as new_console
from customops.report.escape import dumps, github_data, github_property, markup, printable, xml
from customops.report.wrap import heading, wrap

CHECK_SCHEMA = schemas.CHECK
SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def counts(findings: list[Finding]) -> dict[str, int]:
    return {str(s): sum(1 for f in findings if f.level == s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)}


def relative(path: str | None, base: str | None) -> str | None:
    """Paths inside the repository are reported relative to it, so that code-scanning annotations land."""
    if path is None or base is None:
        return path
    path, base = os.path.abspath(path), os.path.abspath(base)
    return os.path.relpath(path, base) if path.startswith(base.rstrip("/") + "/") else path


def _in_checkout(path: str | None, base: str | None) -> str | None:
    """`path` relative to `base` where it lies below it (any path without a base), else None."""
    if path is None or base is None:
        return path
    inside = relative(path, base)
    return None if inside is None or os.path.isabs(inside) else inside


def location(f: Finding, result, base: str | None) -> tuple[str, int, int | None]:
    """Where the CI reports point a finding (path relative to `base`, line, column): its own file where that
    lies in the checkout, at its line (1 where it has none, as GitLab's); else, since code scanning shows no
    result without a file of the repository and GitLab no issue without a path, line 1 of its model's config,
    the manifest, the profile or the first model's config that does; else the checkout itself (".")."""
    own = _in_checkout(f.file, base)
    if own is not None:
        return own, f.line or 1, f.column if f.line else None
    model = model_of(f, result.models) if f.model else None
    for path in (model.config_path if model else None, result.manifest, result.profile,
                 *(m.config_path for m in result.models)):
        inside = _in_checkout(path, base)
        if inside is not None:
            return inside, 1, None
    return ".", 1, None


def error_location(paths: list[str], base: str) -> str:
    """Where the reports of a run that could not check point, relative to `base`: the first of `paths` (the
    file the error names, the first model repository, the working directory) that exists in the checkout,
    else the checkout itself (".")."""
    for path in paths:
        inside = _in_checkout(path, base)
        if inside is not None and os.path.lexists(path):
            return inside
    return "."


def finding_record(f: Finding, base: str | None) -> dict:
    return {"code": f.code, "severity": str(f.level), "message": f.message, "model": f.model, "library": f.library,
            "symbol": f.symbol, "version": f.version, "file": relative(f.file, base), "line": f.line,
            "column": f.column, "predicted": f.predicted, "evidence": list(f.evidence), "hint": f.hint,
            "assumes": f.assumes, "artifact": relative(f.artifact, base)}


def to_json(result, fail_on: Severity, exit_code: int, base: str | None, statistics: bool = False) -> str:
    """customops.check/1; `statistics` (--statistics) adds `statistics`: per code, its count, severity and
    title, the most frequent first (as the text report's --statistics lines)."""
    facts = result.container.facts
    plan = result.plan
    record = {
        "schema": CHECK_SCHEMA,
        "customops": __version__,
        "ok": exit_code == 0,
        "summary": {**counts(result.findings), "suppressed": len(result.suppressed), "fail_on": str(fail_on),
                    "exit_code": exit_code, "models": len(result.models)},
        "manifest": relative(result.manifest, base),
        "profile": relative(result.profile, base),
        "container": {"source": facts.source, "root": result.container.target.root if result.container.target else None,
                      "image": result.container.image, "facts": {k: v for k, v in facts.__dict__.items()}},
        "models": [{"name": m.name, "backend": m.backend, "platform": m.platform, "versions": list(m.versions),
                    "config": relative(m.config_path, base), "op_libraries": list(m.op_libraries)}
                   for m in result.models],
        "plan": {"ld_preload": plan.ld_preload, "ld_library_path": list(plan.library_path),
                 "server_args": list(plan.server_args),
                 "steps": [{"path": s.path, "source": relative(s.source, base), "loader": s.loader,
                            "purpose": s.purpose, "preload": s.preload, "model": s.model,
                            "entry_points": list(s.entry_points)} for s in (*plan.preloads, *plan.dlopens)]},
        "findings": [finding_record(f, base) for f in result.findings],
        "suppressed": [{**finding_record(f, base), "suppression": _suppression(f, base)} for f in result.suppressed],
        "notes": result.notes,
        "probes": [_probe_record(g) for g in result.probes],
    }
    if statistics:
        record["statistics"] = {code: {"count": count, "severity": str(level), "title": CODES[code].title}
                                for count, code, level in _statistics(result.findings)}
    return dumps(record, indent=2)


def _probe_record(group: ProbedGroup) -> dict:
    """One --probe group: each library as loaded alone (what it registers) and, where the group has several,
    as loaded after the others."""
    several = len(group.steps) > 1
    return {"framework": group.framework, "model": group.model, "version": group.version,
            "libraries": [{"library": step.path, "status": str(alone.status), "registered": list(alone.registered),
                           "message": alone.message,
                           "together": {"status": str(together.status), "registered": list(together.registered)}
                           if several else None} for step, alone, together in group.members()],
            "builtin": _builtin_record(group)}


def _builtin_record(group: ProbedGroup) -> dict | None:
    """TensorRT: what the container's own plugin library registered after the group's libraries."""
    builtin = group.builtin
    if builtin is None:
        return None
    result = builtin.result
    return {"library": builtin.path or None, "status": str(result.status) if result else None,
            "registered": list(result.registered) if result else [],
            "message": result.message if result else builtin.not_probed}


def _suppression(f: Finding, base: str | None) -> dict | None:
    s = f.suppression
    return None if s is None else {"source": s.source, "file": relative(s.file, base), "line": s.line,
                                   "reason": s.reason}


def to_sarif(result, base: str | None) -> str:
    """SARIF 2.1.0 as code scanning takes it (the SARIF Multitool's GitHub rules pass: GH1001-GH1007,
    GH1011-GH1018, GH2012). Suppressed findings are results with their `suppressions` (code scanning shows
    them as dismissed); every result has a location in the checkout (`location`) and a `partialFingerprints`
    entry that stays the same when lines move."""
    used = sorted({f.code for f in (*result.findings, *result.suppressed)})
    rules = [{"id": code, "name": CODES[code].title,
              "shortDescription": {"text": CODES[code].title},
              "fullDescription": {"text": CODES[code].what},
              "help": {"text": f"{CODES[code].why}\nFix: {CODES[code].fix}", "markdown": doc_page(code)},
              "helpUri": docs_url(code),
              "defaultConfiguration": {"level": SARIF_LEVEL[CODES[code].severity]}} for code in used]
    results = [_sarif_result(f, used, result, base) for f in (*result.findings, *result.suppressed)]
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "customops", "version": __version__, "semanticVersion": __version__,
                                      "rules": rules, "informationUri": PROJECT_URL}},
                  "originalUriBaseIds": {"%SRCROOT%": {"uri": _uri(base)}} if base else {},
                  "results": results}],
    }
    return dumps(sarif, indent=2)


def _sarif_result(f: Finding, used: list[str], result, base: str | None) -> dict:
    entry: dict = {"ruleId": f.code, "ruleIndex": used.index(f.code), "level": SARIF_LEVEL[f.level],
                   "message": {"text": f.stated + (f"\nPredicted: {f.predicted}" if f.predicted else "")}}
    path, line, column = location(f, result, base)
    region = {"startLine": line, **({"startColumn": column} if column else {})}
    entry["locations"] = [{"physicalLocation": {"artifactLocation": _artifact(path), "region": region}}]
    artifact = _in_checkout(f.artifact, base)  # one outside the checkout is no file code scanning can show
    if artifact:  # the library itself, where the location is the text that makes Triton load it
        entry["relatedLocations"] = [{"id": 1, "physicalLocation": {"artifactLocation": _artifact(artifact)},
                                      "message": {"text": "the library"}}]
    entry["partialFingerprints"] = {"customops/v1": _fingerprint(f, base)}
    if f.suppression is not None:
        kind = "inSource" if f.suppression.source == "config" else "external"
        entry["suppressions"] = [{"kind": kind, **({"justification": f.suppression.reason}
                                                   if f.suppression.reason else {})}]
    props = {k: v for k, v in (("model", f.model), ("library", f.library), ("symbol", f.symbol)) if v}
    if props:
        entry["properties"] = props
    return entry


def _artifact(path: str) -> dict:
    """An artifactLocation: a path in the checkout relative to %SRCROOT%, an absolute one (no base) as a file
    URI; spaces, `%`, `#` and bytes that are not UTF-8 percent-encoded."""
    from urllib.parse import quote

    if os.path.isabs(path):
        return {"uri": "file://" + quote(os.fsencode(path))}
    return {"uri": quote(os.fsencode(path)), "uriBaseId": "%SRCROOT%"}


GITLAB_SEVERITY = {Severity.ERROR: "critical", Severity.WARNING: "minor", Severity.INFO: "info"}


def to_gitlab(result, base: str | None) -> str:
    """GitLab Code Quality (a JSON array of issues, each with a description, check_name, fingerprint, severity
    and location: a path relative to the checkout and a line, as `location` places it)."""
    issues = [{"description": f.stated + (f" | predicted: {f.predicted}" if f.predicted else ""),
               "check_name": f.code, "fingerprint": _fingerprint(f, base), "severity": GITLAB_SEVERITY[f.level],
               "location": {"path": path, "lines": {"begin": line}}}
              for f in result.findings for path, line, _ in [location(f, result, base)]]
    return dumps(issues, indent=2)


def _fingerprint(f: Finding, base: str | None) -> str:
    """The same for one finding wherever its lines move: code, model, library, symbol and path."""
    identity = "\0".join(v or "" for v in (f.code, f.model, f.library, f.symbol, relative(f.file, base),
                                            relative(f.artifact, base)))
    return hashlib.sha256(key_bytes(identity)).hexdigest()  # two names that are not UTF-8 stay two alerts


def error_report(report_format: str, message: str, where: str) -> str:
    """junit, github or gitlab for a run that could not check: the error as the one thing it reports, at
    `where` (error_location). Never SARIF: code scanning would take a file without the findings for an
    analysis that found none, and close every open alert (docs/ci.md)."""
    text = printable(message)
    if report_format == "gitlab":
        return dumps([{"description": text, "check_name": "customops", "fingerprint": hashlib.sha256(
            text.encode("utf-8", "replace")).hexdigest(), "severity": "blocker",
            "location": {"path": where, "lines": {"begin": 1}}}], indent=2)
    if report_format == "junit":
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="customops check" tests="1" failures="0" '
                'errors="1" time="0">\n  <testsuite name="customops check" tests="1" failures="0" errors="1" '
                f'time="0">\n    <testcase classname="customops.check" name="customops check" '
                f'file="{xml(printable(where), True)}" time="0"><error message="{xml(text, True)}" type="bad input">'
                f'{xml(text)}</error></testcase>\n  </testsuite>\n</testsuites>\n')
    file = f"file={github_property(where)}," if where != "." else ""
    return f"::error {file}title=customops::{github_data(text)}\n"


def _uri(base: str) -> str:
    from urllib.parse import quote

    return "file://" + quote(os.fsencode(os.path.abspath(base).rstrip("/") + "/"))


def to_github(result, base: str | None) -> str:
    """One workflow command per line: GitHub ends a command at a line break, its properties at `,` and
    `::`, so values are escaped by its rules (github_property, github_data)."""
    lines = []
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    for f in result.findings:
        props = [f"title={github_property(f.code)}"]
        path = relative(f.file, base)
        if path:
            props.insert(0, f"file={github_property(path)}")
            if f.line:
                props[1:1] = [f"line={f.line}", *([f"col={f.column}"] if f.column else [])]
        message = github_data(f.stated + (f" | predicted: {f.predicted}" if f.predicted else ""))
        lines.append(f"::{level[f.level]} {','.join(props)}::{message}")
    return "\n".join(lines) + ("\n" if lines else "")
EVIDENCE_SHOWN = 12  # evidence lines of a finding shown without --verbose


def render_text(result, fail_on: Severity, exit_code: int, base: str | None, console=None,
                verbosity: int = 0, statistics: bool = False) -> None:
    """The report for people. `verbosity` -1 (--quiet): the findings and the summary line only; 0: also a
    header, a rule per model, the models without findings and the notes; 1 (--verbose): also the container's
    facts, every evidence line, the suppressed findings and what was checked of each model without findings.
    `statistics` (--statistics, as ruff's): one line per code (count, code, severity, title), then the summary
    line, and nothing else."""
    console = console or new_console()
    style = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
    if statistics:
        for count, code, level in _statistics(result.findings):
            console.print(f"{count:>5}  [{style[level]}]{code} {level!s:<7}[/] {markup(CODES[code].title)}")
        _summary(console, result, fail_on, exit_code)
        return
    facts = result.container.facts
    source = _container_name(result, base)
    if verbosity >= 0:
        _print(console, "[bold]customops check[/]: ", 17, f"{len(result.models)} model(s) against {source}"
               + (f" (Triton {facts.triton_version})" if facts.triton_version else ""), 4)
    if verbosity > 0:
        for line in _facts(facts):
            console.print(f"[dim]container: {markup(line)}[/]")
    by_model: dict[str, list[Finding]] = defaultdict(list)
    for f in result.findings:
        by_model[f.model or "(server)"].append(f)
    for model in sorted(by_model, key=lambda m: (-max(int(f.level) for f in by_model[m]), m)):
        if verbosity >= 0:
            heading(console, f"[bold]{markup(model)}")
        for f in by_model[model]:
            _finding(console, f, base, style, verbosity)
    untouched = [m for m in result.models if not any(_concerns(f, m) for f in result.findings)]
    if untouched and verbosity == 0:
        _print(console, "[green]no findings:[/] ", 13, ", ".join(m.name for m in untouched), 4)
    elif untouched and verbosity > 0:
        loads: dict[str, int] = defaultdict(int)
        for step in result.plan.dlopens:
            if step.model:
                loads[step.model] += 1
        for m in untouched:
            what = [f"backend {m.backend or '?'}", *([f"platform {m.platform}"] if m.platform else []),
                    f"version(s) {', '.join(map(str, m.versions)) or 'none'}",
                    f"{len(m.op_libraries)} op librar{'y' if len(m.op_libraries) == 1 else 'ies'}",
                    f"{loads[m.name]} load(s) predicted"]
            _print(console, "[green]no findings:[/] ", 13, f"{m.name} ({'; '.join(what)})", 4)
    if verbosity > 0:
        for f in result.suppressed:
            where = relative(f.file, base)
            _print(console, "", 0, f"suppressed: {f.code} {f.level!s} {f.model or '(server)'}: "
                   f"{f'{where}: ' if where else ''}{f.message}", 4, "dim")
            if f.suppression is not None:
                by = relative(f.suppression.file, base) or "?"
                by += f":{f.suppression.line}" if f.suppression.line else ""
                reason = f": {f.suppression.reason}" if f.suppression.reason else " (no reason given)"
                _print(console, "    ", 4, f"by {by}{reason}", 8, "dim")
    if verbosity >= 0:
        for note in result.notes:
            _print(console, "", 0, f"note: {note}", 6, "dim")
    _summary(console, result, fail_on, exit_code)


def _container_name(result, base: str | None) -> str:
    """What the check ran against, as the user knows it: a profile by its file and the image it was made from
    (its skeleton's directory in customops' cache means nothing to anyone), a root by its path."""
    container = result.container
    if result.profile:
        image = f" of {container.image}" if container.image else ""
        return f"the profile {relative(result.profile, base)}{image}"
    return container.target.root if container.target else container.facts.source


def _concerns(f: Finding, model) -> bool:
    """A finding is about a model when it names it, or when its file or library file lies in the model's
    directory (a server finding about a preload the model ships, such as a CO401 on its op library)."""
    if f.model == model.name:
        return True
    root = os.path.abspath(model.path).rstrip("/") + "/"
    return any(path and os.path.abspath(path).startswith(root) for path in (f.file, f.artifact))


def summary_line(result, fail_on: Severity, exit_code: int) -> str:
    """The text report's last line, also written to standard error when every report went to a file, so that
    a CI log says what the run found."""
    c = counts(result.findings)
    return (f"{'FAIL' if exit_code else 'OK'} {c['error']} error(s), {c['warning']} warning(s), {c['info']} info; "
            f"{len(result.suppressed)} suppressed; failing at {fail_on} and above")


def _summary(console, result, fail_on: Severity, exit_code: int) -> None:
    verdict, rest = summary_line(result, fail_on, exit_code).split(" ", 1)
    console.print(f"[bold {'red' if exit_code else 'green'}]{verdict}[/] {markup(rest)}")


def _finding(console, f: Finding, base: str | None, style: dict, verbosity: int) -> None:
    where = relative(f.file, base)
    location = ":".join(str(p) for p in (where, f.line, f.column) if p) + ": " if where else ""
    if where and not f.line:
        location = f"{where}: "
    _print(console, f"[{style[f.level]}]{f.code} {f.level!s:<7}[/] ", 14, location + f.message, 14)
    if f.assumes:
        _print(console, "    [dim]found assuming:[/] ", 20, f.assumes, 8)
    if f.predicted:
        _print(console, "    [dim]runtime:[/] ", 13, f.predicted, 8)
    shown = f.evidence if verbosity > 0 else f.evidence[:EVIDENCE_SHOWN]
    for line in shown:
        _print(console, "    ", 4, line, 8, "dim")
    if len(shown) < len(f.evidence):
        _print(console, "    ", 4, f"... {len(f.evidence) - len(shown)} more evidence line(s) (--verbose shows them)",
               8, "dim")
    _print(console, "    [dim]fix:[/] ", 9, f.hint, 8)


def _on_terminal(console) -> bool:
    """Whether the report goes to a real terminal (--color always styles a pipe, but does not wrap it)."""
    try:
        return bool(console.file.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def _print(console, lead: str, lead_width: int, text: str, indent: int, style: str = "") -> None:
    """`lead` (markup taking `lead_width` columns), then `text`: on a terminal, wrapped to its width with a
    hanging indent of `indent` columns (customops.report.wrap); to a pipe or a file on one line."""
    lines = wrap(text, console.width, lead_width, indent) if _on_terminal(console) else [text]
    start, end = (f"[{style}]", "[/]") if style else ("", "")
    console.print(f"{lead}{start}{markup(lines[0])}{end}")
    for line in lines[1:]:
        console.print(f"{start}{markup(line)}{end}")


def _statistics(findings: list[Finding]) -> list[tuple[int, str, Severity]]:
    """(count, code, severity) per code, the most frequent first, as `ruff --statistics` orders them."""
    tally: dict[str, int] = defaultdict(int)
    level: dict[str, Severity] = {}
    for f in findings:
        tally[f.code] += 1
        level[f.code] = max(level.get(f.code, f.level), f.level)
    return sorted(((n, code, level[code]) for code, n in tally.items()), key=lambda t: (-t[0], t[1]))


def _facts(facts) -> list[str]:
    """The container facts the check used, one line each (--verbose)."""
    lines = [f"source {facts.source}"]
    if facts.backends:
        lines.append("backends " + ", ".join(facts.backends))
    if facts.absent_backends:
        lines.append("absent backends " + ", ".join(facts.absent_backends))
    versions = [value if value.startswith(label) else f"{label} {value}" for label, value in (
        ("TensorRT", facts.tensorrt), ("ONNX Runtime", facts.onnxruntime), ("TensorFlow", facts.tensorflow),
        ("PyTorch", facts.pytorch), ("CUDA", facts.cuda), ("GLIBC", facts.glibc), ("GLIBCXX", facts.glibcxx),
        ("CXXABI", facts.cxxabi)) if value]
    if versions:
        lines.append(", ".join(versions))
    if facts.missing:
        lines.append("not checkable without the container's files: " + ", ".join(facts.missing))
    return lines
