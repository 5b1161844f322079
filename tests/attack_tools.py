"""What the attack suites share: the real CLI in a subprocess, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TIMEOUT = 60  # every attacked run ends in seconds; a blocked open or a hang would hit this


def customops(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m customops ARGS` in `tmp_path`, with its cache there and no LD_PRELOAD of ours."""
    environ = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache"), **env}
    environ.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=environ, timeout=TIMEOUT)

