"""Finding codes selected by codes or prefixes, the way ruff selects rules: `CO3` is every CO3xx, `CO30`
CO300-CO309; the most specific selector matching a code decides (a tie goes to ignore). Used by the
command line (--select/--ignore) and the manifest ([check] select, the code strings of [check] ignore)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from customops.codes import CODES

SELECTOR = re.compile(r"CO[0-9]{0,3}")


def parse_selectors(values: Iterable[str], where: str) -> tuple[str, ...]:
    """Codes and prefixes from comma-separated values (`CO3,CO401`); ValueError naming an unknown one."""
    selectors = []
    for value in values:
        for piece in (p.strip() for p in value.split(",")):
            if not piece:
                continue
            if not SELECTOR.fullmatch(piece) or not any(code.startswith(piece) for code in CODES):
                raise ValueError(f"{where}: unknown code or prefix {piece!r} (customops explain lists the codes)")
            selectors.append(piece)
    return tuple(selectors)


def selected(code: str, select: tuple[str, ...] | None, ignore: tuple[str, ...]) -> bool:
    """As ruff: the longest selector matching the code decides; a tie goes to ignore. No select: all."""
    chosen = max((len(s) for s in (select if select is not None else ("CO",)) if code.startswith(s)), default=-1)
    dropped = max((len(s) for s in ignore if code.startswith(s)), default=-1)
    return chosen > dropped
