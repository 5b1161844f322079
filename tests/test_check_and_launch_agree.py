"""`check` and `launch` decide the same thing: the TensorRT plugins given on the server's own command line
(`--backend-config=tensorrt,plugins=A;B`, split at `;` as tensorrt_backend/src/tensorrt.cc splits them) are
modelled by `check -- tritonserver ...`, by `launch --dry-run` and by `check --profile` of a profile that
recorded that command line: the same findings and the same exit status on every route (check said OK, exit
0, to a typo'd plugin path that launch refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from elf_tools import gcc_shared

ROOT = Path(__file__).resolve().parent.parent


def customops(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cwd / "cache"), "PYTHONPATH": str(ROOT)}
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def repository(where: Path, tree: Path) -> Path:
    """A TensorRT model (its backend loads the plugins) and a directory holding one real plugin library."""
    repo = where / "models"
    (repo / "t" / "1").mkdir(parents=True)
    (repo / "t" / "config.pbtxt").write_text('platform: "tensorrt_plan"\n')
    (repo / "t" / "1" / "model.plan").write_bytes(b"")
    (repo / "t" / "plugins").mkdir()
    gcc_shared(repo / "t" / "plugins" / "libplugin.so", "int plugin_entry(void) { return 1; }\n")
    return repo


def routes(where: Path, tree: Path, plugins: str) -> dict[str, subprocess.CompletedProcess]:
    container = str(tree / "container")
    repo = repository(where, tree)
    server = ["tritonserver", f"--model-repository={repo}", f"--backend-config=tensorrt,plugins={plugins}"]
    profile = customops("profile", "create", "--container-root", container, "-o", "profile.json", "--",
                        "--model-repository=/models", f"--backend-config=tensorrt,plugins={plugins}", cwd=where)
    assert profile.returncode == 0, profile.stderr
    return {
        "check --": customops("check", "--format", "json", "--container-root", container, "--", *server, cwd=where),
        "launch --dry-run": customops("launch", "--dry-run", "--container-root", container, "--", *server,
                                      cwd=where),
        "check --profile": customops("check", str(repo), "--format", "json", "--profile", "profile.json",
                                     cwd=where),
    }


def plugin_codes(result: subprocess.CompletedProcess) -> set[str]:
    """The codes about plugin libraries: the JSON report's, or those launch prints before refusing."""
    if result.stdout.startswith("{"):
        return {f["code"] for f in json.loads(result.stdout)["findings"] if "plugin" in f["message"]}
    return {line.split()[0] for line in result.stderr.splitlines() if line.startswith("CO") and "plugin" in line}


@pytest.mark.parametrize("plugins", ["/models/t/plugins/libplugn.so",
                                     "/models/t/plugins/libplugin.so;/models/t/plugins/libplugn.so"])
def test_a_missing_plugin_of_the_command_line_fails_every_route(tree, tmp_path, plugins):
    results = routes(tmp_path, tree, plugins)
    for route, result in results.items():
        assert result.returncode == 1 and plugin_codes(result) == {"CO301"}, (route, result.stdout, result.stderr)


def test_plugins_of_the_command_line_that_exist_pass_every_route(tree, tmp_path):
    results = routes(tmp_path, tree, "/models/t/plugins/libplugin.so;")
    for route, result in results.items():
        assert result.returncode == 0 and plugin_codes(result) == set(), (route, result.stdout, result.stderr)


