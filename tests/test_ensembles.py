"""Triton core's ensemble rules, stated without the core (tests/test_triton_core.py confirms them with the real
core where root and the built oracle exist): an ensemble is served only when it has ensemble_scheduling and
every model its steps name is in a repository and served (core model_config_utils.cc ValidateEnsembleConfig,
model_repository_manager.cc's dependency graph: "ensemble 'E' depends on 'M' which has no loaded version.")."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from customops import cli

IO = ('input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
      'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')


def ensemble(*steps: str) -> str:
    listed = ", ".join(f'{{ model_name: "{s}" model_version: -1 }}' for s in steps)
    return f'platform: "ensemble"\n{IO}ensemble_scheduling {{\n  step [ {listed} ]\n}}\n'


def findings(tmp_path: Path, models: dict[str, str]) -> list[tuple[str, str, int | None, str]]:
    """(code, model, line, predicted) of `customops check` over a repository of `models` (name -> config.pbtxt),
    configs only (--triton-release): the ensemble rules need no container."""
    for name, config in models.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(config)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["check", str(tmp_path), "--triton-release", "25.01", "--format", "json", "--no-cache"])
    return [(f["code"], f["model"], f["line"], f["predicted"]) for f in json.loads(out.getvalue())["findings"]]


def test_an_ensemble_whose_steps_are_all_served_is_served(tmp_path):
    assert findings(tmp_path, {"m": 'backend: "onnxruntime"\n', "e": ensemble("m")}) == []


def test_an_ensemble_without_ensemble_scheduling_is_not_served(tmp_path):
    message = "ensemble scheduling must be set for ensemble e whose platform is ensemble"
    assert findings(tmp_path, {"e": f'platform: "ensemble"\n{IO}'}) == [("CO109", "e", None, message)]


def test_an_ensemble_of_a_failing_ensemble_fails_too(tmp_path):
    got = findings(tmp_path, {"e": f'platform: "ensemble"\n{IO}', "top": ensemble("e")})
    assert [(code, model) for code, model, _, _ in got] == [("CO109", "e"), ("CO109", "top")]
    assert got[1][3] == "ensemble 'top' depends on 'e' which has no loaded version."


def test_an_ensemble_of_a_model_with_an_invalid_config_is_not_served(tmp_path):
    got = findings(tmp_path, {"m": 'name: "other"\nbackend: "onnxruntime"\n', "e": ensemble("m")})
    assert sorted((code, model) for code, model, _, _ in got) == [("CO101", "m"), ("CO109", "e")]
    assert ("CO109", "e", None, "ensemble 'e' depends on 'm' which has no loaded version.") in got


def test_a_step_naming_a_model_in_no_repository_is_reported_at_that_step(tmp_path):
    got = findings(tmp_path, {"model": 'backend: "onnxruntime"\n', "e": ensemble("modle")})
    assert got == [("CO108", "e", 5, "ensemble e contains models that are not available or ambiguous: modle")]
