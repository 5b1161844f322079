"""customops itself while a probe runs: not dumpable, a subreaper that ends what escaped the probe, and
signals held while a probe's processes and files are cleaned up."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator

PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 3, 4, 36, 37
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """customops while a probe runs: not dumpable (a process of the same user cannot ptrace it or read its
    environment), and a subreaper (a process that escaped the probe's supervisor becomes our child, and is
    ended when the probe is)."""
    dumpable = _prctl(PR_GET_DUMPABLE)
    subreaper = ctypes.c_int(0)
    _libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(subreaper), 0, 0, 0)
    before = set(_children())
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        with held_signals():
            _end_orphans(before)
            _prctl(PR_SET_CHILD_SUBREAPER, subreaper.value)
            _prctl(PR_SET_DUMPABLE, dumpable)


def _prctl(option: int, value: int = 0) -> int:
    return int(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


def _end_orphans(before: set[int]) -> None:
    """Kill and reap the children we did not have before the probe: its processes, reparented to us."""
    while orphans := [pid for pid in _children() if pid not in before]:
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == me:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return found


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the cleanup inside is done (then interrupt as usual)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
