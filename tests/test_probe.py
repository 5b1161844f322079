"""Probes load untrusted libraries for real, in a child that cannot affect the checker."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from customops.probe.frameworks import probe_load


def test_a_library_loads_and_is_reported(tree):
    assert probe_load(str(tree / "b/liba.so")).status == "loaded"


def test_a_load_failure_carries_dlerror(tree):
    result = probe_load(str(tree / "f/libu.so"))
    assert result.status == "failed" and result.message.endswith("undefined symbol: missing_var")


def test_a_constructor_that_writes_a_file_writes_only_into_the_sandbox(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = probe_load(str(tree / "probe/libwrites.so"))
    assert result.status == "loaded" and result.sandbox_files == ("ctor-was-here",)
    assert not (tmp_path / "ctor-was-here").exists() and not os.path.exists("ctor-was-here")


def test_a_constructor_that_aborts_is_reported_with_its_signal(tree):
    result = probe_load(str(tree / "probe/libaborts.so"))
    assert result.status == "crashed" and result.message == "killed by SIGABRT while loading"


def test_a_constructor_that_never_returns_times_out(tree):
    started = time.monotonic()
    result = probe_load(str(tree / "probe/libloops.so"), timeout=3)
    assert result.status == "timeout" and time.monotonic() - started < 30


def test_a_constructor_that_forks_leaves_no_process_behind(tree):
    library = str(tree / "probe/libforks.so")
    result = probe_load(library, timeout=20)
    assert result.status == "loaded" and "forked-child.pid" in result.sandbox_files
    # The forked child (same command line as the probe) slept for 600 s in the probe's process group.
    time.sleep(0.2)
    lingering = subprocess.run(["pgrep", "-f", library], capture_output=True, text=True).stdout
    assert not lingering.strip()


def test_the_probe_command(tree):
    out = subprocess.run([sys.executable, "-m", "customops", "probe", str(tree / "b/liba.so"),
                          str(tree / "probe/libaborts.so")], capture_output=True, text=True)
    assert out.returncode == 1
    assert "loaded" in out.stdout and "crashed" in out.stdout and "SIGABRT" in out.stdout
