"""A repository finding has a place code scanning can show: CO101-CO103 of a model directory point at its
config file (line 1 when the problem has no line of its own), or at the directory when it has no config
(`.ipynb_checkpoints`, which the Triton core reads as a model), relative to the checkout, in every format;
a parse error at the end of the file points at its last line, where protoc puts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check(repo: Path, tree: Path, report_format: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(repo.parent / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--container-root",
                           str(tree / "container"), "--format", report_format, "--base-dir", str(repo), *extra],
                          capture_output=True, text=True, cwd=repo.parent, env=env, timeout=300)


def model(repo: Path, name: str, config: str | None, versions: bool = True) -> None:
    (repo / name).mkdir(parents=True)
    if versions:
        (repo / name / "1").mkdir()
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def sarif_locations(result: subprocess.CompletedProcess) -> dict[str, list[tuple[str, int | None]]]:
    by_code: dict[str, list[tuple[str, int | None]]] = {}
    for r in json.loads(result.stdout)["runs"][0]["results"]:
        [where] = r["locations"]
        physical = where["physicalLocation"]
        by_code.setdefault(r["ruleId"], []).append((physical["artifactLocation"]["uri"],
                                                    physical.get("region", {}).get("startLine")))
    return by_code


def test_a_model_directory_without_a_config_is_pointed_at_by_its_findings(tree, tmp_path):
    repo = tmp_path / "models"
    model(repo, ".ipynb_checkpoints", None, versions=False)
    result = check(repo, tree, "sarif")
    assert result.returncode == 1, result.stderr
    assert sarif_locations(result) == {"CO103": [(".ipynb_checkpoints", 1)]}  # line 1, as GitLab's
    [issue] = json.loads(check(repo, tree, "gitlab").stdout)
    assert issue["location"] == {"path": ".ipynb_checkpoints", "lines": {"begin": 1}}


def test_a_problem_without_a_line_points_at_line_1_of_the_config(tree, tmp_path):
    repo = tmp_path / "models"
    model(repo, "m", 'backend: "onnxruntime"\n', versions=False)
    assert sarif_locations(check(repo, tree, "sarif")) == {"CO103": [("m/config.pbtxt", 1)]}
    github = check(repo, tree, "github").stdout
    assert github.startswith("::error file=m/config.pbtxt,line=1,title=CO103::"), github


def test_an_undetermined_backend_points_at_the_config(tree, tmp_path):
    repo = tmp_path / "models"
    model(repo, "m", "max_batch_size: 1\n")
    assert sarif_locations(check(repo, tree, "sarif")) == {"CO102": [("m/config.pbtxt", 1)]}


def test_co101_names_the_model_whose_config_does_not_parse(tree, tmp_path):
    repo = tmp_path / "models"
    model(repo, "m", 'backend: "onnxruntime"\nbogus: 1\n')
    [finding] = json.loads(check(repo, tree, "json").stdout)["findings"]
    assert finding["code"] == "CO101" and finding["message"].startswith("the configuration of model 'm' does not "
                                                                        "parse: "), finding["message"]
    assert (finding["file"], finding["line"]) == ("m/config.pbtxt", 2)


def test_a_parse_error_at_the_end_of_the_file_points_at_its_last_line(tree, tmp_path):
    """Python's protobuf parser puts it on line 4 of a 3-line file (after the final newline)."""
    repo = tmp_path / "models"
    model(repo, "m", 'backend: "onnxruntime"\nmax_batch_size: 1\nname:\n')
    [finding] = json.loads(check(repo, tree, "json").stdout)["findings"]
    assert finding["code"] == "CO101" and (finding["line"], finding["column"]) == (3, 6), finding
