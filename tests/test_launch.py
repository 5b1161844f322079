"""customops launch: the check first, then exec of the real program with exactly the environment and
arguments the loaders need; the same PID, its exit status and signals straight through."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from customops.triton.serverargs import parse, with_plugins

HERE = Path(__file__).resolve().parent


@pytest.fixture
def setup(tree, tmp_path):
    """A repository on this machine: a custom backend in the model directory, and a PyTorch op library the
    manifest preloads, whose libtorch dependencies live in the (fixture) backend directory."""
    repo = tmp_path / "models"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('backend: "standalone"\n')
    shutil.copy2(tree / "example/libtriton_standalone.so", repo / "m" / "libtriton_standalone.so")
    (repo / "m" / "ops").mkdir()
    shutil.copy2(tree / "example/libtorch_op.so", repo / "m" / "ops" / "libtorch_op.so")
    (repo / "customops.toml").write_text('[pytorch]\nops = ["m/ops/libtorch_op.so"]\n')
    server = tmp_path / "tritonserver"
    server.write_text(f"#!{sys.executable}\n" + (HERE / "fake_tritonserver.py").read_text())
    server.chmod(0o755)
    backends = tree / "container/opt/tritonserver/backends"
    record = tmp_path / "record.json"
    argv = [str(server), f"--model-repository={repo}", "--backend-directory", str(backends), "--log-verbose", "1"]
    return repo, backends, argv, record


def launch(argv: list[str], record: Path, *options: str, env: dict[str, str] | None = None,
           wait: bool = True) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    environment.update({"FAKE_SERVER_RECORD": str(record), **(env or {})})
    proc = subprocess.Popen([sys.executable, "-m", "customops", "launch", *options, "--", *argv], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if wait:
        proc.wait(timeout=120)
    return proc


def test_the_server_gets_the_arguments_untouched_and_the_environment_it_needs(setup):
    repo, backends, argv, record = setup
    proc = launch(argv, record)
    assert proc.returncode == 0, proc.stderr.read()
    got = json.loads(record.read_text())
    assert got["argv"] == argv[1:]
    assert got["env"]["LD_PRELOAD"] == f"{repo}/m/ops/libtorch_op.so"
    assert got["env"]["LD_LIBRARY_PATH"] == f"{backends}/pytorch"
    assert f"{repo}/m/ops/libtorch_op.so" in got["loaded"]  # the preload really loaded in the server...
    assert f"{backends}/pytorch/libtorch_cpu.so" in got["loaded"]  # ...with its dependency from LD_LIBRARY_PATH
    assert got["pid"] == proc.pid  # exec: the server keeps customops' PID


def test_the_servers_exit_status_passes_straight_through(setup):
    *_, argv, record = setup
    assert launch(argv, record, env={"FAKE_SERVER_EXIT": "7"}).returncode == 7


def test_sigterm_reaches_the_server_itself(setup):
    *_, argv, record = setup
    proc = launch(argv, record, env={"FAKE_SERVER_WAIT": "1"}, wait=False)
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(record.read_text())["pid"] == proc.pid
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 143


def test_a_failing_check_prevents_the_exec(setup):
    repo, _backends, argv, record = setup
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text("backend: onnxruntime\n")  # a string without quotes
    proc = launch(argv, record)
    assert proc.returncode == 1 and not record.exists()
    assert "CO101" in proc.stderr.read()


def test_warn_only_starts_the_server_anyway(setup):
    repo, _backends, argv, record = setup
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text("backend: onnxruntime\n")
    assert launch(argv, record, "--warn-only").returncode == 0 and record.exists()


def test_in_explicit_mode_only_the_named_models_are_checked(setup):
    repo, _backends, argv, record = setup
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text("backend: onnxruntime\n")
    proc = launch([*argv, "--model-control-mode=explicit", "--load-model", "m"], record)
    assert proc.returncode == 0 and record.exists()


def test_existing_ld_preload_entries_are_kept_after_customops_entries(setup, tree):
    repo, _backends, argv, record = setup
    extra = str(tree / "b/liba.so")
    launch(argv, record, env={"LD_PRELOAD": extra})
    assert json.loads(record.read_text())["env"]["LD_PRELOAD"] == f"{repo}/m/ops/libtorch_op.so:{extra}"
    launch(argv, record, "--existing-preload", "first", env={"LD_PRELOAD": extra})
    assert json.loads(record.read_text())["env"]["LD_PRELOAD"] == f"{extra}:{repo}/m/ops/libtorch_op.so"


def test_dry_run_prints_a_command_that_reproduces_the_launch(setup, tmp_path):
    _repo, _backends, argv, record = setup
    proc = launch(argv, record, "--dry-run")
    line = proc.stdout.read().strip()
    assert line.startswith("env LD_LIBRARY_PATH=") and not record.exists()
    launch(argv, record)
    real = json.loads(record.read_text())
    record.unlink()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    subprocess.run(["bash", "-c", line], env={**env, "FAKE_SERVER_RECORD": str(record)}, check=True)
    replayed = json.loads(record.read_text())
    assert (replayed["argv"], replayed["env"]) == (real["argv"], real["env"])


def test_env_prints_export_lines(setup):
    repo, backends, argv, _record = setup
    out = subprocess.run([sys.executable, "-m", "customops", "env", "--", *argv], capture_output=True, text=True)
    assert out.stdout.splitlines() == [f"export LD_LIBRARY_PATH={backends}/pytorch",
                                       f"export LD_PRELOAD={repo}/m/ops/libtorch_op.so"]


# -- tritonserver's command line ------------------------------------------------------------------------


def test_both_flag_syntaxes_and_repeated_repositories():
    args = parse(["tritonserver", "--model-repository=/a", "--model-store", "/b", "--backend-directory", "/be",
                  "--model-control-mode=explicit", "--load-model", "x", "--exit-on-error=false"])
    assert args.repositories == ("/a", "/b") and args.backend_directory == "/be"
    assert args.models_to_check == {"x"} and args.exit_on_error is False


def test_backend_config_is_one_setting_per_flag_split_at_the_first_comma_and_equals():
    args = parse(["tritonserver", "--backend-config=tensorrt,plugins=/a.so;/b.so",
                  "--backend-config", "python,shm-default-byte-size=1048576"])
    assert args.setting("tensorrt", "plugins").value == "/a.so;/b.so"
    assert args.setting("python", "shm-default-byte-size").value == "1048576"


def test_plugins_are_merged_into_the_users_own_setting_not_duplicated():
    args = parse(["tritonserver", "--backend-config", "tensorrt,plugins=/a.so", "--log-verbose=1"])
    merged = with_plugins(args, ("/b.so", "/a.so"))
    assert merged == ["tritonserver", "--backend-config", "tensorrt,plugins=/a.so;/b.so", "--log-verbose=1"]
    fresh = parse(["tritonserver", "--model-repository=/m"])
    assert with_plugins(fresh, ("/b.so",))[-1] == "--backend-config=tensorrt,plugins=/b.so"


def test_a_repeated_start_reuses_the_decision_until_something_it_depends_on_changes(setup, tmp_path, tree):
    repo, _backends, argv, record = setup
    cache = tmp_path / "cache"
    env = {"CUSTOMOPS_CACHE_DIR": str(cache)}
    first = launch(argv, record, "--dry-run", env=env)
    decisions = list((cache / "launch").rglob("*"))
    assert first.returncode == 0 and [p for p in decisions if p.is_file()]
    assert launch(argv, record, "--dry-run", env=env).stdout.read() == first.stdout.read()
    # a new, broken model in the repository: the cached decision no longer applies
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text("backend: onnxruntime\n")
    assert launch(argv, record, "--dry-run", env=env).returncode == 1
    shutil.rmtree(repo / "broken")
    assert launch(argv, record, "--dry-run", env=env).returncode == 0


LOADED_MODULES = ("import os, sys\nsys.argv[0] = 'customops'\nfrom customops import cli\ncli.standard_streams()\n"
                  "code = cli.main()\nos.write(2, ('MODULES ' + ' '.join(sorted(sys.modules))).encode())\n")


def test_a_start_on_a_cached_verdict_reads_no_file_of_the_container(setup, tmp_path):
    """The cached start assembles what to run from the manifest alone (customops.app.launch.environment_for):
    it needs no ELF reader, repository model or check, and none of the stdlib modules only those need; what
    it imports is what its ~50 ms go to (benchmarks/RESULTS.md)."""
    _repo, _backends, argv, record = setup
    env = {"CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    assert launch(argv, record, "--dry-run", env=env).returncode == 0
    environment = {**os.environ, **env}
    hit = subprocess.run([sys.executable, "-c", LOADED_MODULES, "launch", "--dry-run", "--", *argv],
                         env=environment, capture_output=True, text=True, timeout=120)
    loaded = set(hit.stderr.rsplit("MODULES ", 1)[1].split())
    assert "customops.app.launch_cache" in loaded and "customops.app.check" not in loaded
    assert loaded.isdisjoint({"numpy", "customops.elf.parse", "customops.elf.cache", "customops.triton.repository",
                              "customops.findings", "customops.app.target", "customops.commands.check",
                              "importlib.resources", "subprocess", "ctypes", "shutil", "threading"}), loaded


def test_a_changed_container_library_invalidates_the_decision(setup, tmp_path):
    _repo, backends, argv, record = setup
    private = tmp_path / "backends"  # a copy: other tests read the shared fixture tree
    shutil.copytree(backends, private)
    argv = [str(private) if a == str(backends) else a for a in argv]
    env = {"CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    assert launch(argv, record, "--dry-run", env=env).returncode == 0
    (private / "pytorch" / "libtorch_cpu.so").write_bytes(b"no longer an ELF file")
    assert launch(argv, record, "--dry-run", env=env).returncode == 1  # the preload's dependency now fails
