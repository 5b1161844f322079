"""Progress on standard error for runs long enough to look stuck (a probe, a profile of a real image, a cold
check of real frameworks), the way docker and pip show theirs.

Shown only when standard error is a terminal, never before DELAY seconds have passed (a fast run prints
nothing), on one line rewritten in place (carriage returns and spaces: no escape sequence, so a dumb terminal and
NO_COLOR are respected) and erased before anything else is printed, so that it never
reaches a report, a pipe or a CI log. `stage()` names what is being done; it costs nothing when no progress
is shown.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from customops.errors import printable

DELAY = 1.0  # seconds before the first line: a run shorter than this shows nothing
INTERVAL = 0.2
_active: Progress | None = None


class Progress:
    def __init__(self, stream: TextIO, what: str, delay: float | None = None) -> None:
        self._stream, self._what = stream, what
        self._delay = DELAY if delay is None else delay
        self._stage = ""
        self._start = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._shown = 0  # the length of the line on the terminal
        self._thread = threading.Thread(target=self._run, name="customops-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stage(self, text: str) -> None:
        self._stage = printable(text)  # it names models and files: one printable line, no log command

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        with self._lock:
            if self._shown:
                self._write("\r" + " " * self._shown + "\r")

    def _run(self) -> None:
        if self._done.wait(self._delay):
            return
        while not self._done.is_set():
            elapsed = time.monotonic() - self._start
            line = f"customops: {self._what}" + (f": {self._stage}" if self._stage else "") + f" ({elapsed:.0f} s)"
            with self._lock:
                if self._done.is_set():
                    return
                line = line[:self._columns() - 1]
                self._write("\r" + line + " " * max(self._shown - len(line), 0))
                self._shown = max(self._shown, len(line))
            self._done.wait(INTERVAL)

    def _columns(self) -> int:
        import shutil

        return max(shutil.get_terminal_size().columns, 20)

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(text)
            self._stream.flush()


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def shown(what: str, stream: TextIO | None = None) -> Iterator[None]:
    """Progress for the block, on `stream` (default: standard error) if it is a terminal."""
    global _active
    import sys

    stream = stream if stream is not None else sys.stderr
    if _active is not None or not _is_terminal(stream):
        yield
        return
    progress = Progress(stream, what)
    _active = progress
    progress.start()
    try:
        yield
    finally:
        _active = None
        progress.stop()


def stage(text: str) -> None:
    """What the run is doing now (shown on the progress line, if there is one)."""
    if _active is not None:
        _active.stage(text)
