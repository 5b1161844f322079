"""The lower bounds in pyproject.toml are true (issue #19): the wheel, installed into a fresh virtual environment with
every runtime dependency that applies here pinned to its lower bound, checks the example and finds what the checkout
finds with today's versions. Skipped, saying so, when the package index cannot be reached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from release_tools import ROOT, build_wheel, check_example, checkout_check, findings, fresh_venv, run, tomllib


def lower_bounds() -> dict[str, str]:
    """name -> the version of its `>=` bound, for each of [project] dependencies whose marker holds here."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for requirement in map(Requirement, declared):
        if requirement.marker is None or requirement.marker.evaluate():
            (floor,) = (s.version for s in requirement.specifier if s.operator == ">=")
            bounds[requirement.name] = floor
    return bounds


def test_every_runtime_dependency_has_a_lower_bound():
    assert {"numpy", "rich", "cxxfilt", "protobuf", "capstone"} <= set(lower_bounds())


def _install_at_lower_bounds(venv: Path, wheel: Path, bounds: dict[str, str]) -> None:
    """pip install the wheel, wheels only, constrained to `bounds`; skip only where the index cannot be reached."""
    constraints = venv.parent / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in bounds.items()))
    python = venv / "python"
    installed = run(python, "-m", "pip", "install", "--only-binary", ":all:", "--constraint", constraints, wheel)
    if installed.returncode != 0 and run(python, "-m", "pip", "index", "versions", "pip").returncode != 0:
        pytest.skip(f"the package index cannot be reached: {installed.stderr.strip()[-300:]}")
    assert installed.returncode == 0, installed.stdout[-1500:]  # a lower bound without a wheel for this Python
    listed = json.loads(run(python, "-m", "pip", "list", "--format", "json").stdout)
    versions = {canonicalize_name(p["name"]): Version(p["version"]) for p in listed}
    assert {canonicalize_name(n): versions.get(canonicalize_name(n)) for n in bounds} == {
        canonicalize_name(n): Version(v) for n, v in bounds.items()}


def test_the_wheel_checks_the_example_with_every_dependency_at_its_lower_bound(example, tmp_path):
    venv = fresh_venv(tmp_path / "venv")
    _install_at_lower_bounds(venv, build_wheel(tmp_path), lower_bounds())
    venv_check = [str(venv / "customops")]
    checked = findings(check_example(venv_check, example, tmp_path, tmp_path / "cache", "--format", "json"))
    here = findings(checkout_check(example, tmp_path, "--format", "json"))
    assert checked[0] == here[0] == 1
    assert checked[1] and checked[1] == here[1]
    report = check_example(venv_check, example, tmp_path, tmp_path / "cache")  # the terminal report: rich renders it
    assert report.stdout == checkout_check(example, tmp_path).stdout
