"""First contact (issue #18): what a new user meets on a fresh machine. No container and no profile is a usage
error; the manifest and the profile are found from the repository up to its checkout's root (never through
a symbolic link leaving it) and the report names them; the messages of the example say what they mean."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NO_CONTAINER = ("customops: no container to check against: pass --container-root DIR, --profile FILE or "
                "--triton-release YY.MM, or run inside the Triton image\n")
outside_a_container = pytest.mark.skipif(os.path.isdir("/opt/tritonserver"),
                                         reason="a Triton container: / is the container checked")


def customops(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cwd / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def models(where: Path) -> Path:
    """A repository of one ONNX model (no library of its own)."""
    (where / "m" / "1").mkdir(parents=True)
    (where / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    return where


@pytest.fixture(scope="module")
def profile_file(tree, tmp_path_factory) -> Path:
    """A profile of the fixture container (customops profile create)."""
    where = tmp_path_factory.mktemp("profile")
    result = customops("profile", "create", "--container-root", str(tree / "container"), "-o",
                       str(where / "p.json"), cwd=where)
    assert result.returncode == 0, result.stderr
    return where / "p.json"


@outside_a_container
def test_no_container_and_no_profile_is_a_usage_error(tmp_path):
    result = customops("check", str(models(tmp_path / "models")), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr == NO_CONTAINER and result.stdout == ""


def test_container_root_slash_checks_this_machine(tmp_path):
    result = customops("check", str(models(tmp_path / "models")), "--container-root", "/", "--format", "json",
                       cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["container"]["root"] == "/" and report["profile"] is None and report["manifest"] is None


@outside_a_container
def test_manifest_and_profile_are_found_above_the_repository_up_to_the_checkout_root(tmp_path, profile_file):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    repo = models(checkout / "deploy" / "models")
    (checkout / "customops.toml").write_text('[check]\nfail-on = "info"\n')
    shutil.copy(profile_file, checkout / "deploy" / "customops-profile.json")
    result = customops("check", str(repo), "--format", "json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["manifest"] == "customops.toml"  # relative to the checkout: the manifest lies above the repository
    assert report["profile"] == "deploy/customops-profile.json"
    assert report["summary"]["fail_on"] == "info" and report["container"]["source"] == "profile"


def test_a_manifest_above_the_repository_gives_every_path_relative_to_the_checkout(tmp_path):
    """Not the manifest's absolute path beside the models' relative ones: the checkout is the one base."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    repo = models(checkout / "deploy" / "models")
    (checkout / "customops.toml").write_text('[host]\npreload = ["deploy/models/m/libgone.so"]\n')
    result = customops("check", str(repo), "--container-root", "/", cwd=tmp_path)
    assert "CO301 error   customops.toml:2:13: LD_PRELOAD entry " in result.stdout, result.stdout
    report = json.loads(customops("check", str(repo), "--container-root", "/", "--format", "json",
                                  cwd=tmp_path).stdout)
    assert {f["file"] for f in report["findings"] if f["code"] == "CO301"} == {"customops.toml"}
    assert [m["config"] for m in report["models"]] == ["deploy/models/m/config.pbtxt"]


