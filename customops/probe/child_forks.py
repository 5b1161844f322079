"""The probe's loader, for several groups of libraries in one sandbox: the framework is imported once, then each
group is loaded in a process of its own, forked from the loader, one after another.

customops never imports this module: customops/probe/frameworks.py appends its text to child_load.py's, and the
sandbox runs them as one script (main is child_load's, which hands args [framework, runtime, "--groups",
timeout, group, "--", group, ...] to in_forks). It needs nothing but the standard library and runs on Python
3.8 and later.

Importing torch or tensorflow takes seconds, loading an op library milliseconds: a fork keeps the import and
still gives every group a fresh process, so that a library that crashes, aborts or hangs takes only its own
group with it, and no group sees another's libraries. The loader itself never loads a library. Every process a
group's library leaves behind is killed before the next group starts (the loader is a subreaper). Each group's
lines carry a token the loader draws only once the previous group's processes are gone and reveals only once
this group's are: a library, which can read its own process's memory, cannot write lines that pass for
another group's. What it emits: what child_load's prepare emits, once; for each group GROUP (index), the
group's lines as G (token, the fields child_load's load_all emits), then ENDED (index, token, its wait status
as Popen.returncode or "timeout", its output).
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # defined by child_load.py's text, which this text follows
    from customops.probe.child_load import Dlopen, load_all, prepare

PR_SET_CHILD_SUBREAPER = 36
OUTPUT_KEPT = 32 << 10  # bytes of a group's output kept


def in_forks(emit: Callable[..., None], framework: str, runtime: str, rest: list[str]) -> int:
    """Prepare the framework once, then load each group in a forked process; the exit status."""
    timeout, groups = float(rest[0]), split(rest[1:])
    loader = prepare(framework, runtime, emit)
    if isinstance(loader, int):
        return loader
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for index, group in enumerate(groups):
        token = secrets.token_hex(16)  # drawn now: no earlier group's process is left to read it
        emit("GROUP", str(index))
        status, output = one_group(loader, group, token, emit, timeout)
        end_leftovers()
        emit("ENDED", str(index), token, status, output)
    return 0


def split(words: list[str]) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for word in words:
        if word == "--":
            groups.append([])
        else:
            groups[-1].append(word)
    return groups


def one_group(loader: Dlopen, paths: list[str], token: str, emit: Callable[..., None],
              timeout: float) -> tuple[str, str]:
    """Fork, load `paths` in the child (its output into a pipe); its wait status and output."""
    read, write = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the group's process: its lines carry the token
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        code = load_all(loader, paths, lambda *fields: emit("G", token, *fields))
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    os.close(write)
    os.set_blocking(read, False)
    output, deadline = bytearray(), time.monotonic() + timeout
    status: str | None = None
    while status is None:
        select.select([read], [], [], max(0.0, min(0.1, deadline - time.monotonic())))
        drain(read, output)
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = str(-os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status))
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = "timeout"
    drain(read, output)  # what it wrote before it ended (a process it left may hold the pipe: no waiting)
    os.close(read)
    return status, output.decode("utf-8", "replace")


def drain(fd: int, output: bytearray) -> None:
    """Read what the pipe holds now, keeping OUTPUT_KEPT bytes."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            return
        output += chunk[:max(0, OUTPUT_KEPT - len(output))]


def end_leftovers() -> None:
    """Kill what the group's library left running (orphans come to the loader, a subreaper) until none is left."""
    me = os.getpid()
    while True:
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == me:
                with suppress(OSError):  # gone already
                    os.kill(int(name), signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
