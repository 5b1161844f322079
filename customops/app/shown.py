"""How a path appears in a note: short when it lies under the working directory."""

from __future__ import annotations

import os


def shown(path: str | os.PathLike[str]) -> str:
    """A path for a note: relative to the working directory when inside it, else absolute."""
    path = os.path.abspath(path)
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd.rstrip("/") + "/") else path