def test_the_text_report_names_the_profile_and_the_image_it_was_made_from(tree, tmp_path):
    """Not the skeleton's directory in customops' cache, which means nothing to anyone."""
    made = customops("profile", "create", "--container-root", str(tree / "container"), "--image",
                     "nvcr.io/nvidia/tritonserver:24.12-py3", "-o", "p.json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    models(tmp_path / "models")
    result = customops("check", "models", "--profile", "p.json", cwd=tmp_path)
    header = result.stdout.splitlines()[0]
    assert header == (f"customops check: 1 model(s) against the profile {tmp_path / 'p.json'} of "
                      "nvcr.io/nvidia/tritonserver:24.12-py3"), header
    report = json.loads(customops("check", "models", "--profile", "p.json", "--format", "json", cwd=tmp_path).stdout)
    assert report["container"]["image"] == "nvcr.io/nvidia/tritonserver:24.12-py3"


def test_an_image_reference_with_a_control_character_is_refused(tree, tmp_path):
    made = customops("profile", "create", "--container-root", str(tree / "container"), "--image", "a\x1b[2Jb",
                     "-o", "p.json", cwd=tmp_path)
    assert made.returncode == 2 and made.stderr == "customops: --image a\\x1b[2Jb: contains a control character\n"
    assert not (tmp_path / "p.json").exists()


@outside_a_container
def test_discovery_stops_at_the_checkout_root(tmp_path, profile_file):
    """Above the checkout (here: a manifest and a profile beside it) nothing is used."""
    (tmp_path / "customops.toml").write_text('[check]\nfail-on = "info"\n')
    shutil.copy(profile_file, tmp_path / "customops-profile.json")
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    result = customops("check", str(models(checkout / "models")), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr == NO_CONTAINER


@outside_a_container
def test_discovery_without_a_checkout_looks_in_the_repository_only(tmp_path, profile_file):
    shutil.copy(profile_file, tmp_path / "customops-profile.json")
    result = customops("check", str(models(tmp_path / "models")), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr == NO_CONTAINER


def test_a_manifest_above_the_repository_symlinked_out_of_the_checkout_is_refused(tmp_path):
    secret = tmp_path / "secret.toml"
    secret.write_text('[host]\npreload = ["/SECRET_CANARY_TOKEN"]\n')
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "customops.toml").symlink_to(secret)
    result = customops("check", str(models(checkout / "models")), "--container-root", "/", "--format", "json",
                       cwd=tmp_path)
    assert result.returncode == 2 and "symbolic link out of the model repository" in result.stderr
    assert result.stderr.count("\n") == 1 and "SECRET_CANARY" not in result.stdout + result.stderr


def test_a_manifest_symlinked_inside_the_checkout_is_used(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "config").mkdir()
    (checkout / "config" / "customops.toml").write_text('[check]\nfail-on = "info"\n')
    repo = models(checkout / "models")
    (repo / "customops.toml").symlink_to("../config/customops.toml")
    result = customops("check", str(repo), "--container-root", "/", "--format", "json", cwd=tmp_path)
    assert json.loads(result.stdout)["summary"]["fail_on"] == "info", result.stderr


@outside_a_container
def test_a_profile_above_the_repository_symlinked_out_of_the_checkout_is_refused(tmp_path, profile_file):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "customops-profile.json").symlink_to(profile_file)
    result = customops("check", str(models(checkout / "models")), cwd=tmp_path)
    assert result.returncode == 2 and "symbolic link out of the model repository" in result.stderr
    assert "customops-profile.json" in result.stderr and result.stderr.count("\n") == 1


def test_the_text_report_names_the_manifest_and_profile_used(tmp_path, profile_file):
    repo = models(tmp_path / "models")
    (repo / "customops.toml").write_text("")
    result = customops("check", "models", "--profile", str(profile_file), cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert f"note: using the profile {profile_file}\n" in result.stdout
    assert "note: using the manifest models/customops.toml\n" in result.stdout
    report = json.loads(customops("check", "models", "--profile", str(profile_file), "--format", "json",
                                  cwd=tmp_path).stdout)
    assert report["manifest"] == "customops.toml" and report["profile"] == str(profile_file)


@pytest.fixture(scope="module")
def example_report(tmp_path_factory) -> str:
    """The text report of the bundled example (a copy of it), as the README shows it."""
    from fixtures.example import install

    where = tmp_path_factory.mktemp("example")
    repo = where / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repo, ignore=shutil.ignore_patterns("*.so"))
    container = install(repo)
    result = customops("check", str(repo), "--container-root", str(container), cwd=where)
    assert result.returncode == 1, result.stderr
    return result.stdout


def test_one_missing_symbol_is_singular(example_report):
    assert "1 of its symbols is missing there" in example_report
    assert "symbols are missing" not in example_report


def test_no_findings_lists_only_models_no_finding_concerns(example_report):
    """ranker_pt ships the preload of the server section's CO401 (which points at the manifest line listing
    it): it has a finding."""
    assert "CO401 warning customops.toml:11:13: preloaded /models/ranker_pt/ops/libc10_interposer.so" in \
        example_report
    assert "\nno findings: custom, text_tf, upscaler_trt\n" in example_report


def test_a_config_error_prints_its_location_once(tmp_path):
    repo = models(tmp_path / "models")
    (repo / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\nbogus: 1\n')
    result = customops("check", "models", "--container-root", "/", cwd=tmp_path)
    line = next(line for line in result.stdout.splitlines() if line.startswith("CO101"))
    assert line.count("config.pbtxt") == 1 and "m/config.pbtxt:2:" in line, line
    report = json.loads(customops("check", "models", "--container-root", "/", "--format", "json",
                                  cwd=tmp_path).stdout)
    finding = next(f for f in report["findings"] if f["code"] == "CO101")
    assert finding["file"] == "m/config.pbtxt" and finding["line"] == 2 and "config.pbtxt" not in finding["message"]


def test_a_model_directory_given_instead_of_the_repository_is_a_usage_error(tmp_path):
    models(tmp_path / "models")
    result = customops("check", "models/m", "--container-root", "/", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr == (f"customops: {tmp_path / 'models' / 'm'}: is a model directory; pass its repository "
                             "(the parent directory)\n")


def test_a_config_symlink_loop_is_CO101_saying_so_not_an_undetermined_backend(tmp_path):
    repo = models(tmp_path / "models")
    (repo / "m" / "config.pbtxt").unlink()
    (repo / "m" / "config.pbtxt").symlink_to("config.pbtxt")
    report = json.loads(customops("check", "models", "--container-root", "/", "--format", "json",
                                  cwd=tmp_path).stdout)
    [finding] = report["findings"]
    assert finding["code"] == "CO101" and finding["file"] == "m/config.pbtxt"
    assert finding["message"] == ("the configuration of model 'm' is a symbolic link loop: the server sees no "
                                  "configuration")


def test_a_dangling_config_symlink_names_its_target(tmp_path):
    repo = models(tmp_path / "models")
    (repo / "m" / "config.pbtxt").unlink()
    (repo / "m" / "config.pbtxt").symlink_to("../shared/config.pbtxt")
    report = json.loads(customops("check", "models", "--container-root", "/", "--format", "json",
                                  cwd=tmp_path).stdout)
    [finding] = report["findings"]
    assert finding["code"] == "CO101" and "link to ../shared/config.pbtxt, which does not exist" in finding["message"]


@pytest.mark.parametrize("report_format", ["text", "json"])
def test_output_into_a_missing_directory_is_bad_input_not_an_internal_error(tmp_path, report_format):
    models(tmp_path / "models")
    result = customops("check", "models", "--container-root", "/", "--format", report_format, "--output",
                       "nowhere/report", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "customops: nowhere/report: No such file or directory\n"
