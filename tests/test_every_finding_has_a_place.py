"""Every finding has a place code scanning can show: a file of the checkout and a line, in every report format
(JSON file and line, SARIF locations, GitHub's file= and line=, GitLab's path and line, JUnit's file). A finding
about a library points at the line of the text that makes Triton load it (the manifest entry, the config's
op_library_filename, the backend/runtime/platform line of a backend library), matched as the text wrote it;
the other library of a collision is a SARIF relatedLocation and is named in the text-only reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import glibc_release
import pytest
from test_check_codes import TF_OP, Repo, codes, stack_library

from customops.app.check import run_check
from customops.findings import SuppressedBy
from customops.triton.container import from_root
from customops.triton.manifest import Manifest

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("json", "sarif", "github", "gitlab", "junit")
Place = tuple[str, "str | None", "int | None"]  # (code, path relative to the checkout, line)


def report(repo: Path, container: Path, report_format: str) -> str:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(repo.parent / "cache"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--container-root", str(container),
                             "--format", report_format, "--base-dir", str(repo), "--no-cache"],
                            capture_output=True, text=True, cwd=repo.parent, env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    return result.stdout


def places(text: str, report_format: str) -> list[Place]:
    """(code, file, line) of every finding of a report, as the format gives them."""
    if report_format == "json":
        return [(f["code"], f["file"], f["line"]) for f in json.loads(text)["findings"]]
    if report_format == "sarif":
        return [(r["ruleId"], unquote(loc["physicalLocation"]["artifactLocation"]["uri"]),
                 loc["physicalLocation"].get("region", {}).get("startLine", 0))  # 0: the library file itself
                for r in json.loads(text)["runs"][0]["results"] for loc in [*r["locations"],
                                                                             *r.get("relatedLocations", [])]]
    if report_format == "gitlab":
        return [(i["check_name"], i["location"]["path"], i["location"]["lines"]["begin"]) for i in json.loads(text)]
    if report_format == "github":
        found = []
        for line in text.splitlines():
            props = dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
            found.append((props["title"], props.get("file"), int(props["line"]) if "line" in props else None))
        return found
    cases = ET.fromstring(text).iter("testcase")
    return [(case.get("name", "").split(" ")[0], case.get("file"), 0) for case in cases if case.get("name") != "loads"]


def assert_placed(repo: Path, found: list[Place], report_format: str) -> None:
    assert found
    for code, path, line in found:
        assert path and not os.path.isabs(path) and path != "." and (repo / path).exists(), (report_format, code, path)
        if report_format != "junit":  # JUnit's testcases have a file only; JSON has no line for a directory
            assert line is not None or (report_format == "json" and (repo / path).is_dir()), (report_format, code)


def assert_every_format_places_every_finding(repo: Path, container: Path) -> set[str]:
    found_codes: set[str] = set()
    for report_format in FORMATS:
        found = places(report(repo, container, report_format), report_format)
        assert_placed(repo, found, report_format)
        found_codes |= {code for code, _, _ in found}
    return found_codes


def many_problems(repo: Repo) -> Repo:
    """One repository producing as many finding codes as one run can."""
    repo.manifest('[host]\npreload = ["pre/libtable4.so", "pre/libtable8.so", "pre/liba.so", "pre/libb.so"]\n')
    repo.model("pre", 'backend: "onnxruntime"\n', model_file="model.onnx", libtable4_so="example/libtable4.so",
               libtable8_so="example/libtable8.so", liba_so="b/liba.so", libb_so="b/libb.so")
    for name in ("libtable4", "libtable8", "liba", "libb"):
        (repo.models / "pre" / f"{name}_so").rename(repo.models / "pre" / f"{name}.so")
    first, second = repo.library("ort/a/libop.so", "example/libort_op.so"), repo.library("ort/b/libop.so",
                                                                                            "example/libort_op.so")
    repo.model("ort", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: ["{first}", "{second}"] }}\n',
               model_file="model.onnx")
    for name, path, fixture in (("tfa", "tfa/ops/libv.so", "e/v12/libv.so"), ("tfb", "tfb/ops/libv.so",
                                                                            "e/v1only/libv.so"),
                                ("ua", "ua/ops/libua.so", "d/libua.so"), ("ub", "ub/ops/libub.so", "d/libub.so")):
        lib = repo.library(path, fixture)
        repo.model(name, f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n')
    repo.model("rel", 'backend: "onnxruntime"\nmodel_operations { op_library_filename: "ops/libort_op.so" }\n',
               model_file="model.onnx")
    repo.model("mine", 'backend: "mine"\n')
    repo.library("mine/libtriton_mine.so", "example/libtorch_op.so")
    repo.model("broken", 'backend: "onnxruntime"\nbogus: 1\n')
    repo.model("plat", 'platform: "caffe2_netdef"\n')
    repo.model("typo", 'backend: "onnxruntme"\n')
    (repo.models / ".ipynb_checkpoints").mkdir()
    return repo


def test_every_finding_of_many_codes_has_a_place_in_every_format(tree, tmp_path):
    repo = many_problems(Repo(tree, tmp_path))
    found = assert_every_format_places_every_finding(repo.models, repo.root)
    assert {"CO101", "CO102", "CO103", "CO104", "CO201", "CO301", "CO302", "CO402", "CO403", "CO405", "CO406",
            "CO407"} <= found, found


def test_every_finding_of_the_example_has_a_place_in_every_format(example):
    repo, container = example
    found = assert_every_format_places_every_finding(repo, container)
    assert {"CO104", "CO202", "CO301", "CO308", "CO401", "CO501", "CO504"} <= found, found


@pytest.mark.oracle
def test_co309_points_at_the_op_library_filename_line_in_every_format(tree, tmp_path):
    """A rule of its own (rules.executable_stack) places its finding as loading's do: at the text naming it."""
    repo = Repo(tree, tmp_path)
    glibc_release.install(glibc_release.debian_libc("trixie"), repo.root)
    repo.model("m", TF_OP.format(stack_library(repo, tmp_path, "m/ops/libop.so", "execstack")))
    assert "CO309" in assert_every_format_places_every_finding(repo.models, repo.root)
    (place,) = [p for p in places(report(repo.models, repo.root, "json"), "json") if p[0] == "CO309"]
    assert place == ("CO309", "m/config.pbtxt", 2)


