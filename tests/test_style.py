"""The code base stays ruff clean and type-checks with mypy (configuration in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    result = subprocess.run([ruff, "check", "."], cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_mypy_is_clean():
    mypy = shutil.which("mypy") or str(Path(sys.executable).parent / "mypy")
    if not Path(mypy).exists():
        pytest.skip("mypy is not installed")
    result = subprocess.run([mypy, "customops"], cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
