"""Probes load untrusted libraries for real, in a child that cannot affect the checker."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from customops import cachedir
from customops.inspect import protowire
from customops.probe import frameworks, sandbox
from customops.probe.frameworks import probe_load
from customops.probe.results import PROBE_RESULT_SHAPE, ProbeResult, ProbeStatus

PROBE_DIR = Path(frameworks.__file__).parent
CHILD_MODULES = [*sorted([PROBE_DIR / "sandbox_child.py", *PROBE_DIR.glob("child_*.py")]), Path(protowire.__file__)]
FRAMEWORKS = {"torch", "tensorflow"}  # what a loader script imports inside the function that loads with it


def test_a_library_loads_and_is_reported(tree):
    assert probe_load(str(tree / "b/liba.so")).status is ProbeStatus.LOADED


def test_a_load_failure_carries_dlerror(tree):
    result = probe_load(str(tree / "f/libu.so"))
    assert result.status is ProbeStatus.FAILED and result.message.endswith("undefined symbol: missing_var")


def test_a_constructor_that_writes_a_file_writes_only_into_the_sandbox(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = probe_load(str(tree / "probe/libwrites.so"))
    assert result.status is ProbeStatus.LOADED and result.sandbox_files == ("ctor-was-here",)
    assert not (tmp_path / "ctor-was-here").exists() and not os.path.exists("ctor-was-here")


def test_a_constructor_that_aborts_is_reported_with_its_signal(tree):
    result = probe_load(str(tree / "probe/libaborts.so"))
    assert result.status is ProbeStatus.CRASHED and result.message == "killed by SIGABRT while loading"


def test_a_constructor_that_never_returns_times_out(tree):
    started = time.monotonic()
    result = probe_load(str(tree / "probe/libloops.so"), timeout=3)
    assert result.status is ProbeStatus.TIMED_OUT and time.monotonic() - started < 30


def test_a_constructor_that_forks_leaves_no_process_behind(tree):
    library = str(tree / "probe/libforks.so")
    result = probe_load(library, timeout=20)
    assert result.status is ProbeStatus.LOADED and "forked-child.pid" in result.sandbox_files
    # The forked child (same command line as the probe) slept for 600 s in the probe's process group.
    time.sleep(0.2)
    assert not processes_naming(library)


def processes_naming(text: str) -> list[int]:
    """The processes whose command line contains `text` (what `pgrep -f` finds, without procps, which a
    minimal Debian lacks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_the_probe_command(tree):
    out = subprocess.run([sys.executable, "-m", "customops", "probe", str(tree / "b/liba.so"),
                          str(tree / "probe/libaborts.so")], capture_output=True, text=True)
    assert out.returncode == 1
    assert "loaded" in out.stdout and "crashed" in out.stdout and "SIGABRT" in out.stdout


@pytest.mark.parametrize("module", CHILD_MODULES, ids=lambda path: path.name)
def test_what_runs_in_the_probe_interpreter_needs_only_the_standard_library(module):
    """The probe interpreter may be another Python (a container's, 3.8 or later) that cannot import
    customops: a child module imports the standard library only (and the framework it loads with)."""
    tree = ast.parse(module.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):  # what only a type checker reads (`if TYPE_CHECKING:`) never runs
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    outside = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names | FRAMEWORKS}
    assert not outside, outside


def test_the_scripts_handed_to_the_sandbox_are_the_child_modules():
    assert (PROBE_DIR / "sandbox_child.py").read_text() == sandbox.CHILD_SOURCE
    forks = (PROBE_DIR / "child_forks.py").read_text().replace("from __future__ import annotations\n", "", 1)
    wire = Path(protowire.__file__).read_text().replace("from __future__ import annotations\n", "", 1)
    assert (PROBE_DIR / "child_load.py").read_text() + "\n" + forks + "\n" + wire == frameworks.LOADER
    assert "from __future__" not in forks + wire  # one script: only its first text may have it
    assert (PROBE_DIR / "child_tensorflow_ops.py").read_text() + "\n" + wire == frameworks.TENSORFLOW_OPS
    for script in (frameworks.LOADER, frameworks.TENSORFLOW_OPS):  # defined here, never imported by customops
        namespace: dict[str, object] = {"__name__": "__probe__"}
        exec(compile(script, "<probe>", "exec"), namespace)
        assert callable(namespace["main"]) and namespace["UNAVAILABLE_EXIT"] == frameworks.UNAVAILABLE_EXIT
    namespace = {"__name__": "__probe__"}
    exec(compile(frameworks.LOADER, "<probe>", "exec"), namespace)
    assert callable(namespace["in_forks"]) and callable(namespace["load_all"])  # the texts meet
    assert callable(namespace["varint"]) and callable(namespace["delimited"])


@pytest.mark.parametrize("status", list(ProbeStatus))
def test_a_result_keeps_its_status_through_the_cache_form(status):
    result = ProbeResult("/x.so", status, "why", -6, "out", ("a.txt",), ("my::op",), "2.5", ("aten",), "probes ran")
    stored = json.loads(json.dumps(result.to_json()))
    assert stored["status"] == status.value
    assert cachedir.matches(stored, PROBE_RESULT_SHAPE)
    back = ProbeResult.from_json(stored)
    assert back == result and back.status is status


def test_the_cache_shape_names_every_field_of_a_result():
    assert list(PROBE_RESULT_SHAPE) == [field.name for field in dataclasses.fields(ProbeResult)]


@pytest.fixture
def bare_python() -> str:
    """An interpreter with neither customops nor the frameworks: the probe's children must still run in it."""
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is missing")
    for module in ("customops", *FRAMEWORKS):
        if subprocess.run([python, "-I", "-c", f"import {module}"], capture_output=True, cwd="/").returncode == 0:
            pytest.skip(f"{python} has {module}")
    return python


def test_a_library_loads_in_an_interpreter_that_cannot_import_customops(tree, bare_python):
    assert probe_load(str(tree / "b/liba.so"), python=bare_python).status is ProbeStatus.LOADED


def test_a_framework_the_interpreter_lacks_is_unavailable_not_failed(tree, bare_python):
    result = probe_load(str(tree / "b/liba.so"), python=bare_python, framework="torch")
    assert result.status is ProbeStatus.UNAVAILABLE and f"{bare_python} cannot load torch" in result.message
    assert frameworks.tensorflow_ops((str(tree / "b/liba.so"),), python=bare_python).startswith(
        f"{bare_python} cannot load tensorflow")


def test_the_probe_runner_imports_without_numpy():
    """The probe's parent side runs under the probing interpreter (a system python, as uid 65534, without numpy):
    customops.probe.frameworks imports with the standard library alone (tensorrt_standin, which reads ELF files,
    is imported only for TensorRT). A top-level import of it made 12 uid-65534 attack tests skip."""
    code = "import sys; sys.modules['numpy'] = None; import customops.probe.frameworks"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 0, done.stderr
