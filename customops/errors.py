"""Errors that end a command with a one-line message and exit status 2 (bad input or usage)."""

from __future__ import annotations

import re

# Log commands that CI runners act on anywhere in a line of a job's log: GitHub's legacy `##[command]` (its
# `::command::` form only at a line's start, which printable's escaped line breaks already prevent) and Azure
# Pipelines' `##vso[command]`. Shown as `#\#[`: the same to a reader, nothing to a runner.
LOG_COMMAND = re.compile(r"##(?=\[|vso\[)", re.IGNORECASE)


class CustomopsError(Exception):
    """Bad input: the CLI prints `customops: <message>` and exits with status 2, never a traceback."""

    exit_code = 2


class InputError(CustomopsError):
    """A file or directory given to customops cannot be used; names the path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{printable(path)}: {reason}")
        self.path = path
        self.reason = reason


class ElfError(InputError):
    """A file is not a readable ELF object (non-ELF, truncated, malformed tables)."""


def printable(path: str) -> str:
    """A path as one line: control characters (a newline in a file name) are shown escaped, and a byte
    that is not UTF-8 (read as a lone surrogate) as `\\xNN`, as backslashreplace writes it; a CI runner's log
    command (LOG_COMMAND) is broken up."""
    if not path.isprintable():
        path = "".join(c if c.isprintable() else f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                       else repr(c)[1:-1] for c in path)
    return LOG_COMMAND.sub("#\\\\#", path) if "##" in path else path
