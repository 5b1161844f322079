"""customops as CI installs it (issue #19): the built wheel, into a fresh virtual environment with only its declared
dependencies from the package index, runs the example check and finds what the checkout's own customops finds.
Skipped, saying so, when the package index cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)


def test_the_built_wheel_installs_with_its_declared_dependencies_and_checks_the_example(example, tmp_path):
    wheels = tmp_path / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheels))
    if built.returncode != 0 and "Could not" in built.stderr + built.stdout:  # no index: setuptools for the build
        pytest.skip(f"the wheel cannot be built without the package index: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("customops-*.whl")
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", str(venv)).returncode == 0
    installed = run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel))
    if installed.returncode != 0:
        pytest.skip(f"the package index cannot be reached: {installed.stderr.strip()[-300:]}")
    freeze = run(str(venv / "bin" / "python"), "-m", "pip", "freeze").stdout.lower()
    assert "tritonclient" not in freeze and "torch" not in freeze and "tensorflow" not in freeze
    repo, root = example
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    checked = run(str(venv / "bin" / "customops"), "check", str(repo), "--container-root", str(root),
                  "--format", "json", cwd=tmp_path, env=env)
    here = run(sys.executable, "-m", "customops", "check", str(repo), "--container-root", str(root), "--format",
               "json", "--no-cache", cwd=ROOT, env=env)
    assert checked.returncode == here.returncode == 1, checked.stderr
    codes = sorted(f["code"] for f in json.loads(checked.stdout)["findings"])
    assert codes and codes == sorted(f["code"] for f in json.loads(here.stdout)["findings"])
