"""Mounts as `docker run -v HOST:CONTAINER` makes them: parsing, and mapping paths both ways."""

from __future__ import annotations

import os
import posixpath

from customops import chroot
from customops.errors import CustomopsError

Mounts = tuple[tuple[str, str], ...]  # (container directory, host directory)


def parse_mount(value: str) -> tuple[str, str]:
    """HOST_DIR:CONTAINER_DIR[:options], as docker -v takes it -> (container directory, host directory)."""
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise CustomopsError(f"--mount {value}: expected HOST_DIR:CONTAINER_DIR (the container side absolute)")
    return os.path.normpath(parts[1]), os.path.abspath(parts[0])


def resolve_host(root: str, path: str, mounts: Mounts = ()) -> str | None:
    """Where a container path (a model repository tritonserver is given) lies on this machine, resolved as
    the kernel resolves it inside the container (customops.chroot: `..` and absolute symlinks stay in the
    container, mounts are looked up on their host side); None when it does not exist there: a
    symlink in the root (`models -> /home/me/models`) never names a directory of this machine."""
    absolute = posixpath.normpath("/" + path.lstrip("/")) if path.startswith("/") or root != "/" \
        else os.path.abspath(path)
    ordered = tuple(sorted(mounts, key=lambda m: -len(m[0])))
    found = chroot.resolve(root, ordered, absolute)
    return None if found is None else found[1]


def container_of(root: str, path: str, mounts: Mounts = ()) -> str:
    """A path of this machine as the container sees it (the inverse of resolve_host, without symlinks)."""
    for container_dir, host_dir in sorted(mounts, key=lambda m: -len(m[1])):
        if path == host_dir or path.startswith(host_dir.rstrip("/") + "/"):
            return container_dir.rstrip("/") + path[len(host_dir.rstrip("/")):]
    return path if root == "/" or not path.startswith(root.rstrip("/") + "/") else path[len(root.rstrip("/")):]