# Every server flag customops reads, over one fixture: check --, launch --dry-run, env --fail-on and
# profile create + check --profile decide the same (the error codes found, and the exit status), because one
# function (customops.app.server_command) reads the command line for all of them.
def flag_repositories(where: Path, tree: Path) -> tuple[Path, Path]:
    """`first`: a TensorRT model with its plugin (t) and one without a config that auto-complete completes
    from its model.plan (nocfg); `second`: a model whose backend no container has (broken)."""
    first = repository(where, tree)
    (first / "nocfg" / "1").mkdir(parents=True)
    (first / "nocfg" / "1" / "model.plan").write_bytes(b"")
    second = where / "more"
    (second / "broken" / "1").mkdir(parents=True)
    (second / "broken" / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    return first, second


FLAGS = {  # scenario: (the repositories given, the rest of the server's arguments)
    "defaults": (1, []),
    "disable-auto-complete-config": (1, ["--disable-auto-complete-config"]),
    "strict-model-config": (1, ["--strict-model-config=true"]),
    "backend-directory": (1, ["--backend-directory=/opt/tritonserver/nowhere"]),
    "backend-config tensorrt plugins": (1, ["--backend-config=tensorrt,plugins=/models/t/plugins/libplugg.so"]),
    "backend-config of another backend": (1, ["--backend-config=onnxruntime,default-max-batch-size=4"]),
    "model-repository repeated": (2, []),
    "model-control-mode explicit with load-model": (2, ["--model-control-mode=explicit", "--load-model=t"]),
    "model-control-mode explicit without load-model": (2, ["--model-control-mode=explicit"]),
}


def error_codes(result: subprocess.CompletedProcess) -> list[str]:
    """The error findings: the JSON report's, or the lines of the report launch and env print when they refuse."""
    if result.stdout.startswith("{"):
        return sorted(f["code"] for f in json.loads(result.stdout)["findings"] if f["severity"] == "error")
    return sorted(line.split()[0] for line in result.stderr.splitlines()
                  if line.startswith("CO") and line.split()[1:2] == ["error"])


def flag_routes(where: Path, tree: Path, count: int, flags: list[str]) -> dict[str, subprocess.CompletedProcess]:
    container = str(tree / "container")
    repositories = flag_repositories(where, tree)[:count]
    server = ["tritonserver", *(f"--model-repository={r}" for r in repositories), *flags]
    in_container = ["/models"] if count == 1 else [f"/models/{r.name}" for r in repositories]
    profile = customops("profile", "create", "--container-root", container, "-o", "profile.json", "--",
                        *(f"--model-repository={r}" for r in in_container), *flags, cwd=where)
    assert profile.returncode == 0, profile.stderr
    return {
        "check --": customops("check", "--format", "json", "--container-root", container, "--", *server, cwd=where),
        "launch --dry-run": customops("launch", "--dry-run", "--container-root", container, "--", *server,
                                      cwd=where),
        "env --fail-on error": customops("env", "--fail-on", "error", "--container-root", container, "--", *server,
                                         cwd=where),
        "check --profile": customops("check", *map(str, repositories), "--format", "json", "--profile",
                                     "profile.json", cwd=where),
    }


@pytest.mark.parametrize("scenario", list(FLAGS))
def test_every_server_flag_customops_reads_gives_one_decision_on_every_route(tree, tmp_path, scenario):
    count, flags = FLAGS[scenario]
    results = flag_routes(tmp_path, tree, count, flags)
    decided = {route: (r.returncode, error_codes(r)) for route, r in results.items()}
    assert len(set(map(str, decided.values()))) == 1, (decided, {k: r.stderr[-800:] for k, r in results.items()})
    status, codes = decided["check --"]
    assert status in (0, 1) and (status == 1) == bool(codes), decided
    passes = {"defaults", "backend-config of another backend", "model-control-mode explicit with load-model",
              "model-control-mode explicit without load-model"}
    assert (status == 0) == (scenario in passes), decided


@pytest.mark.parametrize("command", [["check", "--format", "json"], ["launch", "--dry-run"],
                                     ["env", "--fail-on", "error"]])
def test_a_server_command_line_without_a_repository_is_refused_by_every_route(tree, tmp_path, command):
    """The core refuses to start without --model-repository (core/src/server.cc): so do check, launch and env."""
    result = customops(*command, "--container-root", str(tree / "container"), "--", "tritonserver", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip().endswith("--model-repository must be specified"), result.stderr


@pytest.mark.parametrize("command", [["check"], ["launch", "--dry-run"], ["env"]])
def test_a_server_command_line_that_lost_its_program_names_the_fix(tree, tmp_path, command):
    """`launch -- --model-repository=R`: the first word is the program; an option there is a missing program,
    never a program to exec."""
    result = customops(*command, "--container-root", str(tree / "container"), "--", "--model-repository=models",
                       cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    assert line.endswith("give the program first: -- tritonserver --model-repository=models ..."), line


def test_a_server_command_line_without_the_separator_says_where_it_goes(tree, tmp_path):
    """`check --container-root C tritonserver --model-repository=R`: `--` forgotten."""
    repo = repository(tmp_path, tree)
    result = customops("check", "--container-root", str(tree / "container"), "tritonserver",
                       f"--model-repository={repo}", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    assert "the server's command line after --" in line and "-- tritonserver --model-repository=DIR" in line, line


def test_a_profile_whose_recorded_command_line_the_server_refuses_is_refused_when_made(tree, tmp_path):
    result = customops("profile", "create", "--container-root", str(tree / "container"), "-o", "p.json", "--",
                       "--model-repository=/models", "--load-model=t", cwd=tmp_path)
    assert result.returncode == 2 and "--model-control-mode=explicit" in result.stderr, result.stderr
    assert not (tmp_path / "p.json").exists()


def test_launch_models_the_library_path_it_execs_the_server_with(container, tmp_path):
    """The server inherits launch's own LD_LIBRARY_PATH after customops' directories (kept as it is: an empty
    entry is the working directory): its check must model that very value. A preload whose dependency lies
    only in an inherited directory loads in the server; launch refused it (CO302) while it ignored the value."""
    dependency = gcc_shared(container / "opt" / "extra" / "libextradep.so", "int dep_fn(void) { return 1; }\n",
                            "-Wl,-soname,libextradep.so")
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    gcc_shared(repo / "libpre.so", "int dep_fn(void); int pre(void) { return dep_fn(); }\n",
               f"-L{dependency.parent}", "-lextradep")
    (repo / "customops.toml").write_text('[host]\npreload = ["libpre.so"]\n')
    command = ["launch", "--dry-run", "--container-root", str(container), "--", "tritonserver",
               f"--model-repository={repo}"]
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    env.pop("LD_PRELOAD", None)
    refused = subprocess.run([sys.executable, "-m", "customops", *command], capture_output=True, text=True,
                             env={k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}, timeout=300)
    assert refused.returncode == 1 and "CO302" in refused.stderr, refused.stderr
    started = subprocess.run([sys.executable, "-m", "customops", *command], capture_output=True, text=True,
                             env={**env, "LD_LIBRARY_PATH": "::/opt/extra"}, timeout=300)
    assert started.returncode == 0, started.stderr
