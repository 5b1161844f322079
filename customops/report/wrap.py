"""Line wrapping of the text report on a terminal: at spaces, with a hanging indent, so that a finding
stays readable at 80 columns instead of being cut mid-word by the terminal.

A word longer than a line (a path, a mangled symbol) is broken after a `/`, `,`, `:` or `)` where one lies
in the last two thirds of the line, else at the line's end; every continuation line starts with the indent,
so a cut is always visible as one. Reports to a pipe or a file are not wrapped (one finding per line is what
grep and CI logs want).
"""

from __future__ import annotations

BREAK_AFTER = "/,:)"


def wrap(text: str, width: int, first: int, indent: int) -> list[str]:
    """`text` as lines of at most `width` columns: the first line has `first` columns already taken (the
    prefix printed before it), the others start with `indent` spaces (included in the lines returned)."""
    lines: list[str] = []
    current = ""
    available = max(width - first, 1)
    for word in text.split(" "):
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= available or (not current and len(word) <= available):
            current = candidate
            continue
        if current:
            lines.append(current)
            current = ""
            available = max(width - indent, 1)
        while len(word) > available:
            cut = _cut(word, available)
            lines.append(word[:cut])
            word = word[cut:]
            available = max(width - indent, 1)
        current = word
    lines.append(current)
    return [lines[0], *(" " * indent + line for line in lines[1:])]


def _cut(word: str, available: int) -> int:
    """Where to break a word too long for the line: after the last separator in its last two thirds."""
    for position in range(available, max(available // 3, 1), -1):
        if word[position - 1] in BREAK_AFTER:
            return position
    return available


def heading(console, title: str) -> None:
    """A rule across the console with `title` (rich markup) in it, or, when the title would not fit and a
    rule would truncate it (a long path), the title on a line of its own after a short rule: never cut."""
    from rich.text import Text

    if Text.from_markup(title).cell_len + 6 <= console.width:
        console.rule(title)
    else:
        console.print(f"── {title}")
