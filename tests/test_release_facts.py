"""--triton-release YY.MM (issue #18): only the release's facts are known, not its files. The check reports
what those facts allow (a backend the release does not ship, a library in the repository itself) and says
what it cannot see (the container's backend directory and libraries); it never reports a backend the
release ships as missing. A misspelled backend name gets a suggestion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"


def check(*args: str, cwd: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cwd / "cache"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "customops", "check", *args, "--format", "json", "--no-cache"],
                            capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def repository(where: Path, **backends: str) -> Path:
    for name, backend in backends.items():
        (where / name / "1").mkdir(parents=True)
        (where / name / "config.pbtxt").write_text(f'backend: "{backend}"\n')
        if backend == "tensorflow":  # the core tells a TensorFlow model's platform from its file
            (where / name / "1" / "model.graphdef").write_bytes(b"")
    return where


def codes(report: dict, model: str) -> list[str]:  # type: ignore[type-arg]
    return sorted(f["code"] for f in report["findings"] if f.get("model") == model)


def test_a_backend_the_release_ships_is_not_reported_missing(tmp_path):
    repo = repository(tmp_path / "models", ort="onnxruntime", pt="pytorch", trt="tensorrt")
    status, report = check(str(repo), "--triton-release", "25.03", cwd=tmp_path)
    assert status == 0 and report["findings"] == []
    notes = "\n".join(report["notes"])
    assert "assumed: the container ships the onnxruntime backend" in notes
    assert "not checked: loading and symbol resolution" in notes


def test_a_backend_the_release_dropped_is_CO203(tmp_path):
    repo = repository(tmp_path / "models", tf="tensorflow")
    status, report = check(str(repo), "--triton-release", "25.03", cwd=tmp_path)
    assert status == 1 and codes(report, "tf") == ["CO203"]
    status, report = check(str(repo), "--triton-release", "25.02", cwd=tmp_path)
    assert status == 0 and codes(report, "tf") == []


def test_a_custom_backend_in_the_model_directory_is_found_with_a_release(tmp_path):
    repo = repository(tmp_path / "models", custom="mine")
    (repo / "custom" / "libtriton_mine.so").write_bytes(b"\x7fELF")
    status, report = check(str(repo), "--triton-release", "25.03", cwd=tmp_path)
    assert status == 0 and codes(report, "custom") == []
    assert not any("not checked: the backend library" in n for n in report["notes"])


def test_a_custom_backend_elsewhere_is_not_checked_with_a_release_and_the_report_says_so(tmp_path):
    repo = repository(tmp_path / "models", custom="mine")
    status, report = check(str(repo), "--triton-release", "25.03", cwd=tmp_path)
    assert status == 0 and codes(report, "custom") == []
    assert any(n.startswith("not checked: the backend library of custom:") for n in report["notes"])


def test_the_example_with_a_release_reports_only_what_its_facts_show(tmp_path):
    _status, report = check(str(EXAMPLE), "--triton-release", "25.03", cwd=tmp_path)
    found = {f["code"] for f in report["findings"]}
    assert "CO201" not in found and {f["model"] for f in report["findings"] if f["code"] == "CO203"} == {
        "text_tf", "drift_tf"}


def test_a_misspelled_backend_gets_a_suggestion(tmp_path, tree):
    repo = repository(tmp_path / "models", m="onnxruntme")
    status, report = check(str(repo), "--container-root", str(tree / "container"), cwd=tmp_path)
    [finding] = [f for f in report["findings"] if f["model"] == "m"]
    assert status == 1 and finding["code"] == "CO201"
    assert finding["message"].endswith("(did you mean backend 'onnxruntime'?)")


def test_a_backend_name_close_to_none_gets_no_suggestion(tmp_path, tree):
    repo = repository(tmp_path / "models", m="zzz")
    _status, report = check(str(repo), "--container-root", str(tree / "container"), cwd=tmp_path)
    [finding] = [f for f in report["findings"] if f["model"] == "m"]
    assert "did you mean" not in finding["message"]


@pytest.mark.parametrize("backend", ["python", "pytorch", "onnxruntime"])
def test_a_known_backend_the_container_lacks_is_never_corrected_into_another(tmp_path, backend):
    """`python` is no typo of `pytorch`: a backend name Triton knows gets "the container has no
    backends/<name>", whatever other backends the container ships, an empty root included."""
    container = tmp_path / "container"
    (container / "opt/tritonserver/backends/pytorch").mkdir(parents=True)
    if backend == "pytorch":
        (container / "opt/tritonserver/backends/pytorch").rmdir()
    repo = repository(tmp_path / "models", m=backend)
    status, report = check(str(repo), "--container-root", str(container), cwd=tmp_path)
    [finding] = [f for f in report["findings"] if f["model"] == "m"]
    assert status == 1 and finding["code"] in ("CO201", "CO203")  # CO203: a framework backend it dropped
    assert "did you mean" not in finding["message"]
    if finding["code"] == "CO201":
        assert finding["message"].endswith(f"(the container has no /opt/tritonserver/backends/{backend})")
