"""Hints that are right (issue #36, 3): a --container-root that is not a container's root is said before the
findings it causes; a run that could not model the server's loads says in every report that it checked the
configs only (never a plain OK); a mistyped option gets its did-you-mean before the usage; a misspelt ensemble
step gets the nearest model name, at its own line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from customops.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
CONFIGS_ONLY = "(configs only: loading not checked)"
WARNING = "has no opt/tritonserver: is it the container's unpacked root?"


def customops(*args: str, cwd: Path = ROOT, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache or Path(os.environ.get("TMPDIR", "/tmp")) /
                                                    "customops-test-cache")}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=env)


def python_repository(path: Path, ensemble_step: str | None = None) -> Path:
    """A repository of one Python model, `ranker`, and where `ensemble_step` is given an ensemble `pipe` whose
    one step names it (at line 7, column 20 of pipe/config.pbtxt; a comment above names it too)."""
    (path / "ranker" / "1").mkdir(parents=True)
    (path / "ranker" / "config.pbtxt").write_text('name: "ranker"\nbackend: "python"\n')
    (path / "ranker" / "1" / "model.py").write_text("")
    if ensemble_step is not None:
        (path / "pipe" / "1").mkdir(parents=True)
        (path / "pipe" / "config.pbtxt").write_text(
            f'name: "pipe"\nplatform: "ensemble"\n# model_name: "{ensemble_step}" in a comment\n'
            f'ensemble_scheduling {{\n  step [\n    {{\n      model_name: "{ensemble_step}"\n'
            '      model_version: -1\n    }\n  ]\n}\n')
    return path


def test_a_container_root_without_opt_tritonserver_is_warned_before_the_report(example, tmp_path):
    repo, _ = example
    wrong = tmp_path / "unpacked"  # the directory above the image's root, say
    (wrong / "rootfs" / "opt" / "tritonserver").mkdir(parents=True)
    result = customops("check", str(repo), "--container-root", str(wrong), "-q", cache=tmp_path / "cache")
    assert result.returncode == 1
    assert result.stderr.startswith(f"customops: warning: --container-root {wrong} {WARNING}\n"), result.stderr
    report = json.loads(customops("check", str(repo), "--container-root", str(wrong), "--format", "json",
                                  cache=tmp_path / "cache").stdout)
    assert any(WARNING in note for note in report["notes"])


def test_a_root_without_a_program_to_model_the_server_says_loading_is_not_modelled_not_none(example, tmp_path):
    repo, _ = example
    empty = tmp_path / "empty"
    empty.mkdir()
    result = customops("check", str(repo), "--container-root", str(empty), "--format", "json",
                       cache=tmp_path / "cache")
    report = json.loads(result.stdout)
    assert not any("None" in note for note in report["notes"]), report["notes"]
    assert any(note.startswith("not checked: loading") and "not modelled" in note for note in report["notes"])
    assert report["summary"]["scope"] == "configs only"


def test_the_fixture_container_is_checked_fully_without_a_warning(example, tmp_path):
    repo, container = example
    result = customops("check", str(repo), "--container-root", str(container), "--format", "json",
                       cache=tmp_path / "cache")
    assert WARNING not in result.stderr and json.loads(result.stdout)["summary"]["scope"] == "full"
    text = customops("check", str(repo), "--container-root", str(container), "-q", cache=tmp_path / "cache")
    assert text.stdout.splitlines()[-1].startswith("FAIL 7 error(s)")
    github = customops("check", str(repo), "--container-root", str(container), "--format", "github",
                       cache=tmp_path / "cache")
    assert "::notice title=customops::" not in github.stdout


def release_check(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return customops("check", str(repo), "--triton-release", "24.12", *args, cwd=tmp_path, cache=tmp_path / "cache")


def test_a_release_check_is_no_plain_ok_in_any_report(tmp_path):
    """--triton-release cannot model loading: exit 0, but every report says the run checked the configs only."""
    repo = python_repository(tmp_path / "models")
    text = release_check(repo, tmp_path)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == (f"OK {CONFIGS_ONLY} 0 error(s), 0 warning(s), 0 info; 0 suppressed; "
                                            "failing at error and above")
    report = json.loads(release_check(repo, tmp_path, "--format", "json").stdout)
    assert report["ok"] is True and report["summary"]["scope"] == "configs only"
    sarif = json.loads(release_check(repo, tmp_path, "--format", "sarif").stdout)["runs"][0]
    assert sarif["properties"]["scope"] == "configs only"
    notification = sarif["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
    assert sarif["invocations"][0]["executionSuccessful"] is True and "loading not checked" in notification
    junit = ET.fromstring(release_check(repo, tmp_path, "--format", "junit").stdout)
    assert [(p.get("name"), p.get("value")) for p in junit.iter("property")] == \
        [("customops.scope", "configs only: loading not checked")]
    github = release_check(repo, tmp_path, "--format", "github")
    assert github.returncode == 0 and github.stdout.startswith("::notice title=customops::configs only: loading not "
                                                               "checked")
    gitlab = release_check(repo, tmp_path, "--format", "gitlab")  # a bare array: the log's summary line says it
    assert json.loads(gitlab.stdout) == [] and f"customops: OK {CONFIGS_ONLY} 0 error(s)" in gitlab.stderr
    files = release_check(repo, tmp_path, "--sarif", "r.sarif", "--junit", "r.xml", "-o", "r.txt")
    assert files.returncode == 0 and files.stderr.startswith(f"customops: OK {CONFIGS_ONLY} 0 error(s)")


def test_the_configs_only_reports_are_valid_by_their_schemas(tmp_path):
    from jsonschema import Draft7Validator
    from test_report_files import SARIF_SCHEMA, junit_schema

    repo = python_repository(tmp_path / "models")
    schema = json.loads((ROOT / "customops" / "schemas" / "check-1.json").read_text())
    Draft7Validator(schema).validate(json.loads(release_check(repo, tmp_path, "--format", "json").stdout))
    junit_schema().validate(release_check(repo, tmp_path, "--format", "junit").stdout)
    if not SARIF_SCHEMA.exists():
        pytest.skip(f"no SARIF schema at {SARIF_SCHEMA}")
    Draft7Validator(json.loads(SARIF_SCHEMA.read_text())).validate(
        json.loads(release_check(repo, tmp_path, "--format", "sarif").stdout))


def subcommand_parsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from subcommand_parsers(sub)


@pytest.mark.parametrize(("args", "meant"), [
    (["check", "--container-rot", "/tmp", "models"], "--container-root"),
    (["check", "--container_root=/tmp", "models"], "--container-root"),
    (["check", "--contianer", "/tmp", "models"], "--container-root"),  # a mistyped abbreviation
    (["launch", "--dry-rn", "--", "tritonserver"], "--dry-run"),
    (["profile", "create", "-o", "p.json", "--contaner-root", "x"], "--container-root"),
    (["scan", "--sybmols", "lib.so"], "--symbols"),
])
def test_a_mistyped_option_gets_did_you_mean_before_the_usage(args, meant):
    result = customops(*args)
    prog = "customops " + " ".join(args[:2] if args[0] == "profile" else args[:1])
    assert result.returncode == 2
    first, second = result.stderr.splitlines()[:2]
    assert first.startswith(f"{prog}: error: unrecognized arguments: ") and first.endswith(f"(did you mean {meant}?)")
    assert second.startswith(f"usage: {prog} ")


def test_every_option_of_every_subcommand_is_found_from_a_transposition_or_a_dropped_letter():
    for parser in subcommand_parsers(build_parser()):
        options = [o for o in parser._option_string_actions if o.startswith("--") and o != "--help"]
        for option in options:
            body = option[2:]
            typos = {f"--{body[:i]}{body[i + 1]}{body[i]}{body[i + 2:]}" for i in range(len(body) - 1)}
            typos |= {f"--{body[:i]}{body[i + 1:]}" for i in range(len(body) - 1)}
            for typo in typos - {option}:
                if any(o.startswith(typo) for o in options):
                    continue  # an option itself, or an abbreviation argparse takes
                assert parser.closest_option(typo) == option, (parser.prog, typo)  # type: ignore[attr-defined]


def test_an_option_like_nothing_gets_no_suggestion():
    result = customops("check", "--bogus", "models")
    assert result.stderr.splitlines()[0] == "customops check: error: unrecognized arguments: --bogus"


def test_a_misspelt_ensemble_step_gets_the_nearest_model_at_its_own_line(tmp_path):
    repo = python_repository(tmp_path / "models", ensemble_step="rankr")
    report = json.loads(release_check(repo, tmp_path, "--format", "json").stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "CO108"]
    assert "'rankr' (did you mean 'ranker'?)" in finding["message"]
    assert (finding["file"], finding["line"], finding["column"]) == ("pipe/config.pbtxt", 7, 20)
    explicit = json.loads(release_check(repo, tmp_path, "--format", "json", "--load-model", "pipe").stdout)
    [finding] = [f for f in explicit["findings"] if f["code"] == "CO108"]  # ranker is not loaded: still named
    assert "(did you mean 'ranker'?)" in finding["message"] and finding["line"] == 7


def test_a_misspelt_load_model_gets_the_nearest_model(tmp_path):
    repo = python_repository(tmp_path / "models")
    report = json.loads(release_check(repo, tmp_path, "--format", "json", "--load-model", "rankr").stdout)
    assert [f["message"] for f in report["findings"] if f["code"] == "CO108"] == [
        "model 'rankr' is asked for (--load-model) but is in no model repository (did you mean 'ranker'?)"]
