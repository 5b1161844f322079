"""The model repositories under a directory, for `customops check` without one named (the pre-commit hook,
a first run in a checkout): as ruff finds its files, customops finds the directories Triton would be given
as --model-repository.

A model repository is a directory with a model directory in it, and a model directory is one holding a
config.pbtxt. The search is breadth-first, in name order, does not follow symbolic links, does not enter
hidden directories, virtual environments or a repository already found, and stops at a bounded depth and
number of directories, so that a hostile or huge tree cannot hang it."""

from __future__ import annotations

import os
from collections import deque

from customops.errors import CustomopsError, printable

MAX_DEPTH = 4  # models/ at the root, or deploy/triton/models/ below it
MAX_DIRECTORIES = 20_000
CONFIG = "config.pbtxt"
SKIPPED = ("node_modules", "__pycache__", "site-packages")


def find_model_repositories(start: str) -> list[str]:
    """The model repositories at or below `start`, outermost first; CustomopsError when there are none or the
    tree is too big to search."""
    found: list[str] = []
    queue = deque([(os.path.abspath(start), 0)])
    visited = 0
    while queue:
        directory, depth = queue.popleft()
        visited += 1
        if visited > MAX_DIRECTORIES:
            raise CustomopsError(f"{printable(start)}: no model repository given, and more than {MAX_DIRECTORIES} "
                                 "directories to search for one: name it (customops check MODEL_REPOSITORY)")
        children = _subdirectories(directory)
        if any(os.path.isfile(os.path.join(child, CONFIG)) for child, _ in children):
            found.append(directory)
            continue
        if depth < MAX_DEPTH:
            queue.extend((child, depth + 1) for child, link in children if not link and _searched(child))
    if not found:
        raise CustomopsError(f"{printable(start)}: no model repository given, and none found here (a directory "
                             f"whose model directories hold {CONFIG}): name it (customops check MODEL_REPOSITORY)")
    return found


def _subdirectories(directory: str) -> list[tuple[str, bool]]:
    """Its subdirectories (a model directory may be a symbolic link, as Triton follows them) in name order,
    each with whether it is a link (never searched below); none when it cannot be read."""
    try:
        with os.scandir(directory) as entries:
            return sorted((e.path, e.is_symlink()) for e in entries if e.is_dir())
    except OSError:
        return []


def _searched(directory: str) -> bool:
    """Whether the search enters it: not hidden (.git, .venv), not a virtual environment or a package cache."""
    name = os.path.basename(directory)
    return not name.startswith(".") and name not in SKIPPED and not os.path.exists(os.path.join(directory,
                                                                                                "pyvenv.cfg"))
