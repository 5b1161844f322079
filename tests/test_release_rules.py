"""Repository rules by release (customops/data/releases.json "repository_rules"): a container's release, read
from its server version, decides which of the core's rules apply. Today's core (tests/test_triton_core.py) shows
every rule switched on; these tests show what switching one off changes, and that the version arithmetic agrees
with every row of the release table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from customops.app.check import run_check
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from customops.triton.release_rules import TODAY, release_of, rules_for

TABLE = json.loads((Path(__file__).resolve().parent.parent / "customops/data/releases.json").read_text())


@pytest.mark.parametrize("release", sorted(r for r, row in TABLE["releases"].items() if "server" in row))
def test_a_server_version_names_its_release_as_the_table_does(release: str) -> None:
    assert release_of(TABLE["releases"][release]["server"]) == release


def test_a_patch_release_that_took_a_month_moves_every_later_release() -> None:
    """25.07 shipped 2.59.1 (server build.py on r25.07), so 2.60.0 is 25.08, not 25.07: from then on a minor version
    is not its release's offset from 24.05, and a version past the table moves on from its newest row."""
    assert (release_of("2.59.0"), release_of("2.59.1"), release_of("2.60.0")) == ("25.06", "25.07", "25.08")
    assert release_of("2.67.0") == "26.03" and release_of("2.68.0") == "26.04"
    newest = max((row["server"], name) for name, row in TABLE["releases"].items() if "server" in row)
    minor = int(newest[0].split(".")[1])
    year, month = map(int, newest[1].split("."))
    assert release_of(f"2.{minor + 1}.0") == (f"{year:02d}.{month + 1:02d}" if month < 12 else f"{year + 1:02d}.01")


def test_an_unknown_or_unreadable_version_gets_todays_rules() -> None:
    assert rules_for(None) == TODAY and rules_for("garbage") == TODAY and rules_for("2." + "9" * 5000 + ".0") == TODAY


def test_each_rule_applies_from_its_release_on() -> None:
    assert not rules_for("2.56.0").torch_aoti_platform and not rules_for("2.66.0").torch_aoti_platform  # 25.03, 26.02
    assert rules_for("2.67.0").torch_aoti_platform and not rules_for("2.67.0").libtorch_platform_alias  # 26.03
    assert rules_for("2.68.0").libtorch_platform_alias  # 26.04
    assert not rules_for("2.41.0").runtime_field and rules_for("2.42.0").runtime_field  # 23.12, 24.01
    assert not rules_for("2.38.0").python_based_backends and rules_for("2.39.0").python_based_backends  # 23.09, 23.10


def findings_of(tree: Path, tmp_path: Path, version: str | None, config: str, **files: str) -> dict[str, str | None]:
    """code -> predicted message of the model's findings, in a copy of the fixture container whose
    TRITON_VERSION is `version` (None: none)."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    if version:
        (root / "opt/tritonserver/TRITON_VERSION").write_text(version + "\n")
    model = root / "models" / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(config)
    for name, text in files.items():
        (model / name.replace("__", "/")).write_text(text)
    result = run_check([str(root / "models")], load_manifest(None), from_root(str(root)), ())
    return {f.code: f.predicted for f in result.findings if f.model == "m"}


def test_torch_aoti_is_an_unknown_platform_before_26_03(tree: Path, tmp_path: Path) -> None:
    found = findings_of(tree, tmp_path, "2.56.0", 'platform: "torch_aoti"\n', **{"1__model.pt2": ""})
    assert found["CO102"] == "unexpected platform type 'torch_aoti' for m"


def test_torch_aoti_is_served_by_the_pytorch_backend_from_26_03(tree: Path, tmp_path: Path) -> None:
    """26.03's server is 2.67.0 (its build.py): read as a month's offset from 24.05 it was 26.02, and the model a
    false CO102."""
    found = findings_of(tree, tmp_path, "2.67.0", 'platform: "torch_aoti"\n', **{"1__model.pt2": ""})
    assert "CO102" not in found


def test_the_runtime_field_is_not_read_before_24_01(tree: Path, tmp_path: Path) -> None:
    config = 'backend: "mybackend"\nruntime: "libcustom.so"\n'
    before = findings_of(tree, tmp_path / "a", "2.41.0", config)
    after = findings_of(tree, tmp_path / "b", None, config)
    assert "libtriton_mybackend.so" not in str(after.get("CO201")) and "libcustom.so" in str(after.get("CO201"))
    assert before["CO201"] == ("unable to find backend library for backend 'mybackend', try specifying runtime on "
                               "the model configuration.")