# -- focused ------------------------------------------------------------------------------------------------


@pytest.fixture
def repo(tree, tmp_path) -> Repo:
    return Repo(tree, tmp_path)


def sarif_results(repo: Repo, code: str) -> list[dict]:
    results = json.loads(report(repo.models, repo.root, "sarif"))["runs"][0]["results"]
    return [r for r in results if r["ruleId"] == code]


def region(location: dict) -> tuple[str, int | None]:
    physical = location["physicalLocation"]
    return unquote(physical["artifactLocation"]["uri"]), physical.get("region", {}).get("startLine")


def test_co403_points_at_the_manifest_lines_of_both_preloads(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest(
        '[host]\npreload = [\n    "m/libtable4.so",\n    "m/libtable8.so",\n]\n')
    repo.library("m/libtable4.so", "example/libtable4.so")
    repo.library("m/libtable8.so", "example/libtable8.so")
    [result] = sarif_results(repo, "CO403")
    assert [region(loc) for loc in result["locations"]] == [("customops.toml", 3)]
    assert ("customops.toml", 4) in [region(loc) for loc in result.get("relatedLocations", [])], result
    github = [line for line in report(repo.models, repo.root, "github").splitlines() if "title=CO403" in line]
    assert github and all("file=customops.toml,line=3," in line and "customops.toml:4" in line for line in github)
    [issue] = [i for i in json.loads(report(repo.models, repo.root, "gitlab")) if i["check_name"] == "CO403"]
    assert issue["location"] == {"path": "customops.toml", "lines": {"begin": 3}}
    assert "customops.toml:4 (/models/m/libtable8.so)" in issue["description"]


def test_a_finding_about_a_backend_library_points_at_the_backend_line(repo):
    repo.model("m", 'name: "m"\nbackend: "mine"\nmax_batch_size: 0\n')
    lib = repo.library("m/libtriton_mine.so", "example/libtorch_op.so")  # NEEDs libtorch_cpu.so: not found
    [finding] = [f for f in repo.check().findings if f.library == lib]
    assert finding.code == "CO302"
    assert (finding.file, finding.line, finding.column) == (str(repo.models / "m" / "config.pbtxt"), 2, 1)
    assert finding.artifact == str(repo.models / "m" / "libtriton_mine.so")


SUFFIX = """backend: "onnxruntime"
model_operations {
  op_library_filename: "/models/m/ops/libort_op.so"
  op_library_filename: "ops/libort_op.so"  # customops: ignore[CO104] relative on purpose
}
"""


def test_a_relative_op_library_that_is_a_suffix_of_another_gets_its_own_line(repo):
    repo.model("m", SUFFIX, model_file="model.onnx", ops__libort_op_so="example/libort_op.so")
    (repo.models / "m" / "ops" / "libort_op_so").rename(repo.models / "m" / "ops" / "libort_op.so")
    result = repo.check()
    assert "CO104" not in codes(result) and "CO107" not in codes(result), result.findings
    [suppressed] = [f for f in result.suppressed if f.code == "CO104"]
    assert suppressed.line == 4 and suppressed.suppression
    assert suppressed.suppression.suppressed_by is SuppressedBy.CONFIG
    [missing] = [f for f in result.findings if f.code == "CO301"]  # /opt/tritonserver/ops/libort_op.so
    assert (missing.line, missing.column) == (4, 25)


def test_two_op_libraries_of_one_file_name_each_point_at_their_own_line(repo):
    first = repo.library("m/a/libop.so", "example/libort_op.so")
    second = repo.library("m/b/libop.so", "example/libort_op.so")
    repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{\n  op_library_filename: "{first}"\n'
                    f'  op_library_filename: "{second}"\n}}\n', model_file="model.onnx")
    [result] = sarif_results(repo, "CO406")
    assert [region(loc) for loc in result["locations"]] == [("m/config.pbtxt", 4)]  # the copy that fails
    assert ("m/config.pbtxt", 3) in [region(loc) for loc in result["relatedLocations"]]


def test_a_missing_config_in_strict_mode_names_the_model_directory(repo):
    repo.model("m", "")
    (repo.models / "m" / "config.pbtxt").unlink()
    result = run_check([str(repo.models)], Manifest(None), from_root(str(repo.root)), (), auto_complete=False)
    [finding] = [f for f in result.findings if f.code == "CO101"]
    assert str(repo.models / "m") in finding.message and "--strict-model-config" in finding.message
    assert finding.file == str(repo.models / "m")


def test_the_github_file_property_is_never_outside_the_checkout(tree, tmp_path):
    """A finding whose own file is the container's points at its model's config, not at a path of the root."""
    repo = Repo(tree, tmp_path)
    repo.model("m", 'backend: "onnxruntime"\nmodel_operations { op_library_filename: "/opt/nowhere/libx.so" }\n',
               model_file="model.onnx")
    for line in report(repo.models, repo.root, "github").splitlines():
        assert re.search(r"file=m/config\.pbtxt,line=2,", line), line
