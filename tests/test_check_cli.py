"""customops check from the command line: formats, exit codes, errors, and a repository left untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"
SARIF_SCHEMA = ROOT.parent / "shared" / "data" / "sarif-schema-2.1.0.json"


def customops(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(Path(os.environ.get("TMPDIR", "/tmp")) / "customops-test-cache")}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_text_report_and_exit_status_1_for_errors(example):
    repo, container = example
    result = customops("check", str(repo), "--container-root", str(container))
    assert result.returncode == 1, result.stderr
    assert "CO308 error" in result.stdout and "FAIL" in result.stdout


def test_json_report_is_versioned_and_lists_every_finding(example):
    repo, container = example
    result = customops("check", str(repo), "--container-root", str(container), "--format", "json")
    report = json.loads(result.stdout)
    assert report["schema"] == "customops.check/1" and report["summary"]["exit_code"] == 1
    first = report["findings"][0]
    assert {"code", "severity", "message", "model", "library", "symbol", "predicted", "evidence", "hint"} <= set(first)
    assert report["plan"]["server_args"] == ["--backend-config=tensorrt,plugins=/models/segmenter_trt/plugins/"
                                             "libtrt8_plugin.so;/models/upscaler_trt/plugins/libupscale_plugin.so"]
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "customops" / "schemas" / "check-1.json").read_text())
    Draft202012Validator(schema).validate(report)


def test_sarif_report_is_valid_and_points_at_repository_files(example):
    repo, container = example
    result = customops("check", str(repo), "--container-root", str(container), "--format", "sarif")
    sarif = json.loads(result.stdout)
    if SARIF_SCHEMA.exists():
        Draft7Validator(json.loads(SARIF_SCHEMA.read_text())).validate(sarif)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif["runs"][0]["results"] if "locations" in r}
    assert "detector_ort/config.pbtxt" in uris  # the line naming the library: code scanning shows no binary
    related = {r["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"]
               for r in sarif["runs"][0]["results"] if "relatedLocations" in r}
    assert "detector_ort/ops/libort_noentry.so" in related
    assert all(not u.startswith("/") or "/opt/tritonserver" in u for u in uris)


def test_github_annotations(example):
    repo, container = example
    result = customops("check", str(repo), "--container-root", str(container), "--format", "github")
    assert any(line.startswith("::error file=detector_ort/config.pbtxt,line=3,col=42,title=CO308::")
               for line in result.stdout.splitlines())


def test_fail_on_warning_and_exit_0_when_clean(example, tmp_path):
    repo, container = example
    for name in os.listdir(repo):
        if name not in ("text_tf", "ranker_pt"):
            shutil.rmtree(repo / name) if (repo / name).is_dir() else (repo / name).unlink()
    assert customops("check", str(repo), "--container-root", str(container)).returncode == 0


def test_output_file(example, tmp_path):
    repo, container = example
    out = tmp_path / "report.json"
    customops("check", str(repo), "--container-root", str(container), "--format", "json", "--output", str(out))
    assert json.loads(out.read_text())["schema"] == "customops.check/1"


def test_checking_and_launching_never_modify_the_repository(example):
    repo, container = example

    def snapshot() -> dict:
        return {str(p): (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
                for p in sorted(repo.rglob("*"))}

    before = snapshot()
    for fmt in ("text", "json", "sarif", "junit", "github", "gitlab"):
        customops("check", str(repo), "--container-root", str(container), "--format", fmt)
    for _ in range(2):  # the second run takes the cached decision
        customops("launch", "--container-root", str(container), "--mount", f"{repo}:/models", "--warn-only",
                  "--dry-run", "--", "tritonserver", "--model-repository=/models")
    customops("env", "--container-root", str(container), "--mount", f"{repo}:/models", "--", "tritonserver",
              "--model-repository=/models")
    assert snapshot() == before


@pytest.mark.parametrize(("args", "message"), [
    (("check", "/nonexistent/repo", "--container-root", "/"), "/nonexistent/repo: model repository does not exist"),
    (("check", "{repo}", "--container-root", "/nonexistent"), "/nonexistent: container root is not a directory"),
    (("check", "{repo}", "--triton-release", "99.99"), "99.99: unknown Triton release"),
    (("check", "{repo}", "--profile", "{repo}/customops.toml"), "not a customops profile"),
    (("check", "{repo}", "--manifest", "/nonexistent.toml"), "/nonexistent.toml: manifest not found"),
    (("scan", "{repo}/customops.toml"), "customops.toml: not an ELF file"),
    (("explain", "CO999"), "unknown code 'CO999'"),
])
def test_bad_input_is_one_line_and_exit_status_2(example, args, message):
    repo, _container = example
    result = customops(*(a.replace("{repo}", str(repo)) for a in args))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_a_manifest_with_an_unknown_key_is_exit_status_2(example):
    repo, container = example
    (repo / "customops.toml").write_text("[tensorrt]\nplugins = []\nloads = 1\n")
    result = customops("check", str(repo), "--container-root", str(container))
    assert result.returncode == 2 and "CO106 unknown key 'loads' in [tensorrt]" in result.stderr


def test_explain_prints_the_template_for_every_code():
    from customops.codes import CODES

    listing = customops("explain").stdout
    for code in CODES:
        assert code in listing
        text = customops("explain", code).stdout
        for heading in ("What it detects", "Why it matters", "How to fix it", "How to suppress it"):
            assert heading in text


def test_a_cached_report_is_reused_only_while_nothing_it_depends_on_changes(example, tmp_path):
    repo, shared_container = example
    container = tmp_path / "container"  # a private copy: the fixture container is shared by every test
    shutil.copytree(shared_container, container, symlinks=True)
    cache = tmp_path / "cache"
    argv = ("check", str(repo), "--container-root", str(container), "--format", "json", "--cache-dir", str(cache))
    first = customops(*argv)
    assert any(f["code"] == "CO501" and "libnvinfer.so.8 (TensorRT 8), which is not found" in f["message"]
               for f in json.loads(first.stdout)["findings"])
    assert list((cache / "check").rglob("*")), "the report was not cached"
    assert customops(*argv).stdout == first.stdout
    # The missing library appears in a directory the search looked in: the directory changed, so must the answer.
    system_dir = container / "usr/lib/x86_64-linux-gnu"
    shutil.copy(system_dir / "libnvinfer.so.10", system_dir / "libnvinfer.so.8")
    after = customops(*argv)
    assert after.stdout != first.stdout
    assert after.stdout == customops("check", str(repo), "--container-root", str(container), "--format", "json",
                                     "--no-cache").stdout
    assert not any("libnvinfer.so.8" in f["message"] and "not found" in f["message"]
                   for f in json.loads(after.stdout)["findings"])


def test_code_scanning_paths_resolve_from_the_git_checkout_root(example, tmp_path):
    """GitHub resolves a SARIF location (and a workflow annotation's file=) from the repository root, not from the
    model repository: every path customops writes must name an existing file from there, and a line inside it."""
    repo, container = example
    checkout = repo.parent
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    sarif = json.loads(customops("check", str(repo), "--container-root", str(container), "--format", "sarif").stdout)
    located = [r["locations"][0]["physicalLocation"] for r in sarif["runs"][0]["results"] if "locations" in r]
    assert located
    for location in located:
        uri = location["artifactLocation"]["uri"]
        path = uri if uri.startswith("/") else str(checkout / uri)
        assert uri.startswith(repo.name + "/") or "/opt/tritonserver" in uri
        assert os.path.exists(path) or "/opt/tritonserver" in uri, uri
        if "region" in location:
            assert location["region"]["startLine"] <= len(Path(path).read_text().splitlines())
    github = customops("check", str(repo), "--container-root", str(container), "--format", "github").stdout
    files = [line.split("file=", 1)[1].split(",", 1)[0] for line in github.splitlines() if "file=" in line]
    assert files and all((checkout / f).exists() for f in files if not f.startswith("/"))
    elsewhere = customops("check", str(repo), "--container-root", str(container), "--format", "github",
                          "--base-dir", str(repo)).stdout
    assert "file=detector_ort/config.pbtxt,line=3,col=42," in elsewhere


@pytest.mark.parametrize("report_format", ["junit", "github", "gitlab"])
def test_a_run_that_cannot_check_still_writes_its_ci_report(tmp_path, report_format):
    """Exit 2 (bad input) still leaves the --output file, saying why: the upload step after it finds it (SARIF
    excepted: tests/test_report_files.py)."""
    out = tmp_path / f"report.{report_format}"
    result = customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", "--format", report_format,
                       "--output", str(out))
    assert result.returncode == 2 and "model repository does not exist" in result.stderr
    text = out.read_text()
    assert "model repository does not exist" in text
    if report_format == "junit":
        assert ET.fromstring(text).get("errors") == "1"
    elif report_format == "gitlab":
        assert json.loads(text)[0]["severity"] == "blocker"
    else:
        assert text.startswith("::error title=customops::")


def test_a_finding_about_a_library_a_config_names_points_at_that_line_and_column(example):
    repo, container = example
    report = json.loads(customops("check", str(repo), "--container-root", str(container), "--format", "json").stdout)
    located = [f for f in report["findings"] if f["file"] == "tokenizer_ort/config.pbtxt"]
    assert {f["code"] for f in located} >= {"CO104", "CO301"}
    lines = (repo / "tokenizer_ort" / "config.pbtxt").read_text().splitlines()
    for f in located:
        assert lines[f["line"] - 1][f["column"] - 1:].startswith("ops/libort_op.so"), f


def test_gitlab_code_quality_issues_have_the_required_fields_and_land_in_the_checkout(example):
    """GitLab's Code Quality report: description, check_name, fingerprint, severity (info|minor|major|critical|
    blocker), location.path relative to the checkout and location.lines.begin; one fingerprint per finding."""
    repo, container = example
    issues = json.loads(customops("check", str(repo), "--container-root", str(container), "--format",
                                  "gitlab").stdout)
    assert issues
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert issue["location"]["lines"]["begin"] >= 1
        path = issue["location"]["path"]
        assert path.startswith("/opt/tritonserver") or (repo / path).exists(), path
    assert len({i["fingerprint"] for i in issues}) == len(issues)
