"""Writing the files users name (`--output`, `--sarif`, `profile create -o`), which usually lie in a pull
request's checkout, where anything may be a symbolic link.

- Standard output and standard error, however named (`-`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/1`,
  `/proc/self/fd/2`, or a symbolic link whose text is one of these), are written through the process's own
  descriptor, never by opening a path again: `/proc/self/fd/N` of any other N would reopen, for writing, a
  file customops has open for reading (the container's libc). A FIFO or a character device named directly
  (`/dev/null`) is written as a stream; through a symbolic link it is refused, as a FIFO outside the checkout
  would hang the run or, swapped for a file, receive the report.
- Every other path is opened one directory at a time, following symbolic links only above the working
  directory: from there down (where a checkout lies) a directory that is a link (`reports -> ../elsewhere`)
  is refused, and so is a last component that is one. A block device is refused however it is named.
- A regular file is replaced atomically: written beside itself and renamed over it, so a full disk or a
  killed run leaves no half report; remove_stale takes away the previous run's report where a run ends
  without a verdict.
A file that cannot be written is one line naming it, exit 2.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable
from typing import TextIO

from customops.errors import InputError, printable

STANDARD = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}  # and /dev/fd/1, /proc/self/fd/2, ...
DESCRIPTOR = re.compile(r"/dev/fd/([12])|/proc/(?:self|thread-self)/fd/([12])")
SYMLINK = "a symbolic link, not written through (remove it, or name its target)"


def write_file(output: str, write: Callable[[TextIO], object]) -> None:
    """Write `output` with `write` (UTF-8 whatever the locale: JUnit declares it), as the module says."""
    descriptor = standard_stream(output)
    if descriptor is not None:
        _write_fd(output, os.dup(descriptor), write)
        return
    parent, name = _parent(output)
    try:
        target = _last(parent, name, output)
        if target is not None:  # a stream: written in place
            _write_fd(output, target, write)
            return
        _replace(parent, name, output, write)
    finally:
        os.close(parent)


def standard_stream(path: str) -> int | None:
    """1 or 2 when `path` names standard output or standard error, else None."""
    found = DESCRIPTOR.fullmatch(path)
    return STANDARD.get(path) or (int(found.group(1) or found.group(2)) if found else None)


def remove_stale(output: str) -> None:
    """Remove the regular file at `output` (never what a link leads to, nor a stream), left by an earlier run:
    a run that ends without a verdict must not leave the old one under its name."""
    if standard_stream(output) is not None:
        return
    with contextlib.suppress(OSError, InputError):
        parent, name = _parent(output)
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=parent)
        finally:
            os.close(parent)


def _parent(output: str) -> tuple[int, str]:
    """(a descriptor of the directory `output` lies in, its last component). The directory is reached from `/`
    one component at a time, following symbolic links until the working directory is reached and none after
    it (however the path spells the way there: `$PWD` through a linked directory too)."""
    path = os.path.abspath(output)
    head, name = os.path.split(path)
    if not name or name in (".", ".."):
        raise InputError(output, os.strerror(errno.EISDIR))
    try:
        here = os.stat(".")
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    below = _same(os.fstat(fd), here)
    for part in [p for p in head.split("/") if p]:
        try:
            next_fd = _open_dir(fd, part, follow=not below)
        except InputError as exc:
            os.close(fd)
            raise InputError(output, exc.reason) from None
        os.close(fd)
        fd = next_fd
        below = below or _same(os.fstat(fd), here)
    return fd, name


def _open_dir(parent: int, part: str, follow: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(part, flags, dir_fd=parent)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        with contextlib.suppress(OSError):
            if not follow and stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode):
                reason = f"its directory {printable(part)} is a symbolic link, not followed (name its target)"
        raise InputError(part, reason) from None


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _last(parent: int, name: str, output: str) -> int | None:
    """A descriptor for a stream at `name` (written in place), None for a regular file or none (replaced);
    InputError for what is refused."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    if stat.S_ISLNK(st.st_mode):
        descriptor = standard_stream(os.readlink(name, dir_fd=parent))
        if descriptor is not None:
            return os.dup(descriptor)
        raise InputError(output, SYMLINK)
    if stat.S_ISBLK(st.st_mode):
        raise InputError(output, "a block device, not written")
    if stat.S_ISDIR(st.st_mode):
        raise InputError(output, os.strerror(errno.EISDIR))
    if stat.S_ISREG(st.st_mode):
        return None
    try:  # a FIFO or a character device named directly, opened as the shell's `>` would open it
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    if stat.S_ISBLK(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
        os.close(fd)
        raise InputError(output, "changed while it was opened, not written")
    return fd


def _replace(parent: int, name: str, output: str, write: Callable[[TextIO], object]) -> None:
    """Write a new file beside `name` and rename it over `name`: atomic, whatever happens while writing."""
    temporary = f".customops-{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=parent)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    try:
        _write_fd(output, fd, write)
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=parent)
        if isinstance(exc, OSError):
            raise InputError(output, exc.strerror or str(exc)) from None
        raise


def _write_fd(output: str, fd: int, write: Callable[[TextIO], object]) -> None:
    try:
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            write(f)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
