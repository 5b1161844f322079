"""A profile's skeleton: a sparse root holding only the bytes of the container's libraries that ld.so reads,
rebuilt from the profile and cached by content. Built in a private staging directory renamed into place when
complete; never written through a symlink, never with setuid, setgid, sticky or group/other write bits."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from customops import safeio
from customops.errors import InputError
from customops.triton.profile_schema import CHUNK_LIMIT, SMALL_FILE_LIMIT, Validator, at

SKELETON_FORMAT = "skeleton-2"  # bump whenever what materialize writes changes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def skeleton_key(profile: dict) -> str:
    """Everything a skeleton is made of (directories, links, files, the ld.so.cache) and how it is made."""
    parts = {k: profile.get(k) for k in ("directories", "links", "files", "ld_so_cache")}
    blob = json.dumps([SKELETON_FORMAT, parts], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def materialize(profile: dict, cache_dir: Path | None, where: str = "profile") -> str | None:
    """The root of the profile's skeleton (sparse files holding only what ld.so reads); None when the profile
    has no files. Built in a private staging directory that is renamed into place when complete, so a
    skeleton in the cache is whole; reused only when the cache and the skeleton pass the cache's trust
    checks. Without a usable cache (cache_dir None: --no-cache, or an untrusted one) it is built in a
    temporary directory that is removed when customops exits. `profile` must have passed `read`."""
    from customops import cachedir, cleanup

    if not profile.get("files"):
        return None
    key = skeleton_key(profile)
    root = cachedir.trusted_root(cache_dir) if cache_dir is not None else None
    parent = None
    if root is not None:
        if _trusted_skeleton(root, key):
            return str(root / "profiles" / key)
        parent = cachedir.open_dir(root, ("profiles",), create=True)
    try:
        staging = tempfile.mkdtemp(prefix="customops-skeleton-" if parent is None else ".staging-",
                                   dir=None if parent is None or root is None else root / "profiles")
        cleanup.register(staging)
        try:
            build(profile, staging, where)
        except BaseException:
            cleanup.remove(staging)
            raise
        if parent is None or root is None:
            return staging  # removed at exit
        try:
            os.rename(os.path.basename(staging), key, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError:  # another run finished first: theirs if it can be trusted, else ours until exit
            if not _trusted_skeleton(root, key):
                return staging
            cleanup.remove(staging)
        else:
            cleanup.unregister(staging)
        return str(root / "profiles" / key)
    finally:
        if parent is not None:
            os.close(parent)


def _trusted_skeleton(root: Path, key: str) -> bool:
    """A skeleton renamed into place by this user: complete, and (its directory being ours and not writable
    by others, in directories that are the same) unchanged since."""
    from customops import cachedir

    found = cachedir.open_dir(root, ("profiles", key))
    if found is None:
        return False
    os.close(found)
    return True


def build(profile: dict, staging: str, where: str) -> None:
    """Directories, then files, then symlinks last. Every directory is entered through a descriptor opened
    with O_NOFOLLOW and every file created with O_EXCL|O_NOFOLLOW, so nothing is ever written through a
    symlink, even one the profile itself made; modes lose setuid, setgid, sticky and group/other write."""
    fail = Validator(where).fail
    tree = _Tree(staging)
    try:
        for directory in sorted(profile.get("directories", []), key=_components):
            tree.directory(directory)
        budget = [safeio.PROFILE_EXPANDED_LIMIT]
        for path, entry in sorted(profile["files"].items(), key=lambda item: _components(item[0])):
            pointer = at("/files", path)
            parent, name = tree.parent(path)
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
            try:
                if "content" in entry:
                    data = _inflate(entry["content"], SMALL_FILE_LIMIT, f"{pointer}/content", budget, fail)
                    if len(data) != entry["size"]:
                        fail(f"{pointer}/content", f"holds {len(data)} bytes, not the size {entry['size']}")
                    _write_at(fd, data, 0)
                else:
                    os.ftruncate(fd, entry["size"])
                    end = 0
                    for i, (offset, text) in enumerate(entry["chunks"]):
                        if offset < end:
                            fail(f"{pointer}/chunks/{i}", f"overlaps the previous chunk (which ends at {end})")
                        limit = min(entry["size"] - offset, CHUNK_LIMIT)
                        data = _inflate(text, limit, f"{pointer}/chunks/{i}/1", budget, fail)
                        _write_at(fd, data, offset)
                        end = offset + len(data)
                os.fchmod(fd, (entry["mode"] & 0o755) | 0o400)
            finally:
                os.close(fd)
        if profile.get("ld_so_cache") is not None:
            parent, name = tree.parent("/etc/ld.so.cache")
            data = _inflate(profile["ld_so_cache"], safeio.LD_CACHE_LIMIT, "/ld_so_cache", budget, fail)
            fd = os.open(name, _FILE_FLAGS, 0o644, dir_fd=parent)
            try:
                _write_at(fd, data, 0)
            finally:
                os.close(fd)
        for path, target in sorted(profile.get("links", {}).items(), key=lambda item: _components(item[0])):
            parent, name = tree.parent(path)
            os.symlink(target, name, dir_fd=parent)
    except OSError as exc:
        raise InputError(where, f"cannot build the profile's skeleton in {staging}: {safeio.describe(exc)}") from None
    finally:
        tree.close()


def _components(path: str) -> list[str]:
    return path.split("/")


def _inflate(text: str, limit: int, pointer: str, budget: list[int], fail) -> bytes:
    try:
        data = safeio.inflate(base64.b64decode(text, validate=True), min(limit, budget[0]), pointer)
    except binascii.Error:
        fail(pointer, "expected base64 text")
    except InputError as exc:
        fail(pointer, exc.reason + ("" if limit <= budget[0] else " (all of the profile's data together)"))
    budget[0] -= len(data)
    return data


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class _Tree:
    """Directories of the skeleton, reached from its root one component at a time, never through a symlink;
    descriptors are kept for the current path only (paths come in sorted order), so few are open at once."""

    def __init__(self, root: str) -> None:
        self.stack: list[tuple[str, int]] = [("", os.open(root, _DIR_FLAGS))]

    def directory(self, path: str) -> int:
        parts = [p for p in path.split("/") if p]
        depth = 0
        while depth + 1 < len(self.stack) and depth < len(parts) and self.stack[depth + 1][0] == parts[depth]:
            depth += 1
        for _, fd in self.stack[depth + 1:]:
            os.close(fd)
        del self.stack[depth + 1:]
        for name in parts[depth:]:
            parent = self.stack[-1][1]
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            self.stack.append((name, os.open(name, _DIR_FLAGS, dir_fd=parent)))
        return self.stack[-1][1]

    def parent(self, path: str) -> tuple[int, str]:
        """The descriptor of a path's directory (made where missing) and the path's last component."""
        return self.directory(os.path.dirname(path)), os.path.basename(path)

    def close(self) -> None:
        for _, fd in self.stack:
            os.close(fd)
        self.stack = []
