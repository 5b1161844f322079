"""Results that stay valid while nothing they depend on changes: check's machine-readable report and launch's
verdict. One scheme for both: the entry is stored under a key made of the inputs (options, the identity of
every file in the repositories, ...: each caller's own key parts), and records the identity (device, inode,
size, mtime: customops.cachedir.file_key) of each container file and directory the answer depended on; a hit
is used only if customops.cachedir trusts the entry, it has exactly the caller's shape, and every one of
those identities is unchanged (a directory's mtime changes when a file is added to or removed from it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from customops.cachedir import MapOf, file_key, load_result, store_result

DEPENDENCIES_SHAPE = MapOf(str)  # every entry's "dependencies": {path: file_key}


def load(cache_dir: Path | str, kind: str, parts: Sequence[str], shape: Mapping[str, object]) -> (
        dict[str, Any] | None):
    """The entry stored under (kind, parts), without its dependencies, if it is trusted, has exactly `shape`
    (which includes "dependencies": DEPENDENCIES_SHAPE) and nothing it depended on has changed."""
    hit = load_result(cache_dir, kind, parts, shape)
    if hit is None:
        return None
    for path, identity in hit["dependencies"].items():
        try:
            if file_key(path) != identity:
                return None
        except (OSError, ValueError):
            return None
    return {k: v for k, v in hit.items() if k != "dependencies"}


def store(cache_dir: Path | str, kind: str, parts: Sequence[str], value: Mapping[str, object],
          dependencies: Sequence[str]) -> None:
    """Keep `value` with the identity of each of its dependencies; nothing when one has vanished meanwhile."""
    try:
        identities = {path: file_key(path) for path in dependencies}
    except OSError:
        return
    store_result(cache_dir, kind, parts, {**value, "dependencies": identities})
