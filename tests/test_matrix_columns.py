"""Profiles, images and roots as columns of the upgrade matrix (issue #32): `check REPO --profile today.json
--triton-release 25.08` is "today against next". A profile, an image or a root is checked in full (its libraries'
symbols, collisions, registrations), and stands for the release its server is (TRITON_VERSION): its column takes
the place of that release's facts column. The columns are ordered by release; one of no known release comes last.
Each full column says exactly what the same container checked alone says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures import images
from tests.image_tools import customops, example

__all__ = ["example"]  # the fixture container and the example repository (tests.image_tools)

VERSIONS = {"24.12": "2.53.0", "25.08": "2.60.0"}  # the servers of those releases (customops releases)


@pytest.fixture(scope="module")
def profiles(example: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of profiles of the fixture container written by the real `profile create`, as the container
    would be in 24.12 and in 25.08 (its TRITON_VERSION), and as one that says no version (unknown.json)."""
    container = example[0]
    work = tmp_path_factory.mktemp("profiles")
    for name, version in (*VERSIONS.items(), ("unknown", None)):
        root = work / f"root-{name}"
        shutil.copytree(container, root, symlinks=True)
        stamp = root / "opt" / "tritonserver" / "TRITON_VERSION"
        if version:
            stamp.write_text(version + "\n")
        else:
            stamp.unlink(missing_ok=True)
        made = customops("profile", "create", "--container-root", str(root), "-o", str(work / f"{name}.json"),
                         cache=work / "cache")
        assert made.returncode == 0, made.stderr
    return work


def matrix(repo: Path, where: Path, *args: str) -> dict:
    out = customops("check", str(repo), "--no-cache", "--format", "json", *args, cwd=where)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def failing(report: dict) -> dict[str | None, list[str]]:
    """Each model's failing codes, from one check's JSON report (errors: its --fail-on)."""
    found: dict[str | None, set[str]] = {m["name"]: set() for m in report["models"]}
    for f in report["findings"]:
        if f["severity"] == "error":
            found.setdefault(f.get("model"), set()).add(f["code"])
    return {m: sorted(codes) for m, codes in found.items()}


def column(report: dict, target: str) -> dict[str | None, list[str]]:
    return {m["name"]: m["failing"][target] for m in report["models"]}


def test_a_profile_is_the_column_of_its_release_checked_in_full(example, profiles):
    repo = example[1]
    report = matrix(repo, profiles, "--profile", "24.12.json", "--triton-release", "25.08")
    assert [(t["target"], t["source"], t["release"]) for t in report["targets"]] == [
        ("24.12.json", "profile", "24.12"), ("25.08", "facts", "25.08")]
    alone = failing(matrix(repo, profiles, "--profile", "24.12.json"))
    assert column(report, "24.12.json") == {m: alone.get(m, []) for m in column(report, "24.12.json")}
    assert any(codes for codes in alone.values()), "the example fails somewhere in full: the test can tell"
    facts = failing(matrix(repo, profiles, "--triton-release", "25.08"))
    assert column(report, "25.08") == {m: facts.get(m, []) for m in column(report, "25.08")}
    assert report["targets"][0]["decided"] is True  # a full column leaves nothing to the facts


def test_a_release_a_profile_stands_for_is_not_checked_again_from_its_facts(example, profiles):
    report = matrix(example[1], profiles, "--profile", "24.12.json", "--triton-release", "24.12,25.08")
    assert [t["target"] for t in report["targets"]] == ["24.12.json", "25.08"]
    alone = customops("check", str(example[1]), "--no-cache", "--profile", "24.12.json", cwd=profiles)
    picked = customops("check", str(example[1]), "--no-cache", "--profile", "24.12.json", "--triton-release",
                       "24.12,25.08", "--fail-on-target", "24.12", cwd=profiles)
    assert picked.returncode == alone.returncode, picked.stderr  # the release names the profile's column


def test_columns_are_ordered_by_release_and_one_of_no_known_release_comes_last(example, profiles):
    report = matrix(example[1], profiles, "--profile", "unknown.json", "--profile", "25.08.json", "--profile",
                    "24.12.json")
    assert [(t["target"], t["release"]) for t in report["targets"]] == [
        ("24.12.json", "24.12"), ("25.08.json", "25.08"), ("unknown.json", None)]


def test_an_image_is_a_column_checked_in_full(example, tmp_path):
    container, repo = example
    images.oci_layout(tmp_path / "image", [images.tree(container)])
    report = matrix(repo, tmp_path, "--image", "oci:image", "--triton-release", "25.08")
    assert [(t["target"], t["source"]) for t in report["targets"]] == [("25.08", "facts"), ("oci:image", "image")]
    alone = failing(matrix(repo, tmp_path, "--image", "oci:image"))
    assert column(report, "oci:image") == {m: alone.get(m, []) for m in column(report, "oci:image")}


def test_the_text_report_says_what_each_full_column_is_and_the_newest_target_that_loads(example, profiles):
    out = customops("check", str(example[1]), "--no-cache", "--profile", "24.12.json", "--triton-release", "25.08",
                    cwd=profiles)
    assert out.returncode == 1, out.stderr
    assert "  24.12.json: the profile of Triton 24.12, checked in full" in out.stdout.splitlines()
    assert out.stdout.splitlines()[0].startswith("Models against targets")
    assert out.stdout.rstrip().splitlines()[-1] == "No target where everything loads."


def test_the_junit_and_sarif_of_a_column_name_its_container_and_release(example, profiles):
    out = customops("check", str(example[1]), "--no-cache", "--profile", "24.12.json", "--triton-release", "25.08",
                    "--format", "sarif", cwd=profiles)
    texts = [r["message"]["text"] for r in json.loads(out.stdout)["runs"][0]["results"]]
    assert any(t.startswith("24.12.json (Triton 24.12): ") for t in texts)
    assert any(t.startswith("Triton 25.08: ") for t in texts)
    junit = customops("check", str(example[1]), "--no-cache", "--profile", "24.12.json", "--triton-release",
                      "25.08", "--format", "junit", cwd=profiles)
    assert '(24.12.json (Triton 24.12))"' in junit.stdout and "(Triton 25.08)" in junit.stdout


@pytest.mark.parametrize(("args", "said"), [
    (("--profile", "24.12.json", "--profile", "24.12.json"), "the same container twice"),
    (("--profile", "24.12.json", "--triton-release", "25.08", "--fail-on-target", "23.01"),
     "--fail-on-target 23.01: not one of the targets checked (24.12.json, 25.08)"),
])
def test_a_matrix_that_cannot_be_told_apart_is_one_line(example, profiles, args, said):
    out = customops("check", str(example[1]), "--no-cache", *args, cwd=profiles)
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr


def test_an_image_beside_other_targets_does_not_lend_them_its_baked_repository(profiles):
    """Without a repository, `--image` alone checks the repository baked into the image; beside other targets
    there is no such repository to hold against them: one line, before the image is read."""
    out = customops("check", "--no-cache", "--image", "oci:absent", "--profile", "24.12.json", cwd=profiles)
    assert out.returncode == 2 and "name the model repositories to check against each" in out.stderr
