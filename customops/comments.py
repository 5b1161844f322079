"""Comments in the line-oriented text formats customops reads (config.pbtxt, customops.toml): where a `#`
starts one, outside quoted strings. Their parsers give no positions, so suppressions are located here."""

from __future__ import annotations


def uncommented(line: str, literal: str = "") -> tuple[str, str | None]:
    """A line's text before its comment, and the comment after `#` (None without one): a `#` inside a
    quoted string ("...", '...') starts none. Backslash escapes in either, except the `literal` quote
    (TOML's '...')."""
    quote = None
    escaped = False
    for i, c in enumerate(line):
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = quote != literal
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return line[:i], line[i + 1:]
    return line, None
