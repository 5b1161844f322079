"""Where customops caches parsed files and results; importing this costs nothing (no numpy), so warm paths
can look here before loading anything heavy."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

RESULTS_FORMAT = "results-2"  # bump whenever a cached result's shape or meaning changes


def default_cache_dir() -> Path:
    if env := os.environ.get("CUSTOMOPS_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "customops"


def file_key(path: str) -> str:
    """(device, inode, size, mtime) of a file: it is unchanged while these are. Raises OSError."""
    st = os.stat(path)
    return f"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"


def result_path(cache_dir: Path, kind: str, *parts: str) -> Path:
    digest = hashlib.sha256("\0".join((RESULTS_FORMAT, *parts)).encode()).hexdigest()
    return cache_dir / kind / digest[:2] / digest


def load_result(path: Path) -> object | None:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def store_result(path: Path, value: object) -> None:
    """Atomic, and silent when the cache cannot be written (correct results, just slower next time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except OSError:
        pass


def tree_fingerprint(directory: str) -> str:
    """Every file and directory under `directory` with its file_key: changes when anything in the tree does."""
    entries = []
    for current, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = os.path.join(current, name)
            try:
                entries.append(f"{os.path.relpath(path, directory)}={file_key(path)}")
            except OSError:
                entries.append(f"{os.path.relpath(path, directory)}=?")
    return "\n".join(entries)
