"""The package's own data files (customops/data/), read from where the package lies. importlib.resources
would import zipfile, tempfile and shutil (~15 ms) on every start, the launch that starts the server from a
cached verdict included; customops is installed as files (its probes and stand-ins run files of it too),
never imported from a zip."""

from __future__ import annotations

import os

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def read_text(name: str) -> str:
    """customops/data/`name` (a path relative to it), as UTF-8."""
    with open(os.path.join(DATA, name), encoding="utf-8") as file:
        return file.read()
