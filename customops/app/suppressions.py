"""Which findings a check reports, the way ruff users expect: code selection and suppressions.

Selection (`--select`/`--ignore`, `[check] select` and the code strings of `[check] ignore`): codes or
prefixes (`CO3`: every CO3xx; `CO30`: CO300-CO309). A code is reported when the most specific selector
matching it is a select (at equal specificity, ignore wins); a finding not selected is not reported at all,
and is not counted as suppressed. `--select` replaces the manifest's select, `--ignore` adds to its ignores.

Suppressions: a table in `[check] ignore` (code, optional library and symbol globs, optional reason), and
comments in a model's config.pbtxt: `# customops: ignore[CO104,CO105]` suppresses those codes of the
findings that point at that line of that file, `# customops: ignore-file[CO201]` anywhere in the file every
finding of those codes that points at the file. Suppressed findings are counted and listed (`-v`, JSON).

A suppression that suppresses nothing is reported as CO107 (as ruff's RUF100 reports an unused noqa),
only where the run could have produced the code it names: never when --load-model checks a subset of the
models, only the CO1xx codes when the container's libraries were not modelled (a profile-less release, no
host program), never CO408 without the container's own files, never the --probe codes without --probe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from customops import safeio
from customops.codes import CODES as CODE_TABLE
from customops.codes import Code
from customops.comments import uncommented
from customops.emitters import emits
from customops.errors import InputError
from customops.findings import Finding, SuppressedBy, Suppression, amended, sort_key, suppressed
from customops.memo import once
from customops.selection import selected
from customops.textenum import TextEnum

if TYPE_CHECKING:
    from customops.triton.manifest import Ignore, Manifest
    from customops.triton.repository import Model

UNUSED = Code.CO107
PROBE_ONLY = frozenset({Code.CO409, Code.CO410, Code.CO411, Code.CO507})  # produced only by --probe
NEEDS_FILES = frozenset({Code.CO408})  # needs the container's own files (a root), not a profile's skeleton
DIRECTIVE = re.compile(r"customops:\s*(?P<kind>ignore-file|ignore)\s*\[(?P<codes>[^\]]*)\](?P<rest>.*)")
SHOWN = 120  # the most of a comment a CO107 message quotes


# -- selection -----------------------------------------------------------------------------------------


def with_options(manifest: Manifest, select: tuple[str, ...] | None, ignore: tuple[str, ...]) -> Manifest:
    """The command line over the manifest: --select replaces its select, --ignore adds to its ignores."""
    return replace(manifest, select=manifest.select if select is None else select,
                   ignore_codes=(*manifest.ignore_codes, *ignore))


# -- where things are written ----------------------------------------------------------------------------


class DirectiveKind(TextEnum):
    """What a comment suppresses: the findings on its line, or those of its whole file."""

    LINE = "line"  # `# customops: ignore[...]`
    FILE = "file"  # `# customops: ignore-file[...]`


@dataclass(frozen=True)
class Directive:
    """A `# customops: ignore[...]` or `ignore-file[...]` comment; `problem`: why a comment addressed to
    customops is no suppression."""

    file: str
    line: int
    column: int  # of its `#`
    kind: DirectiveKind
    codes: tuple[str, ...]
    reason: str | None = None
    problem: str | None = None
    text: str = ""


def parse_directives(text: str, path: str) -> list[Directive]:
    directives = []
    for number, line in enumerate(text.split("\n"), 1):
        before, comment = uncommented(line)
        column = len(before) + 1
        if comment is None or not comment.strip().startswith("customops:"):
            continue
        shown = "# " + comment.strip()
        shown = shown if len(shown) <= SHOWN else shown[:SHOWN - 3] + "..."
        match = DIRECTIVE.match(comment.strip())
        if match is None:
            directives.append(Directive(path, number, column, DirectiveKind.LINE, (), problem="is not `# customops: "
                                        "ignore[CODES]` or `# customops: ignore-file[CODES]`", text=shown))
            continue
        codes = tuple(c.strip() for c in match["codes"].split(",") if c.strip())
        reason = match["rest"].strip().lstrip("-:—").strip() or None
        kind = DirectiveKind.FILE if match["kind"] == "ignore-file" else DirectiveKind.LINE
        problem = "names no code" if not codes else None
        directives.append(Directive(path, number, column, kind, codes, reason, problem, shown))
    return directives


def read_directives(models: list[Model]) -> list[Directive]:
    """The directives in the models' config files, read as the repository reader reads them (a regular file
    inside the repository, at most safeio.CONFIG_LIMIT); an unreadable one has none (it is a CO101)."""
    return [d for m in models if m.config_path
            for d in once(("directives", m.config_path, m.path), partial(_directives_of, m.config_path, m.path))]


def _directives_of(config_path: str, model_dir: str) -> tuple[Directive, ...]:
    from customops.triton.repository import read_inside

    try:
        text = read_inside(config_path, model_dir, safeio.CONFIG_LIMIT).decode("utf-8-sig")
    except (InputError, UnicodeDecodeError):
        return ()
    return tuple(parse_directives(text, os.path.abspath(config_path)))


# -- applying them -----------------------------------------------------------------------------------------


def producible(*, limited: bool, predicted: bool, own_files: bool, probed: bool) -> Callable[[str], bool]:
    """Whether a run could have produced a code: what decides whether a suppression naming it is unused.
    `own_files`: the container's own files were read (a root, not a profile's skeleton)."""
    def could(code: str) -> bool:
        if limited:
            return False
        if not predicted:
            return code.startswith("CO1")
        if code in NEEDS_FILES and not own_files:
            return False
        return probed or code not in PROBE_ONLY
    return could


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and os.path.abspath(a) == os.path.abspath(b)


def apply(findings: list[Finding], manifest: Manifest, models: list[Model],
          could: Callable[[str], bool]) -> tuple[list[Finding], list[Finding]]:
    """(reported, suppressed): the selected findings, split by the suppressions, plus a CO107 for each
    suppression that suppressed nothing where `could` says its code could have been found."""
    def chosen(code: str) -> bool:
        return selected(code, manifest.select, manifest.ignore_codes)

    findings = [f for f in findings if chosen(f.code)]
    directives = read_directives(models)
    used: set[tuple[int, str]] = set()  # (directive index, code)
    used_entries: set[int] = set()
    kept: list[Finding] = []
    dropped: list[Finding] = []
    for f in findings:
        how: Suppression | None = None
        for kind in (DirectiveKind.LINE, DirectiveKind.FILE):
            for i, d in enumerate(directives):
                here = kind is DirectiveKind.FILE or f.line == d.line
                if d.kind is kind and f.code in d.codes and _same(f.file, d.file) and here:
                    used.add((i, f.code))
                    how = how or Suppression(SuppressedBy.CONFIG, d.file, d.line, d.reason)
        for i, entry in enumerate(manifest.ignore):
            if suppressed(f, (entry,)):
                used_entries.add(i)
                how = how or Suppression(SuppressedBy.MANIFEST, manifest.path, entry.line, entry.reason)
        (dropped if how else kept).append(amended(f, suppression=how) if how else f)
    unused = [u for u in unused_suppressions(manifest, used_entries, directives, used, findings, models, chosen, could)
              if chosen(u.code)]
    for u in unused:
        entry_index = next((i for i, e in enumerate(manifest.ignore) if suppressed(u, (e,))), None)
        if entry_index is None:
            kept.append(u)
        else:
            entry = manifest.ignore[entry_index]
            dropped.append(amended(u, suppression=Suppression(SuppressedBy.MANIFEST, manifest.path, entry.line,
                                                              entry.reason)))
    return sorted(kept, key=sort_key), sorted(dropped, key=sort_key)


@emits(Code.CO107)
def unused_suppressions(manifest: Manifest, used_entries: set[int], directives: list[Directive],
                        used: set[tuple[int, str]], findings: list[Finding], models: list[Model],
                        chosen: Callable[[str], bool], could: Callable[[str], bool]) -> list[Finding]:
    """The manifest's ignore entries and the config comments that suppressed nothing though the run could have
    found what they name (`could`), and the comments that are malformed or name no code."""
    return (_unused_entries(manifest, used_entries, chosen, could)
            + _unused_directives(directives, used, findings, models, chosen, could))


def _described(entry: Ignore) -> str:
    globs = [f"{k} {v!r}" for k, v in (("library", entry.library), ("symbol", entry.symbol)) if v]
    return f"[check] ignore entry for {entry.code}" + (f" ({', '.join(globs)})" if globs else "")


def _unused_entries(manifest: Manifest, used: set[int], chosen: Callable[[str], bool],
                    could: Callable[[str], bool]) -> list[Finding]:
    return [Finding(UNUSED, f"{_described(e)} matches no finding", file=manifest.path, line=e.line, column=e.column,
                    evidence=(f"reason: {e.reason}",) if e.reason else ())
            for i, e in enumerate(manifest.ignore)
            if i not in used and e.code != UNUSED and chosen(e.code) and could(e.code)]


def _unused_directives(directives: list[Directive], used: set[tuple[int, str]], findings: list[Finding],
                       models: list[Model], chosen: Callable[[str], bool],
                       could: Callable[[str], bool]) -> list[Finding]:
    owner = {os.path.abspath(m.config_path): m for m in models if m.config_path}
    unused = []
    for i, d in enumerate(directives):
        model = owner.get(d.file)
        name = model.name if model else None
        if d.problem is not None:
            unused.append(Finding(UNUSED, f"`{d.text}` {d.problem}: it suppresses nothing", model=name,
                                  file=d.file, line=d.line, column=d.column))
            continue
        for code in d.codes:
            if code not in CODE_TABLE:
                unused.append(Finding(UNUSED, f"`{d.text}` names {code!r}, which is not a customops code",
                                      model=name, file=d.file, line=d.line, column=d.column))
            elif (i, code) not in used and code != UNUSED and chosen(code) and could(code):
                where = f"line {d.line} of this file" if d.kind is DirectiveKind.LINE else "this file"
                unused.append(Finding(UNUSED, f"`{d.text}`: no {code} finding points at {where}",
                                      model=name, file=d.file, line=d.line, column=d.column,
                                      evidence=_elsewhere(code, d, findings, model)))
    return unused


def _elsewhere(code: str, d: Directive, findings: list[Finding], model: Model | None) -> tuple[str, ...]:
    """Where the findings of `code` that the comment may have been meant for point instead."""
    if model is None:
        return ()
    base = os.path.dirname(os.path.abspath(model.path))
    mine = [f for f in findings if f.code == code and (f.model == model.name or _same(f.file, d.file))]
    if d.kind is DirectiveKind.LINE and any(_same(f.file, d.file) and f.line is None for f in mine):
        return (f"{code} findings about this file carry no line: `# customops: ignore-file[{code}]` suppresses them",)
    other = sorted({os.path.relpath(f.file, base) if os.path.abspath(f.file).startswith(base + "/") else f.file
                    for f in mine if f.file and not _same(f.file, d.file)})
    if other:
        return (f"{code} findings of model '{model.name}' point at {', '.join(other)}: suppress them with a "
                f"[check] ignore entry in customops.toml (library = the file)",)
    lines = sorted({f.line for f in mine if _same(f.file, d.file) and f.line})
    if lines:
        return (f"{code} findings point at line(s) {', '.join(map(str, lines))} of this file",)
    return ()
