"""Writing the files users name (`--output`, `--sarif`, `profile create -o`), which usually lie in a pull
request's checkout, where anything may be a symbolic link.

- The process's own streams (`-`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`) are
  written as they are, and so is a FIFO or a character device named directly (`/dev/null`).
- Every other path is opened without following a symbolic link at or below the working directory: a
  directory component that is one (`reports -> ../elsewhere`) is refused, and so is a last component that
  is one, unless it leads to the process's own stream or to a FIFO. A block device is refused however it is
  named. Components above the working directory (an absolute path elsewhere) are the user's own system.
- A regular file is replaced atomically: written beside itself and renamed over it, so a full disk or a
  killed run leaves the previous file whole, never a truncated one under the new run's name (remove_stale
  takes away the one a run that could not check would otherwise leave).
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

OWN_STREAM = re.compile(r"/dev/(?:stdout|stderr|fd/\d+)|/proc/(?:self|thread-self)/fd/\d+")
SYMLINK = "a symbolic link, not written through (remove it, or name its target)"


def write_file(output: str, write: Callable[[TextIO], object]) -> None:
    """Write `output` with `write` (UTF-8 whatever the locale: JUnit declares it), as the module says."""
    if output == "-" or OWN_STREAM.fullmatch(output):
        _write_fd(output, os.dup(1) if output == "-" else _open_stream(output), write)
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


def remove_stale(output: str) -> None:
    """Remove the regular file at `output` (never what a link leads to, nor a stream), left by an earlier run:
    a run that ends without a verdict must not leave the old one under its name."""
    with contextlib.suppress(OSError, InputError):
        parent, name = _parent(output)
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=parent)
        finally:
            os.close(parent)


def _open_stream(output: str) -> int:
    try:
        return os.open(output, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None


def _parent(output: str) -> tuple[int, str]:
    """(a descriptor of the directory `output` lies in, its last component), the directory reached from the
    working directory one component at a time without following a symbolic link (a path elsewhere: from
    its own parent, as the system resolves it)."""
    path = os.path.normpath(output)
    cwd = os.getcwd()
    if os.path.isabs(path) and (path + "/").startswith(cwd.rstrip("/") + "/"):
        path = os.path.relpath(path, cwd)
    head, name = os.path.split(path)
    if not name or name in (".", ".."):
        raise InputError(output, os.strerror(errno.EISDIR))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        if os.path.isabs(path):
            return os.open(head or "/", flags), name
        fd = os.open(".", flags)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    for part in [p for p in head.split("/") if p and p != "."]:
        try:
            next_fd = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    reason = f"its directory {printable(part)} is a symbolic link, not followed (name its target)"
            os.close(fd)
            raise InputError(output, reason) from None
        os.close(fd)
        fd = next_fd
    return fd, name


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
        link = os.readlink(name, dir_fd=parent)
        if OWN_STREAM.fullmatch(link) or _fifo(parent, name):
            return _open_at(parent, name, output, follow=True)
        raise InputError(output, SYMLINK)
    if stat.S_ISBLK(st.st_mode):
        raise InputError(output, "a block device, not written")
    if stat.S_ISDIR(st.st_mode):
        raise InputError(output, os.strerror(errno.EISDIR))
    return None if stat.S_ISREG(st.st_mode) else _open_at(parent, name, output, follow=False)


def _fifo(parent: int, name: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(name, dir_fd=parent).st_mode)
    except OSError:
        return False


def _open_at(parent: int, name: str, output: str, follow: bool) -> int:
    flags = os.O_WRONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        raise InputError(output, exc.strerror or str(exc)) from None
    if stat.S_ISBLK(os.fstat(fd).st_mode):  # a FIFO's place swapped for a device since: never written
        os.close(fd)
        raise InputError(output, "a block device, not written")
    return fd


def _replace(parent: int, name: str, output: str, write: Callable[[TextIO], object]) -> None:
    """Write a new file beside `name` and rename it over `name`: atomic, whatever happens while writing."""
    temporary = f".{name}.{os.urandom(6).hex()}.customops-tmp"
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
