"""Running a probe script, which loads untrusted libraries, where what those libraries do cannot reach customops.

The processes and what each one does are described in customops/probe/sandbox_child.py, which runs them. This
side of it: customops makes itself non-dumpable (no ptrace, no /proc/<pid>/environ, for a process of the
same user) and a subreaper (a process that escaped the sandbox's own supervisor comes back to be ended)
while the probe runs; it hands the child a cleaned environment and a private working directory; it reads
the results only from the private channel and only with the nonce, the rest (exit status, sandbox files,
containment) from the status channel the untrusted code never holds; it keeps a bounded part of the
output; and it ends every process and removes every file of the probe on every way out (a timeout, an
error, SIGINT, SIGTERM). customops/probe/guard.py and customops/probe/removal.py hold those two jobs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from customops import cleanup
from customops.errors import printable
from customops.probe.containment import Containment
from customops.probe.guard import guarded, held_signals
from customops.probe.removal import remove_tree

CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py").read_text()
LAYERS = frozenset({"namespaces", "landlock", "other-uid"})  # what a probe may use; tests take some away
FILE_LIMIT = 16 << 20  # RLIMIT_FSIZE of the loader: its output file, and any one file it writes
OUTPUT_KEPT = 64 << 10  # bytes of the output kept from its start, and as many from its end
SANDBOX_LIMIT = 64 << 20  # the sandbox's tmpfs, where there is one
RESULTS_LIMIT = 16 << 20  # bytes read from the result channel (more is read and dropped)
STATUS_LIMIT = 1 << 20
STOP_GRACE = 5.0  # seconds the supervisor has to end everything after SIGTERM


@dataclass(frozen=True)
class Run:
    """How a probe script ended."""

    messages: tuple[tuple[str, ...], ...]  # what the script emitted over the private channel, in order
    exit_status: int | None  # of the loader, as Popen.returncode (-N: killed by signal N); None: unknown
    timed_out: bool
    output: str  # the loader's stdout and stderr: the start and the end when there was much
    files: tuple[str, ...]  # what was left in the sandbox
    containment: str  # Containment.describe(), "" when the loader did not get as far as reporting it
    error: str | None = None  # the sandbox itself failed (not the script)

    @property
    def finished(self) -> bool:
        """The script ran to its end and the loader exited 0."""
        return self.exit_status == 0 and ("END",) in self.messages


def run(python: str, script: str, args: list[str], timeout: float, memory_mb: int,
        readable: tuple[str, ...] = ()) -> Run:
    """Run `script`, the text of a customops/probe/child_*.py module, in `python`, contained: its
    main(emit, args) gets `args` (also its sys.argv[1:]) and reports with emit(tag, *fields). `readable`:
    files the loader must be able to read (when root, it switches to uid 65534 only if that uid can)."""
    workdir = tempfile.mkdtemp(prefix="customops-probe-")
    cleanup.register(workdir)
    try:
        os.chmod(workdir, 0o711)  # another uid reaches the sandbox, and nothing else, through it
        sandbox = os.path.join(workdir, "sandbox")
        os.mkdir(sandbox, 0o700)
        return _run(python, script, args, timeout, memory_mb, readable, sandbox)
    finally:
        with held_signals():
            remove_tree(workdir)
            cleanup.unregister(workdir)


def _run(python: str, script: str, args: list[str], timeout: float, memory_mb: int, readable: tuple[str, ...],
         sandbox: str) -> Run:
    nonce = secrets.token_hex(16)
    status_r, status_w = os.pipe()
    result_r, result_w = os.pipe()
    nonce_r, nonce_w = os.pipe()
    os.write(nonce_w, nonce.encode())
    os.close(nonce_w)
    config = {"parent": os.getpid(), "status_fd": status_w, "result_fd": result_w, "nonce_fd": nonce_r,
              "sandbox": sandbox, "script": script, "args": args, "memory_mb": memory_mb, "file_limit": FILE_LIMIT,
              "sandbox_limit": SANDBOX_LIMIT, "readable": list(readable), "layers": sorted(LAYERS)}
    env = {"PATH": "/usr/bin:/bin", "HOME": sandbox, "TMPDIR": sandbox, "LANG": "C.UTF-8"}
    with tempfile.TemporaryFile() as log, guarded():
        try:
            try:
                proc = subprocess.Popen([python, "-I", "-c", CHILD_SOURCE, json.dumps(config)], cwd="/", env=env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        pass_fds=(status_w, result_w, nonce_r), start_new_session=True)
            finally:
                for fd in (status_w, result_w, nonce_r):
                    os.close(fd)
        except OSError as exc:
            for fd in (status_r, result_r):
                os.close(fd)
            return Run((), None, False, "", (), "", f"cannot run {python}: {exc.strerror or exc}")
        try:
            deadline = time.monotonic() + timeout
            status, results, timed_out = _collect(status_r, result_r, nonce, deadline)
            if not timed_out:  # every channel closed: the supervisor is exiting
                try:
                    proc.wait(max(deadline - time.monotonic(), STOP_GRACE))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            with held_signals():
                _stop(proc)
                for fd in (status_r, result_r):
                    os.close(fd)
        return _ended(status, results, proc.returncode, timed_out, _bounded(log))


def _collect(status_r: int, result_r: int, nonce: str, deadline: float) -> tuple[bytes, _Lines, bool]:
    """Read both channels until every writer is gone (the probe's processes all ended) or the deadline.
    (the status channel's bytes, the result channel's lines, whether the deadline passed)"""
    status = bytearray()
    results = _Lines(nonce.encode() + b" ", RESULTS_LIMIT)
    with selectors.DefaultSelector() as selector:
        for fd in (status_r, result_r):
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(status), results, True
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                elif key.fd == result_r:
                    results.feed(chunk)
                else:
                    status += chunk[:max(0, STATUS_LIMIT - len(status))]
    return bytes(status), results, False


class _Lines:
    """The result channel's lines as they arrive: those that start with the nonce are kept (at most `limit`
    bytes in all), the others only counted, and never held: a library that floods the channel costs
    customops no memory."""

    def __init__(self, prefix: bytes, limit: int) -> None:
        self.prefix = prefix
        self.room = limit
        self.kept: list[bytes] = []
        self.foreign = 0
        self._line = bytearray()
        self._skipping = False  # the current line is not one to keep

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if not self._skipping:
                self._line += chunk[start:] if end < 0 else chunk[start:end]
                head = bytes(self._line[:len(self.prefix)])
                if head != self.prefix[:len(head)] or len(self._line) > self.room:
                    self._skipping = True
                    self._line.clear()
            if end < 0:
                return
            if self._skipping:
                self.foreign += 1
            elif self._line:
                self.kept.append(bytes(self._line[len(self.prefix):]))
                self.room -= len(self._line)
            self._line.clear()
            self._skipping = False
            start = end + 1


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the supervisor, which first ends everything below it (SIGTERM), or kill it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ended(status_data: bytes, results: _Lines, supervisor_status: int | None, timed_out: bool, output: str) -> Run:
    status: dict[str, Any] = {}
    for line in status_data.split(b"\n")[:-1]:
        tag, _, value = line.partition(b" ")
        with contextlib.suppress(ValueError, RecursionError):
            status.setdefault(tag.decode("ascii", "replace"), json.loads(value))
    messages = _messages(results.kept)
    if results.foreign:
        output += f"\n[customops: {results.foreign} lines on the private result channel were not the loader's]\n"
    exit_status = supervisor_status
    with contextlib.suppress(TypeError, ValueError):
        exit_status = os.waitstatus_to_exitcode(status["EXIT"]) if "EXIT" in status else exit_status
    listed = status.get("FILES")
    files = tuple(printable(f) for f in listed if isinstance(f, str)) if isinstance(listed, list) else ()
    containment = Containment.parse(status.get("CONTAINMENT"))
    error = status.get("ERROR") if isinstance(status.get("ERROR"), str) else None
    if error is None and containment is None and not timed_out:  # nothing untrusted ran: not the library's doing
        last = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
        error = f"the probe interpreter ended before loading anything (status {exit_status}): {last}"
    return Run(messages, None if timed_out else exit_status, timed_out, output, files,
               containment.describe() if containment else "", error)


def _messages(lines: list[bytes]) -> tuple[tuple[str, ...], ...]:
    """The loader's messages: each a JSON list of strings (a line the nonce starts that is not one is dropped)."""
    found: list[tuple[str, ...]] = []
    for line in lines:
        with contextlib.suppress(ValueError, RecursionError):
            fields = json.loads(line)
            if isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields):
                found.append(tuple(fields))
    return tuple(found)


def _bounded(log: IO[bytes]) -> str:
    """The output file's start and end, OUTPUT_KEPT bytes each, whatever its size."""
    size = os.fstat(log.fileno()).st_size
    log.seek(0)
    if size <= 2 * OUTPUT_KEPT:
        data = log.read(size)
    else:
        head = log.read(OUTPUT_KEPT)
        log.seek(size - OUTPUT_KEPT)
        gap = f"\n[... {size - 2 * OUTPUT_KEPT} bytes of output left out ...]\n".encode()
        data = head + gap + log.read(OUTPUT_KEPT)
    return data.decode("utf-8", "replace")


