"""Paths inside a container, resolved the way the kernel resolves them there (as under chroot).

A container path is walked component by component. `..` never climbs above the container's `/`; a
symlink is read and its target is walked again inside the container (an absolute target starts from
the container's `/`, not this machine's); a mounted directory (`docker run -v HOST:CONTAINER`) is
looked up on its host side, but symlinks found there are still resolved inside the container. So a
repository's `RUNPATH $ORIGIN/../../..`, an op library path `/models/../../etc/x` or an absolute symlink
in a mounted checkout can never make customops read a file of this machine outside the container root
and its mounts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

MAX_SYMLINKS = 40  # Linux's limit before ELOOP
Mounts = tuple[tuple[str, str], ...]  # (container directory, host directory), longest container prefix first


def host_of_real(root: str | None, mounts: Mounts, real: str) -> str | None:
    """Where a container path with no symlinks and no `..` lies on this machine: under the longest mount
    prefix, else under the root (None: outside every mount and there is no root)."""
    for container_dir, host_dir in mounts:
        prefix = container_dir.rstrip("/")
        if real == container_dir or real.startswith(prefix + "/"):
            return host_dir.rstrip("/") + real[len(prefix):]
    if root is None:
        return None
    return real if root == "/" else root.rstrip("/") + real


def resolve(root: str | None, mounts: Mounts, path: str,
            lstat: Callable[[str], os.stat_result] = os.lstat) -> tuple[str, str] | None:
    """(the real container path, its host path) of an absolute container path, or None when it does not
    exist there (a missing component, a non-directory in the middle, a symlink loop)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    parts.reverse()  # a stack: the next component is at the end
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop()
        if part == "..":
            if done:
                done.pop()
            continue
        real = "/" + "/".join((*done, part))
        host = host_of_real(root, mounts, real)
        try:
            if host is None:
                raise FileNotFoundError(real)
            st = lstat(host)
        except (OSError, ValueError):
            if not _above_a_mount(mounts, real):
                return None
            done.append(part)  # a directory docker creates to hold a mount point (/models for /models/a)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINKS:
                return None
            try:
                link = os.readlink(host)
            except OSError:
                return None
            if link.startswith("/"):
                done = []
            parts.extend(reversed([p for p in link.split("/") if p not in ("", ".")]))
            continue
        if parts and not stat.S_ISDIR(st.st_mode):
            return None  # ENOTDIR
        done.append(part)
    real = "/" + "/".join(done)
    host = host_of_real(root, mounts, real)
    return None if host is None else (real, host)


def _above_a_mount(mounts: Mounts, real: str) -> bool:
    """Whether `real` is a directory above a mount point: the runtime creates it when it is missing."""
    return any(container_dir.startswith(real.rstrip("/") + "/") for container_dir, _host in mounts)
