"""Writing the files users name (`--output`, `profile create -o`), which may lie in a pull request's checkout.

A symbolic link there is written through only when it leads to a stream (`/dev/stdout`, a pipe): one to
a file, or to nothing, is refused, since `report.sarif -> ~/.bashrc` committed by a pull request would
otherwise clobber (or create) a file of the CI user. A file that cannot be written (a missing directory,
a full disk: the error may come only when it is closed) is one line naming it, exit 2.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import TextIO

from customops.errors import InputError


def write_file(output: str, write: Callable[[TextIO], object]) -> None:
    """--output: UTF-8 whatever the locale (JUnit declares it); a file that cannot be written (a missing
    directory, a full disk: the error may come only when it is closed) is one line naming it, exit 2.
    A symbolic link there is written through only when it leads to a stream (`/dev/stdout`, a pipe): one
    to a file, or to nothing, is refused, since the checkout a report usually lands in is the pull
    request's, and `report.sarif -> ~/.bashrc` would clobber (or create) a file of the CI user."""
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if not (os.path.islink(output) and _stream(output)):
            reason = "a symbolic link, not written through (remove it, or name its target)" \
                if os.path.islink(output) else exc.strerror or str(exc)
            raise InputError(output, reason) from None
        try:
            fd = os.open(output, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as exc2:
            raise InputError(output, exc2.strerror or str(exc2)) from None
    try:
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            write(f)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None


def _stream(path: str) -> bool:
    """True when `path` leads to a character device, FIFO or socket (what `/dev/stdout` is)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
