"""Running a probe script, which loads untrusted libraries, where what those libraries do cannot reach customops.

The processes and what each one does are described in customops/probe/sandbox_child.py, which runs them. This
side of it: customops makes itself non-dumpable (no ptrace, no /proc/<pid>/environ, for a process of the
same user) and a subreaper (a process that escaped the sandbox's own supervisor comes back to be ended)
while the probe runs; it hands the child a cleaned environment and a private working directory; it reads
the results only from the private channel and only with the nonce, the rest (exit status, sandbox files,
containment) from the status channel the untrusted code never holds; it keeps a bounded part of the
output; and it ends every process and removes every file of the probe on every way out (a timeout, an
error, SIGINT, SIGTERM).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import selectors
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import IO, Any

from customops import cleanup
from customops.errors import printable

CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py").read_text()
LAYERS = frozenset({"namespaces", "landlock", "other-uid"})  # what a probe may use; tests take some away
FILE_LIMIT = 16 << 20  # RLIMIT_FSIZE of the loader: its output file, and any one file it writes
OUTPUT_KEPT = 64 << 10  # bytes of the output kept from its start, and as many from its end
SANDBOX_LIMIT = 64 << 20  # the sandbox's tmpfs, where there is one
RESULTS_LIMIT = 16 << 20  # bytes read from the result channel (more is read and dropped)
STATUS_LIMIT = 1 << 20
STOP_GRACE = 5.0  # seconds the supervisor has to end everything after SIGTERM
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 3, 4, 36, 37
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Containment:
    """What the loader could not do, as it reported before running anything untrusted."""

    root: bool = False  # customops runs as root
    uid: int = -1
    other_uid: bool = False  # the loader ran as another uid than customops
    capabilities: bool = True  # some capability was left
    namespaces: tuple[str, ...] = ()
    read_only: bool = False  # a read-only view of the file system (the sandbox excepted)
    proc: bool = False  # /proc shows the new PID namespace only
    landlock: int = 0  # Landlock ABI version applied, 0: none
    landlock_tcp: bool = False
    landlock_signals: bool = False

    @classmethod
    def parse(cls, facts: object) -> Containment | None:
        """From the loader's report; None unless every field has its type."""
        if not isinstance(facts, dict):
            return None
        values: dict[str, Any] = {}
        for field in dataclass_fields(cls):
            value = facts.get(field.name, field.default)
            if field.name == "namespaces":
                if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                    return None
                value = tuple(value)
            elif type(value) is not type(field.default):
                return None
            values[field.name] = value
        return cls(**values)

    def describe(self) -> str:
        """One line for the report: what a probed library could and could not do on this machine."""
        who = f"uid {self.uid}" if self.other_uid else "root" if self.root else f"your user (uid {self.uid})"
        if not self.capabilities and (self.root or "user" in self.namespaces):
            who += " without capabilities"
        spaces = [n for n in self.namespaces if n != "user"]
        where = f"in new {_join(spaces)} namespaces" if spaces else "without namespaces"
        where += f", under Landlock (ABI {self.landlock})" if self.landlock else ", without Landlock"
        if self.read_only or self.landlock:
            writes = "writes outside the sandbox prevented"
        elif self.other_uid:
            writes = f"a library could write wherever uid {self.uid} may"
        else:
            writes = "a library could write wherever you can"
        unreachable = self.landlock_signals or (self.other_uid and self.root)  # cannot signal us or the supervisor
        reach = ("customops out of its reach" if unreachable or "PID" in self.namespaces
                 else "a library could signal customops")
        if "PID" in self.namespaces:
            processes = "no process outlives its probe"
        else:
            processes = "its processes are ended after it" + ("" if unreachable else
                                                                ", unless it kills the probe's supervisor")
        if "PID" in self.namespaces and not self.proc:
            processes += " (the machine's processes listed in /proc)"
        network = ("no network" if "network" in self.namespaces else "no TCP" if self.landlock_tcp
                   else "the network reachable")
        return f"probes ran as {who} {where}: {writes}; {reach}; {processes}; {network}"


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


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
    """Run `script` (which reports with emit(tag, *fields)) with `args` as its sys.argv[1:] in `python`,
    contained. `readable`: files the loader must be able to read (when root, it switches to uid 65534 only
    if that uid can)."""
    workdir = tempfile.mkdtemp(prefix="customops-probe-")
    cleanup.register(workdir)
    try:
        os.chmod(workdir, 0o711)  # another uid reaches the sandbox, and nothing else, through it
        sandbox = os.path.join(workdir, "sandbox")
        os.mkdir(sandbox, 0o700)
        return _run(python, script, args, timeout, memory_mb, readable, sandbox)
    finally:
        with held_signals():
            _remove(workdir)
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
    with tempfile.TemporaryFile() as log, _guarded():
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


@contextlib.contextmanager
def _guarded() -> Iterator[None]:
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


def _remove(path: str) -> None:
    """Remove the probe's directory whatever its library did to it (made unreadable, nested thousands deep,
    replaced by a symlink): each directory's subdirectories are moved up to the top before it is removed,
    so depth costs neither recursion nor descriptors, and no symlink is ever followed."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # whatever was put in its place
        return
    prefix = f".customops-{secrets.token_hex(4)}-"
    moved = 0
    try:
        names = os.listdir(top)
        while names:
            pending = list(names)
            while pending:
                name = pending.pop()
                if not _is_directory(top, name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=top)
                    continue
                with contextlib.suppress(OSError, ValueError):  # ValueError: a symlink (never followed)
                    os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
                with contextlib.suppress(OSError):
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
                    try:
                        for entry in os.listdir(inner):
                            moved += 1
                            with contextlib.suppress(OSError):
                                if _is_directory(inner, entry):
                                    os.rename(entry, prefix + str(moved), src_dir_fd=inner, dst_dir_fd=top)
                                    pending.append(prefix + str(moved))
                                else:
                                    os.unlink(entry, dir_fd=inner)
                    finally:
                        os.close(inner)
                    os.rmdir(name, dir_fd=top)
            names, before = os.listdir(top), names
            if sorted(names) == sorted(before):
                break  # nothing more can be removed
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _is_directory(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
