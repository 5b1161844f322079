"""Render a linker Prediction: load order, search traces, failures, interpositions."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console

from customops import schemas
from customops.elf.demangle import demangle
from customops.linker.prediction import Prediction
from customops.linker.target import LinkerTarget
from customops.linker.types import Binding, Definition
from customops.report.escape import console as new_console
from customops.report.escape import markup

RESOLVE_SCHEMA = schemas.RESOLVE


def _definition(d: Definition | None) -> dict | None:
    if d is None:
        return None
    return {"object": d.object, "symbol": d.symbol.decode("utf-8", "surrogateescape"), "version": d.version,
            "binding": d.binding, "type": d.type, "visibility": d.visibility, "size": d.size}


def _binding(b: Binding) -> dict:
    return {
        "referrer": b.referrer, "symbol": b.symbol.decode("utf-8", "surrogateescape"), "demangled": demangle(b.symbol),
        "version": b.version, "relocation": b.relocation, "weak_reference": b.weak_reference,
        "winner": _definition(b.winner), "losers": [_definition(d) for d in b.losers], "reason": b.reason,
        "error": b.error,
    }


def prediction_record(prediction: Prediction, target: LinkerTarget) -> dict:
    return {
        "schema": RESOLVE_SCHEMA,
        "ok": prediction.ok,
        "root": target.root,
        "assumptions": list(target.assumptions),
        "exit_message": prediction.exit_message,
        "global_scope": prediction.global_scope,
        "objects": [{"name": o.name, "soname": o.soname, "loaded_by": o.loaded_by, "step": o.step}
                    for o in prediction.objects],
        "steps": [
            {
                "kind": o.kind, "request": o.request, "status": o.status, "message": o.message,
                "warnings": list(o.warnings), "loaded": list(o.loaded),
                "searches": [{"name": s.name, "requested_by": s.requested_by, "found": s.found, "error": s.error,
                              "attempts": [{"source": a.source, "path": a.path, "result": a.result}
                                           for a in s.attempts]} for s in o.searches],
                "unresolved": [_binding(b) for b in o.unresolved],
                "lazy_failures": [_binding(b) for b in o.lazy_failures],
                "version_errors": list(o.version_errors),
                "calls": [{"symbol": c.symbol, "status": c.status, "definition": _definition(c.definition)}
                          for c in o.calls],
            }
            for o in prediction.outcomes
        ],
        "interpositions": [_binding(b) for b in prediction.interpositions()],
    }


STATUS_STYLE = {"loaded": "green", "failed": "red", "fatal": "bold red", "crash": "bold red", "ignored": "yellow"}


def _is_system(path: str, target: LinkerTarget) -> bool:
    return any(path.startswith(d.rstrip("/") + "/") for d in target.system_dirs) or path.startswith("/lib64/")


def notable_interpositions(prediction: Prediction, target: LinkerTarget) -> Iterator[Binding]:
    """Interpositions worth a user's attention: glibc's own libraries overriding one another are by design.
    Lazily: the text report shows the first 20 (a framework library has thousands, and making each one's
    record cost a third of a resolve)."""
    return (b for b in prediction.interpositions()
            if not b.reason.startswith("copy relocation")
            and not (b.winner and _is_system(b.winner.object, target)
                     and all(_is_system(d.object, target) for d in b.losers)))


def _collapse(attempts) -> list[tuple[str, str, str, int]]:
    """One line per search directory: the plain candidate, plus how many hwcaps subdirectories were tried."""
    rows: list[tuple[str, str, str, int]] = []
    pending = 0
    for a in attempts:
        if a.result != "found" and a.source != "ld.so.cache" and ("/glibc-hwcaps/" in a.path or "/tls/" in a.path
                                                                   or "/x86_64/" in a.path or "/haswell/" in a.path):
            pending += 1
            continue
        rows.append((a.path, a.source, a.result, pending))
        pending = 0
    return rows


def render_prediction(prediction: Prediction, target: LinkerTarget, console: Console | None = None,
                      notes: list[str] | tuple[str, ...] = ()) -> None:
    """`notes`: what the command chose for the user (the host program it assumed), before the assumptions."""
    console = console or new_console()
    for note in notes:
        console.print(f"[dim]note: {markup(note)}[/]")
    for note in target.assumptions:
        console.print(f"[dim]assumed: {markup(note)}[/]")
    for outcome in prediction.outcomes:
        style = STATUS_STYLE.get(outcome.status, "")
        console.print(f"[{style}]{outcome.status:>7}[/] {outcome.kind} {markup(outcome.request)}")
        if outcome.message:
            console.print(f"         [{style}]{markup(outcome.message)}[/]")
        for warning in outcome.warnings:
            if warning != outcome.message:
                console.print(f"         [yellow]{markup(warning)}[/]")
        for search in outcome.searches:
            if search.found is None:
                console.print(f"         {markup(search.name)} (needed by {markup(search.requested_by)}): "
                              "not found; paths considered, in order:")
                for i, (path, source, result, subdirs) in enumerate(_collapse(search.attempts), 1):
                    extra = f", and {subdirs} hwcaps subdirectories before it" if subdirs else ""
                    console.print(f"           {i}. {markup(path)}  "
                                  f"[dim]({markup(source)}: {markup(result)}{extra})[/]")
        for binding in outcome.unresolved:
            console.print(f"         [red]undefined[/] {markup(demangle(binding.symbol))}"
                          f"{', version ' + markup(binding.version) if binding.version else ''} "
                          f"(referenced by {markup(binding.referrer)}, needed at load)")
        for binding in outcome.lazy_failures:
            console.print(f"         [yellow]undefined[/] {markup(demangle(binding.symbol))} "
                          f"(referenced by {markup(binding.referrer)}; fails at its first call, exit 127)")
    if prediction.exit_message:
        console.print(f"[bold red]the process dies:[/] {markup(prediction.exit_message)}")
    console.print(f"global scope: {markup(' '.join(prediction.global_scope))}")
    for shown, binding in enumerate(notable_interpositions(prediction, target)):
        if shown == 20:
            console.print("  ... (use --format json for all)")
            break
        losers = ", ".join(d.object for d in binding.losers)
        assert binding.winner is not None  # an interposition has a winner
        console.print(f"  interposed: {markup(demangle(binding.symbol))} -> {markup(binding.winner.object)} "
                      f"(over {markup(losers)}; referenced by {markup(binding.referrer)})")
