"""Render a linker Prediction: load order, search traces, failures, interpositions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from rich.console import Console
from rich.text import Text

from customops import schemas
from customops.elf.demangle import demangle
from customops.errors import printable
from customops.linker.prediction import Prediction
from customops.linker.target import LinkerTarget
from customops.linker.types import (
    AttemptResult,
    Binding,
    BindingReason,
    Definition,
    Search,
    SearchAttempt,
    StepKind,
    StepOutcome,
    StepStatus,
)
from customops.report.escape import console as new_console
from customops.report.escape import markup

RESOLVE_SCHEMA = schemas.RESOLVE


def _definition(d: Definition | None) -> dict | None:
    if d is None:
        return None
    return {"object": d.object, "symbol": d.symbol.decode("utf-8", "surrogateescape"), "version": d.version,
            "binding": str(d.binding), "type": str(d.type), "visibility": d.visibility.value, "size": d.size}


def _binding(b: Binding) -> dict:
    return {
        "referrer": b.referrer, "symbol": b.symbol.decode("utf-8", "surrogateescape"), "demangled": demangle(b.symbol),
        "version": b.version, "relocation": b.relocation.value, "weak_reference": b.weak_reference,
        "winner": _definition(b.winner), "losers": [_definition(d) for d in b.losers], "reason": b.reason.value,
        "error": b.error,
    }


def prediction_record(prediction: Prediction, target: LinkerTarget, symbols_bound: bool = True) -> dict:
    """`symbols_bound`: false for resolve --tree-only, whose steps load without their symbols bound."""
    return {
        "schema": RESOLVE_SCHEMA,
        "ok": prediction.ok,
        "symbols_bound": symbols_bound,
        "root": target.root,
        "assumptions": list(target.assumptions),
        "exit_message": prediction.exit_message,
        "global_scope": prediction.global_scope,
        "objects": [{"name": o.name, "soname": o.soname, "loaded_by": o.loaded_by, "step": o.step}
                    for o in prediction.objects],
        "steps": [
            {
                "kind": o.kind.value, "request": o.request, "status": o.status.value, "message": o.message,
                "warnings": list(o.warnings), "loaded": list(o.loaded),
                "searches": [{"name": s.name, "requested_by": s.requested_by, "found": s.found, "error": s.error,
                              "attempts": [{"source": a.search_list, "path": a.path, "result": a.text}
                                           for a in s.attempts]} for s in o.searches],
                "unresolved": [_binding(b) for b in o.unresolved],
                "lazy_failures": [_binding(b) for b in o.lazy_failures],
                "version_errors": list(o.version_errors),
                "calls": [{"symbol": c.symbol, "status": c.status.value, "definition": _definition(c.definition)}
                          for c in o.calls],
            }
            for o in prediction.outcomes
        ],
        "interpositions": [_binding(b) for b in prediction.interpositions()],
    }


MAX_INDENT = 16  # deeper rows of the load tree say their depth: a chain thousands deep stays readable
STATUS_STYLE = {StepStatus.LOADED: "green", StepStatus.FAILED: "red", StepStatus.FATAL: "bold red",
                StepStatus.CRASH: "bold red", StepStatus.IGNORED: "yellow"}


def _is_system(path: str, target: LinkerTarget) -> bool:
    return any(path.startswith(d.rstrip("/") + "/") for d in target.system_dirs) or path.startswith("/lib64/")


def notable_interpositions(prediction: Prediction, target: LinkerTarget) -> Iterator[Binding]:
    """Interpositions worth a user's attention: glibc's own libraries overriding one another are by design.
    Lazily: the text report shows the first 20 (a framework library has thousands, and making each one's
    record cost a third of a resolve)."""
    return (b for b in prediction.interpositions()
            if b.reason is not BindingReason.COPY_RELOCATION
            and not (b.winner and _is_system(b.winner.object, target)
                     and all(_is_system(d.object, target) for d in b.losers)))


INTERPRETER = "the program's interpreter"  # ld.so itself: PT_INTERP, loaded before any search


class TreeRow(NamedTuple):
    """One object a step loaded, below the object whose DT_NEEDED asked for it (libtree's view)."""

    depth: int
    needed_by: str  # l_name of the object that asked for it (the program's path for the program)
    name: str  # what was asked for: the DT_NEEDED or LD_PRELOAD entry
    path: str  # what ld.so loaded: its l_name
    found_by: str  # the search list that found it ("RUNPATH of ...", "ld.so.cache", ...), or how it was named


PRELOADED = "LD_PRELOAD"


def load_trees(prediction: Prediction) -> list[list[TreeRow]]:
    """Each step's load tree: every object the step loaded after its first (the request, or the program),
    depth first under the object that needed it, in load order among siblings (what libtree and lddtree
    show), with the search list that found it. The maps are built once for the whole prediction."""
    loaded_by = {o.name: o.loaded_by for o in prediction.objects}
    preloads = {o.loaded[0] for o in prediction.outcomes if o.kind is StepKind.PRELOAD and o.loaded}
    preload_searches = [s for o in prediction.outcomes if o.kind is StepKind.PRELOAD for s in o.searches]
    return [_load_tree(o, loaded_by, preloads, preload_searches if o.kind is StepKind.STARTUP else [])
            for o in prediction.outcomes]


def _load_tree(outcome: StepOutcome, loaded_by: dict[str, str | None], preloads: set[str],
               preload_searches: list[Search]) -> list[TreeRow]:
    """One step's tree, built over positions in its load order: a parent is always an earlier position (the
    latest of the name that needed the object, else the step's first), so even objects sharing a name (a
    hostile image can load a second copy of its program) make a finite tree."""
    loaded = outcome.loaded
    searched: dict[str, tuple[str, str]] = {}  # path -> (name asked for, search list): this step's searches
    for s in (*preload_searches, *outcome.searches):  # in the order they ran: the preloads first
        if s.found is not None and s.found not in searched:
            searched[s.found] = (s.name, next(a.search_list for a in reversed(s.attempts) if a.path == s.found))
    latest: dict[str | None, int] = {}
    children: dict[int, list[int]] = {}
    for at, name in enumerate(loaded):
        if at:
            children.setdefault(latest.get(loaded_by.get(name), 0), []).append(at)
        latest[name] = at
    rows: list[TreeRow] = []
    pending = [(0, child, 0) for child in reversed(children.get(0, []))]
    while pending:  # depth first without recursion: a DT_NEEDED chain may be thousands deep
        parent, at, depth = pending.pop()
        path = loaded[at]
        name, search_list = searched.get(path, (path, ""))
        if path in preloads:
            found_by = f"{PRELOADED}, found by {search_list}" if search_list else PRELOADED
        else:
            found_by = search_list or ("named by path" if loaded_by.get(path) else INTERPRETER)
        rows.append(TreeRow(depth, loaded[parent], name, path, found_by))
        pending.extend((at, child, depth + 1) for child in reversed(children.get(at, [])))
    return rows


def _tree_text(rows: list[TreeRow]) -> Text:
    """The rows as one Text, printed at once: rich's print of a line costs ~0.2 ms, the whole tree of a
    5,000-deep chain as much as the model's prediction of it. Plain text, no markup: names are only made
    printable."""
    text = Text()
    for row in rows:
        label = row.path if row.name == row.path else f"{row.name} => {row.path}"
        depth = f"[{row.depth}] " if row.depth > MAX_INDENT else ""
        text.append(f"         {'  ' * min(row.depth, MAX_INDENT)}{depth}{printable(label)}  ")
        text.append(f"({printable(row.found_by)})", style="dim")
        text.append("\n")
    return text


def _collapse(attempts: tuple[SearchAttempt, ...]) -> list[tuple[str, str, str, int]]:
    """One line per search directory: the plain candidate, plus how many hwcaps subdirectories were tried."""
    rows: list[tuple[str, str, str, int]] = []
    pending = 0
    for a in attempts:
        if a.result is not AttemptResult.FOUND and a.search_list != "ld.so.cache" and (
                "/glibc-hwcaps/" in a.path or "/tls/" in a.path or "/x86_64/" in a.path or "/haswell/" in a.path):
            pending += 1
            continue
        rows.append((a.path, a.search_list, a.text, pending))
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
    for outcome, rows in zip(prediction.outcomes, load_trees(prediction), strict=True):
        style = STATUS_STYLE.get(outcome.status, "")
        console.print(f"[{style}]{outcome.status:>7}[/] {outcome.kind} {markup(outcome.request)}")
        if outcome.message:
            console.print(f"         [{style}]{markup(outcome.message)}[/]")
        for warning in outcome.warnings:
            if warning != outcome.message:
                console.print(f"         [yellow]{markup(warning)}[/]")
        if rows:
            console.print(_tree_text(rows), end="")
        for search in outcome.searches:
            if search.found is None:
                console.print(f"         {markup(search.name)} (needed by {markup(search.requested_by)}): "
                              "not found; paths considered, in order:")
                for i, (path, search_list, result, subdirs) in enumerate(_collapse(search.attempts), 1):
                    extra = f", and {subdirs} hwcaps subdirectories before it" if subdirs else ""
                    console.print(f"           {i}. {markup(path)}  "
                                  f"[dim]({markup(search_list)}: {markup(result)}{extra})[/]")
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
