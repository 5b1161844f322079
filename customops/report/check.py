"""Render a CheckResult: json, sarif, github, gitlab (text: customops.report.text, junit: customops.report.junit;
customops.report.formats puts each format behind one signature, with its exit-2 report). Reports only render.

Everything a report shows from the repository is untrusted (see customops.report.escape): JSON and SARIF
carry names exactly, except that a byte that is not UTF-8 becomes the text `\\xNN`, and SARIF's URIs
percent-encode the bytes of the path (`%FF`); JUnit and the text report show control characters escaped
(`\\x1b`, `\\n`), GitHub annotations too except line breaks (%0A, which GitHub decodes), so no name can end
a line, a command or an XML document, or reach a terminal as an escape sequence or rich markup.
"""

from __future__ import annotations

import hashlib
import os

from customops import PROJECT_URL, __version__, schemas
from customops.cachedir import key_bytes
from customops.codes import CODES, Code, Severity, docs_url, help_markdown
from customops.findings import Finding, SuppressedBy, model_of
from customops.probe.groups import ProbedGroup
from customops.report import related
from customops.report.escape import dumps, github_data, github_property
from customops.report.summary import CONFIGS_ONLY, NOT_MODELLED, counts, relative, scope
from customops.report.text import _statistics, render_text  # noqa: F401 (render_text: imported from here)

CHECK_SCHEMA = schemas.CHECK
SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


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
            "assumes": f.assumes, "artifact": relative(f.artifact, base), "related": related.records(f, base)}


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
                    "exit_code": exit_code, "models": len(result.models), "scope": scope(result)},
        "manifest": relative(result.manifest, base),
        "profile": relative(result.profile, base),
        "container": {"source": facts.known_from.value,
                      "root": result.container.target.root if result.container.target else None,
                      "image": result.container.image, "facts": facts.record()},
        "models": [{"name": m.name, "backend": m.backend, "platform": m.platform, "versions": list(m.versions),
                    "config": relative(m.config_path, base), "op_libraries": list(m.op_libraries)}
                   for m in result.models],
        "plan": {"ld_preload": plan.ld_preload, "ld_library_path": list(plan.library_path),
                 "server_args": list(plan.server_args),
                 "steps": [{"path": s.path, "source": relative(s.host_path, base), "loader": s.loader.value,
                            "purpose": s.purpose.value, "preload": s.preload, "model": s.model,
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
    return None if s is None else {"source": s.suppressed_by.value, "file": relative(s.file, base), "line": s.line,
                                   "reason": s.reason}


def to_sarif(result, base: str | None) -> str:
    """SARIF 2.1.0 as code scanning takes it (the SARIF Multitool's GitHub rules pass: GH1001-GH1007,
    GH1011-GH1018, GH2012). Suppressed findings are results with their `suppressions` (code scanning shows
    them as dismissed); every result has a location in the checkout (`location`) and a `partialFingerprints`
    entry that stays the same when lines move."""
    used = sorted({f.code for f in (*result.findings, *result.suppressed)})
    results = [sarif_result(f, used, result, base) for f in (*result.findings, *result.suppressed)]
    return sarif_document(used, results, base, _sarif_scope(result))


def sarif_document(used: list[Code], results: list[dict], base: str | None, run: dict) -> str:
    """One SARIF run of customops: the rules of the codes `used`, the results, and the run's own `run` keys."""
    rules = [{"id": code, "name": CODES[code].title,
              "shortDescription": {"text": CODES[code].title},
              "fullDescription": {"text": CODES[code].what},
              "help": {"text": f"{CODES[code].why}\nFix: {CODES[code].fix}", "markdown": help_markdown(code)},
              "helpUri": docs_url(code),
              "defaultConfiguration": {"level": SARIF_LEVEL[CODES[code].severity]}} for code in used]
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "customops", "version": __version__, "semanticVersion": __version__,
                                      "rules": rules, "informationUri": PROJECT_URL}},
                  "originalUriBaseIds": {"%SRCROOT%": {"uri": _uri(base)}} if base else {},
                  **run, "results": results}],
    }
    return dumps(sarif, indent=2)


