"""customops as CI installs it (issue #19): the wheel built from the sdist, into a fresh virtual environment with only
its declared dependencies from the package index, runs the example check and finds what the checkout's own customops
finds; and the wheel holds the package and its data, not the tests. Skipped, saying so, when the package index cannot
be reached."""

from __future__ import annotations

import zipfile

import pytest
from release_tools import build_wheel, check_example, checkout_check, findings, fresh_venv, run


def test_the_wheel_holds_the_package_and_its_data_and_no_tests(tmp_path):
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    assert {"customops/data/model_config.json", "customops/schemas/check-1.json", "customops/schemas/scan-1.json"} \
        <= set(names)
    (metadata,) = {n.split("/")[0] for n in names} - {"customops"}
    assert metadata.startswith("customops-") and metadata.endswith(".dist-info")
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]


def test_the_built_wheel_installs_with_its_declared_dependencies_and_checks_the_example(example, tmp_path):
    wheel = build_wheel(tmp_path)
    venv = fresh_venv(tmp_path / "venv")
    installed = run(venv / "python", "-m", "pip", "install", "-q", wheel)
    if installed.returncode != 0:
        pytest.skip(f"the package index cannot be reached: {installed.stderr.strip()[-300:]}")
    freeze = run(venv / "python", "-m", "pip", "freeze").stdout.lower()
    assert "tritonclient" not in freeze and "torch" not in freeze and "tensorflow" not in freeze
    assert "pyelftools" not in freeze
    checked = findings(check_example([str(venv / "customops")], example, tmp_path, tmp_path / "cache", "--format",
                                     "json"))
    here = findings(checkout_check(example, tmp_path, "--format", "json"))
    assert checked[0] == here[0] == 1
    assert checked[1] and checked[1] == here[1]
