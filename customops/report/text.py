"""The text report of a check, for people (rich); see customops.report.check for the others."""

from __future__ import annotations

import os
from collections import defaultdict

from customops.codes import CODES, Code, Severity
from customops.findings import Finding
from customops.frameworks import VERSIONED
from customops.report.escape import console as new_console
from customops.report.escape import markup
from customops.report.summary import relative, summary_line
from customops.report.wrap import heading, wrap
from customops.triton.python_stub import StubRun

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
        stubs = {run.stub.model: run for run in getattr(result, "stubs", ())}
        for m in untouched:
            what = [f"backend {m.backend or '?'}", *([f"platform {m.platform}"] if m.platform else []),
                    f"version(s) {', '.join(map(str, m.versions)) or 'none'}",
                    f"{len(m.op_libraries)} op librar{'y' if len(m.op_libraries) == 1 else 'ies'}",
                    f"{loads[m.name]} load(s) predicted", *([_stub(stubs[m.name])] if m.name in stubs else [])]
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


def _stub(run: StubRun) -> str:
    """What was modelled of a model's stub process: the stub, its environment, its Python, the modules loaded."""
    stub = run.stub
    env = f" with {stub.environment.path}" if stub.environment else ""
    python = f", Python {run.python.version}" if run.python else ""
    return f"stub {stub.program}{env}{python}, {len(run.outcomes)} extension module(s) loaded in it"


def _container_name(result, base: str | None) -> str:
    """What the check ran against, as the user knows it: a profile by its file and the image it was made from
    (its skeleton's directory in customops' cache means nothing to anyone), a root by its path."""
    container = result.container
    if result.profile:
        image = f" of {container.image}" if container.image else ""
        return f"the profile {relative(result.profile, base)}{image}"
    if container.image:
        return f"the image {container.image}"
    return container.target.root if container.target else container.facts.known_from.value


def _concerns(f: Finding, model) -> bool:
    """A finding is about a model when it names it, or when its file or library file lies in the model's
    directory (a server finding about a preload the model ships, such as a CO401 on its op library)."""
    if f.model == model.name:
        return True
    root = os.path.abspath(model.path).rstrip("/") + "/"
    return any(path and os.path.abspath(path).startswith(root) for path in (f.file, f.artifact))


def _summary(console, result, fail_on: Severity, exit_code: int) -> None:
    verdict, rest = summary_line(result, fail_on, exit_code).split(" ", 1)
    scope, counted = rest.split(") ", 1) if rest.startswith("(") else ("", rest)
    scope = f"[bold yellow]{markup(scope)})[/] " if scope else ""
    console.print(f"[bold {'red' if exit_code else 'green'}]{verdict}[/] {scope}{markup(counted)}")


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


def _statistics(findings: list[Finding]) -> list[tuple[int, Code, Severity]]:
    """(count, code, severity) per code, the most frequent first, as `ruff --statistics` orders them."""
    tally: dict[Code, int] = defaultdict(int)
    level: dict[Code, Severity] = {}
    for f in findings:
        tally[f.code] += 1
        level[f.code] = max(level.get(f.code, f.level), f.level)
    return sorted(((n, code, level[code]) for code, n in tally.items()), key=lambda t: (-t[0], t[1]))


def _facts(facts) -> list[str]:
    """The container facts the check used, one line each (--verbose)."""
    lines = [f"source {facts.known_from.value}"]
    if facts.backends:
        lines.append("backends " + ", ".join(facts.backends))
    if facts.absent_backends:
        lines.append("absent backends " + ", ".join(facts.absent_backends))
    versions = [value if value.startswith(label) else f"{label} {value}" for label, value in (
        *((f.label, facts.version_of(f.backend)) for f in VERSIONED), ("CUDA", facts.cuda), ("GLIBC", facts.glibc),
        ("GLIBCXX", facts.glibcxx), ("CXXABI", facts.cxxabi)) if value]
    if versions:
        lines.append(", ".join(versions))
    if facts.missing:
        lines.append("not checkable without the container's files: " + ", ".join(facts.missing))
    return lines