def _sarif_scope(result) -> dict:
    """What the run checked, in the run's `properties` (`scope`: full | configs only), and where it checked the
    configs only also as a notification of its invocation (GitHub reads neither: the job log's summary line
    says it there)."""
    run: dict = {"properties": {"scope": scope(result)}}
    if scope(result) != "full":
        run["invocations"] = [{"executionSuccessful": True, "toolExecutionNotifications": [
            {"level": "warning", "message": {"text": f"{CONFIGS_ONLY}: {NOT_MODELLED}"}}]}]
    return run


def sarif_result(f: Finding, used: list[Code], result, base: str | None) -> dict:
    entry: dict = {"ruleId": f.code, "ruleIndex": used.index(f.code), "level": SARIF_LEVEL[f.level],
                   "message": {"text": f.stated + (f"\nPredicted: {f.predicted}" if f.predicted else "")}}
    path, line, column = location(f, result, base)
    region = {"startLine": line, **({"startColumn": column} if column else {})}
    entry["locations"] = [{"physicalLocation": {"artifactLocation": _artifact(path), "region": region}}]
    artifact = _in_checkout(f.artifact, base)  # one outside the checkout is no file code scanning can show
    others = [{"id": 1, "physicalLocation": {"artifactLocation": _artifact(artifact)},
               "message": {"text": "the library"}}] if artifact else []  # where `locations` is the text naming it
    others += related.sarif_locations(f, base, _artifact, len(others) + 1)  # a collision's other libraries
    if others:
        entry["relatedLocations"] = others
    entry["partialFingerprints"] = {"customops/v1": _fingerprint(f, base)}
    if f.suppression is not None:
        kind = "inSource" if f.suppression.suppressed_by is SuppressedBy.CONFIG else "external"
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
    return dumps([gitlab_issue(f, result, base) for f in result.findings], indent=2)


def gitlab_issue(f: Finding, result, base: str | None, lead: str = "") -> dict:
    """One finding as a Code Quality issue; `lead` opens its description and joins its fingerprint (the upgrade
    matrix's "Triton 25.08, 25.10: ", so that each set of targets is an issue of its own)."""
    path, line, _ = location(f, result, base)
    return {"description": lead + f.stated + related.sentence(f, base)
            + (f" | predicted: {f.predicted}" if f.predicted else ""),
            "check_name": f.code, "fingerprint": _fingerprint(f, base, lead), "severity": GITLAB_SEVERITY[f.level],
            "location": {"path": path, "lines": {"begin": line}}}


def _fingerprint(f: Finding, base: str | None, lead: str = "") -> str:
    """The same for one finding wherever its lines move: code, model, library, symbol and path (and `lead`)."""
    identity = "\0".join(v or "" for v in (f.code, f.model, f.library, f.symbol, relative(f.file, base),
                                            relative(f.artifact, base)))
    identity += f"\0{lead}" if lead else ""
    return hashlib.sha256(key_bytes(identity)).hexdigest()  # two names that are not UTF-8 stay two alerts


def _uri(base: str) -> str:
    from urllib.parse import quote

    return "file://" + quote(os.fsencode(os.path.abspath(base).rstrip("/") + "/"))


def to_github(result, base: str | None) -> str:
    """One workflow command per line: GitHub ends a command at a line break, its properties at `,` and
    `::`, so values are escaped by its rules (github_property, github_data)."""
    lines = [] if scope(result) == "full" else [f"::notice title=customops::{CONFIGS_ONLY}: {NOT_MODELLED}"]
    lines += [github_line(f, result, base) for f in result.findings]
    return "\n".join(lines) + ("\n" if lines else "")


GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def github_line(f: Finding, result, base: str | None, lead: str = "") -> str:
    """One finding as a workflow command; `lead` opens its message (the upgrade matrix's targets)."""
    path, line, column = location(f, result, base)  # a file of the checkout, as SARIF's
    props = [f"file={github_property(path)}", f"line={line}", *([f"col={column}"] if column else [])]
    props = [*(props if path != "." else []), f"title={github_property(f.code)}"]
    message = github_data(lead + f.stated + related.sentence(f, base)
                          + (f" | predicted: {f.predicted}" if f.predicted else ""))
    return f"::{GITHUB_LEVEL[f.level]} {','.join(props)}::{message}"
