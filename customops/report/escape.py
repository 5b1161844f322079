"""Untrusted text on its way out. File names, model names and manifest values come from the repository, so
every report escapes them for where they go: a terminal (no escape sequence, no rich markup, one line),
XML (only the characters XML 1.0 allows), a GitHub workflow command (one command per line), JSON and SARIF
(valid UTF-8 for strict parsers).

One representation everywhere, the one `customops: <file>: <reason>` errors use: a byte of a file name that
is not UTF-8 (Python reads it as a lone surrogate, U+DC80-U+DCFF) is written as the text `\\xNN`, as Python's
backslashreplace writes it; a control character as Python writes it in a string literal (`\\n`, `\\x1b`).
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any, TextIO

from customops.errors import LOG_COMMAND, printable

if TYPE_CHECKING:
    from rich.console import Console

# XML 1.0 (section 2.2) allows tab, newline, carriage return and everything from U+0020 except the
# surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_XML_ATTRIBUTE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\t": "&#9;", "\n": "&#10;",
                                "\r": "&#13;"})
_SURROGATE = re.compile("[\ud800-\udfff]")


def unsurrogate(text: str) -> str:
    """Valid Unicode: a byte the file system gave that is not UTF-8 becomes the text `\\xNN`."""
    return text if text.isascii() else _SURROGATE.sub(lambda m: printable(m.group()), text)


def markup(text: object) -> str:
    """For rich's console.print: one printable line, its `[...]` markup escaped."""
    from rich.markup import escape

    return escape(printable(str(text)))


def console(file: TextIO | None = None, color: str = "auto") -> Console:
    """A console that interprets nothing it is given (no emoji codes such as `:smile:`, no highlighting of
    numbers and paths: only the report's own styles); report text goes through markup() before it reaches it.

    `color` (`--color`): "never" writes no escape sequence at all, whatever FORCE_COLOR says; "always"
    styles even a file or a pipe, even with NO_COLOR; "auto" styles a terminal (or what FORCE_COLOR or
    TTY_COMPATIBLE declare one) unless NO_COLOR is set to anything, and NO_COLOR removes every style, bold
    and dim included (rich alone would keep them)."""
    from rich.console import Console

    options: dict[str, Any] = {"file": file, "soft_wrap": True, "emoji": False, "highlight": False}
    if color == "never" or (color == "auto" and os.environ.get("NO_COLOR")):
        return Console(**options, color_system=None)
    if color == "always":
        forced = Console(**options, force_terminal=True, no_color=False)
        # a dumb or unknown TERM would leave rich without colours: the 16 standard ones work everywhere
        return forced if forced.color_system else Console(**options, force_terminal=True, no_color=False,
                                                          color_system="standard")
    return Console(**options)


def clean(value: Any) -> Any:
    """A JSON-ready value with every string valid Unicode (see unsurrogate), for parsers that reject lone
    surrogates; containers are copied, everything else returned as it is."""
    if isinstance(value, str):
        return unsurrogate(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    """JSON text that strict parsers accept: json.dumps writes a lone surrogate (a file name that is not
    UTF-8) as the escape `\\udcff`, which they reject, so such values are cleaned first."""
    text = json.dumps(value, indent=indent)
    text = json.dumps(clean(value), indent=indent) if "\\ud" in text else text
    # a '#' appears only inside strings: `#\u0023[` is the same value, and no log command (LOG_COMMAND)
    return LOG_COMMAND.sub("#\\\\u0023", text) if "##" in text else text


def xml(text: str, attribute: bool = False) -> str:
    """Text for an XML document: characters XML 1.0 forbids (most C0 controls, lone surrogates, U+FFFE/F)
    written visibly as `\\xNN`; markup characters (and in an attribute, whitespace a parser would
    normalise away) as references."""
    text = _NOT_XML.sub(lambda m: printable(m.group()), unsurrogate(text))
    text = text.translate(_XML_ATTRIBUTE if attribute else _XML_TEXT)
    return LOG_COMMAND.sub("#&#35;", text) if "##" in text else text  # the same text, and no log command


def github_data(text: str) -> str:
    """The message of a workflow command, kept on one line by GitHub's escapes: `%` as %25 and a line break
    as %0A (GitHub shows the line break); every other control character (a carriage return too) written
    visibly, as `\\r` or `\\x1b`, since GitHub's log renders escape sequences."""
    text = "\n".join(printable(line) for line in text.split("\n"))
    return text.replace("%", "%25").replace("\n", "%0A")


def github_property(text: str) -> str:
    """A property value (file=, title=): as github_data, and `:` and `,`, which end a value, escaped too."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")
