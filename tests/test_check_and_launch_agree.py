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
