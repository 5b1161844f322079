"""Mounts as `docker run -v HOST:CONTAINER` makes them: parsing, and mapping paths both ways."""

from __future__ import annotations

import os
import posixpath

from customops import chroot
from customops.errors import CustomopsError

Mounts = tuple[tuple[str, str], ...]  # (container directory, host directory)
DEFAULT_REPOSITORY = "/models"  # where a repository of this machine is mounted unless told otherwise


def parse_mount(value: str) -> tuple[str, str]:
    """HOST_DIR:CONTAINER_DIR[:options], as docker -v takes it -> (container directory, host directory)."""
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise CustomopsError(f"--mount {value}: expected HOST_DIR:CONTAINER_DIR (the container side absolute)")
    return os.path.normpath(parts[1]), os.path.abspath(parts[0])


def resolve_host(root: str, path: str, mounts: Mounts = ()) -> str | None:
    """Where a model repository tritonserver is given lies on this machine; None when it exists nowhere.

    Inside the container first: with the live root `/`, or for an absolute path the container root or a
    mount has, it is resolved as the kernel resolves it inside the container (customops.chroot: `..` and
    absolute symlinks stay in the container, mounts are looked up on their host side), so a symlink in the
    root (`models -> /home/me/models`) never names a directory of this machine. Otherwise, with a
    container root, a relative path (`./models`, `models`: relative to the working directory, as a shell
    and `customops check` take it) or an absolute one the container does not have is a directory of this
    machine, which default_mounts mounts where `customops check` mounts its repository argument."""
    live = root == "/"
    if live or path.startswith("/"):
        absolute = posixpath.normpath("/" + path.lstrip("/")) if path.startswith("/") else os.path.abspath(path)
        ordered = tuple(sorted(mounts, key=lambda m: -len(m[0])))
        found = chroot.resolve(root, ordered, absolute)
        if found is not None or live:
            return None if found is None else found[1]
    host = os.path.abspath(path)
    return host if os.path.isdir(host) else None


def default_mounts(repositories: list[str], root: str | None, explicit: Mounts = (),
                   where: str = DEFAULT_REPOSITORY) -> Mounts:
    """The explicit mounts, then each repository of this machine that is neither inside the container root
    nor under an explicit mount's host side, mounted as `docker run -v REPO:/models` would: at `where`, or
    at `where/<name>` when there are several. The live root `/` mounts nothing: there this machine is the
    container; None (only the container's facts are known) mounts every repository. Without the
    container's modules, so that launch can assemble the environment cheaply."""
    mounts = list(explicit)
    if root is not None and os.path.abspath(root) == "/":
        return tuple(mounts)
    top = os.path.abspath(root).rstrip("/") + "/" if root is not None else None
    outside = [repo for repo in dict.fromkeys(os.path.abspath(r) for r in repositories)
               if not (top and repo.startswith(top))
               and not any(repo == host or repo.startswith(host.rstrip("/") + "/") for _c, host in mounts)]
    for repo in outside:
        mounts.append((where if len(outside) == 1 else f"{where}/{os.path.basename(repo)}", repo))
    return tuple(mounts)


def container_of(root: str, path: str, mounts: Mounts = ()) -> str:
    """A path of this machine as the container sees it (the inverse of resolve_host, without symlinks)."""
    for container_dir, host_dir in sorted(mounts, key=lambda m: -len(m[1])):
        if path == host_dir or path.startswith(host_dir.rstrip("/") + "/"):
            return container_dir.rstrip("/") + path[len(host_dir.rstrip("/")):]
    return path if root == "/" or not path.startswith(root.rstrip("/") + "/") else path[len(root.rstrip("/")):]
