"""Progress (issue #18): on standard error, only when it is a terminal and the run has taken more than a
second, erased before anything else is printed; never in a pipe, a file or a machine-readable report."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from customops import progress

ROOT = Path(__file__).resolve().parent.parent


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_run_shorter_than_the_delay_shows_nothing():
    terminal = Terminal()
    with progress.shown("checking", terminal):
        progress.stage("reading")
    assert terminal.getvalue() == ""


def test_a_long_run_on_a_terminal_shows_its_stage_then_erases_the_line(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    terminal = Terminal()
    with progress.shown("checking", terminal):
        progress.stage("probing the tensorflow op libraries")
        time.sleep(0.5)
    out = terminal.getvalue()
    line = "customops: checking: probing the tensorflow op libraries (0 s)"
    assert f"\r{line}" in out and "\x1b" not in out  # no escape sequence: fine on a dumb terminal
    assert out.endswith("\r" + " " * len(line) + "\r")  # erased: the report that follows starts clean


def test_no_progress_when_standard_error_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    pipe = io.StringIO()
    with progress.shown("checking", pipe):
        time.sleep(0.3)
    assert pipe.getvalue() == ""


def test_stage_outside_a_progress_block_does_nothing():
    progress.stage("nothing shows this")


def test_profile_create_on_a_terminal_keeps_standard_output_clean(tree, tmp_path):
    """A real run with standard error on a pseudo-terminal: stdout carries only its own line."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "customops", "profile", "create", "--container-root",
                             str(tree / "container"), "-o", str(tmp_path / "p.json")], stdout=subprocess.PIPE,
                            stderr=terminal, text=True, env=env, timeout=300)
    os.close(terminal)
    os.close(controller)
    assert result.returncode == 0 and result.stdout == f"wrote {tmp_path / 'p.json'}\n"
