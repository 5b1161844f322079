"""The probe's loader, for several groups of libraries in one sandbox: the framework is imported once, then each
group is loaded in a process of its own, forked from the loader, one after another.

customops never imports this module: customops/probe/frameworks.py appends its text to child_load.py's, and the
sandbox runs them as one script (main is child_load's, which hands args [framework, runtime, "--groups",
timeout, group, "--", group, ...] to in_forks). It needs nothing but the standard library and runs on Python
3.8 and later.

Importing torch or tensorflow takes seconds, loading an op library milliseconds: a fork keeps the import and
still gives every group a fresh process, so that a library that crashes, aborts or hangs takes only its own
group with it. The loader itself never loads a library. A group's process closes every inherited descriptor
(the private result channel among them) before it loads anything, works in a directory of its own, and writes
its lines into a pipe of its own; the loader reads them, kills whatever the group left running, and only then
reports them: nothing a library does can write a line of another group. A loader that cannot keep that
promise (a /proc that is not its PID namespace's, no subreaper, a leftover it cannot end) says UNBATCHED and
stops; customops probes the groups it did not end each in a sandbox of its own. What it emits: what
child_load's prepare emits, once; for each group G (index, the fields child_load's load_all emits) for each of
its lines, then ENDED (index, its wait status as Popen.returncode or "timeout", its output, whether load_all
returned, the files it left in its directory as a JSON list).
"""

from __future__ import annotations

import json
import os
import resource
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
KEPT = 16 << 10  # bytes of a group's output kept from its start, and as many from its end
GAP = b"\n[... output left out ...]\n"
LINES_LIMIT = 4 << 20  # bytes of a group's lines read (more is dropped)
LEFTOVER_GRACE = 5.0  # seconds to end what a group left running


def in_forks(emit: Callable[..., None], framework: str, runtime: str, rest: list[str]) -> int:
    """Prepare the framework once, then load each group in a forked process; the exit status."""
    timeout, groups = float(rest[0]), split(rest[1:])
    refused = unbatchable()
    if refused:
        emit("UNBATCHED", refused)
        return 0
    loader = prepare(framework, runtime, emit)
    if isinstance(loader, int):
        return loader
    for index, group in enumerate(groups):
        lines, ended = one_group(loader, group, f"group-{index}", timeout)
        if not end_leftovers(time.monotonic() + LEFTOVER_GRACE):
            emit("UNBATCHED", f"group {index} left processes that could not be ended")
            return 0
        for fields in lines:
            emit("G", str(index), *fields)
        emit("ENDED", str(index), *ended)
    return 0


def unbatchable() -> str:
    """Why groups cannot be kept apart here ("" when they can): orphans must come to the loader, and /proc must
    be its own PID namespace's (end_leftovers reads parents from it)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return "the loader cannot be a subreaper"
    try:
        with open("/proc/self/stat", "rb") as f:
            own = int(f.read().split(b" ", 1)[0]) == os.getpid()
    except (OSError, ValueError):
        own = False
    return "" if own else "/proc is not the loader's PID namespace's"


def split(words: list[str]) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for word in words:
        if word == "--":
            groups.append([])
        else:
            groups[-1].append(word)
    return groups


def one_group(loader: Dlopen, paths: list[str], directory: str, timeout: float) -> tuple[list[list[str]], list[str]]:
    """Fork, load `paths` in the child; its lines, and what ENDED says of it."""
    os.mkdir(directory, 0o700)
    lines_r, lines_w = os.pipe()
    out_r, out_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        group_process(loader, paths, directory, lines_w, out_w)
    os.close(lines_w)
    os.close(out_w)
    lines, output = bytearray(), bytearray()
    status = wait(pid, {lines_r: (lines, LINES_LIMIT), out_r: (output, 0)}, time.monotonic() + timeout)
    for fd in (lines_r, out_r):
        os.close(fd)
    found, finished = parsed(lines)
    return found, [status, bytes(output).decode("utf-8", "replace"), "1" if finished else "",
                   json.dumps(listed(directory))]


def group_process(loader: Dlopen, paths: list[str], directory: str, lines_w: int, out_w: int) -> None:
    """The group's process: nothing inherited but its two pipes, then load_all; it never returns."""
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(3, lines_w)
    os.closerange(lines_w + 1, top if top != resource.RLIM_INFINITY else 1 << 16)
    os.chdir(directory)
    os.environ["HOME"] = os.environ["TMPDIR"] = os.getcwd()

    def emit(*fields: str) -> None:  # a newline first: an unfinished line a library wrote cannot swallow it
        data = b"\n" + json.dumps(fields).encode() + b"\n"
        while data:
            data = data[os.write(lines_w, data):]

    code = load_all(loader, paths, emit)
    if code == 0:
        emit("END")
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def wait(pid: int, pipes: dict[int, tuple[bytearray, int]], deadline: float) -> str:
    """Read the pipes until the process ends (or the deadline: killed); its status as Popen.returncode."""
    for fd in pipes:
        os.set_blocking(fd, False)
    while True:
        select.select(list(pipes), [], [], max(0.0, min(0.1, deadline - time.monotonic())))
        for fd, (into, limit) in pipes.items():
            drain(fd, into, limit)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            for fd, (into, limit) in pipes.items():
                drain(fd, into, limit)  # what it wrote before it ended (a process it left may hold the pipe)
            return str(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"


def drain(fd: int, into: bytearray, limit: int) -> None:
    """Read what the pipe holds now (at most 64 reads: a writer that never stops cannot keep the loader here).
    Lines beyond `limit` are dropped; output (limit 0) keeps its first and last KEPT bytes."""
    for _ in range(64):
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            return
        if limit:
            into += chunk[:max(0, limit - len(into))]
            continue
        into += chunk
        if len(into) > 3 * KEPT:
            into[KEPT:len(into) - KEPT] = GAP


def parsed(lines: bytearray) -> tuple[list[list[str]], bool]:
    """The group's lines (JSON lists of strings; anything else is dropped), and whether it wrote END."""
    found = []
    for line in bytes(lines).split(b"\n"):
        with suppress(ValueError, RecursionError):
            fields = json.loads(line)
            if isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields):
                found.append(fields)
    finished = ["END"] in found
    return [f for f in found if f != ["END"]], finished


def listed(directory: str) -> list[str]:
    """What the group left in its directory (the first 1000 names)."""
    with suppress(OSError):
        return sorted(os.listdir(directory))[:1000]
    return []


def end_leftovers(deadline: float) -> bool:
    """Kill what the group's library left running (orphans come to the loader, a subreaper) until none is left;
    False when some are still there at the deadline."""
    me = os.getpid()
    while time.monotonic() < deadline:
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
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if not done:
            time.sleep(0.01)
    return False
