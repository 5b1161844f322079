"""Temporary directories that must not outlive the run: removed when it ends, however it ends.

A staging directory or a throw-away skeleton is registered while it exists. The CLI removes what is left
before it exits (its exit skips the interpreter's teardown, so atexit alone would not run), and atexit
covers customops used as a library. SIGINT (KeyboardInterrupt) and, in the CLI, SIGTERM (cli.Terminated)
are exceptions: `finally` blocks remove what they made and the CLI's exit path the rest. A signal whose
handler is still the default when the first path is registered (SIGHUP; SIGTERM outside the CLI) removes
everything and then ends the process with that signal, as it would have.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import threading
from types import FrameType

_paths: dict[str, int] = {}  # path -> the pid that registered it (a forked child must not remove it)
_installed = False
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def register(path: str) -> None:
    _install()
    _paths[path] = os.getpid()


def unregister(path: str) -> None:
    _paths.pop(path, None)


def remove(path: str) -> None:
    """Remove now, and forget."""
    unregister(path)
    shutil.rmtree(path, ignore_errors=True)


def remove_all() -> None:
    for path, pid in list(_paths.items()):
        if pid == os.getpid():
            remove(path)


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(remove_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:  # never take over a handler someone else set
            signal.signal(signum, _on_signal)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    remove_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
