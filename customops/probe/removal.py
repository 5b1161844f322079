"""Removing a probe's directory, whatever the library that ran in it did to it."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat


def remove_tree(path: str) -> None:
    """Remove the probe's directory whatever its library did to it (made unreadable, nested thousands deep,
    replaced by a symlink): each directory's subdirectories are moved up to the top before it is removed,
    so depth costs neither recursion nor descriptors, and no symlink is ever followed."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # whatever was put in its place
        return
    prefix = f".customops-{secrets.token_hex(4)}-"
    moved = 0
    try:
        names = os.listdir(top)
        while names:
            pending = list(names)
            while pending:
                name = pending.pop()
                if not _is_directory(top, name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=top)
                    continue
                with contextlib.suppress(OSError, ValueError):  # ValueError: a symlink (never followed)
                    os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
                with contextlib.suppress(OSError):
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
                    try:
                        for entry in os.listdir(inner):
                            moved += 1
                            with contextlib.suppress(OSError):
                                if _is_directory(inner, entry):
                                    os.rename(entry, prefix + str(moved), src_dir_fd=inner, dst_dir_fd=top)
                                    pending.append(prefix + str(moved))
                                else:
                                    os.unlink(entry, dir_fd=inner)
                    finally:
                        os.close(inner)
                    os.rmdir(name, dir_fd=top)
            names, before = os.listdir(top), names
            if sorted(names) == sorted(before):
                break  # nothing more can be removed
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _is_directory(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
