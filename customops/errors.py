"""Errors that end a command with a one-line message and exit status 2 (bad input or usage)."""

from __future__ import annotations


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
    that is not UTF-8 (read as a lone surrogate) as `\\xNN`, as backslashreplace writes it."""
    if path.isprintable():
        return path
    return "".join(c if c.isprintable() else f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                   else repr(c)[1:-1] for c in path)
