"""Loading a library for real, without letting it touch the checker.

Every load happens in a child process: a fresh interpreter with a temporary working directory (the
sandbox), a cleaned environment, no inherited file descriptors, an address-space limit, a timeout, and its
own process group, which is killed when the probe ends (so that a constructor that forks leaves nothing
behind). A child that aborts is reported with its signal and what it printed: a duplicate TORCH_LIBRARY,
for one, aborts inside dlopen and cannot be caught in-process. The checker's own process never loads an
untrusted library.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

LOADER = """
import ctypes, os, sys
framework, paths = sys.argv[1], sys.argv[2:]
if framework == "torch":
    import torch
    registry = lambda: {s.name for s in torch._C._jit_get_all_schemas()}
    load = torch.ops.load_library
elif framework == "tensorflow":
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as tf_session
    def load(path):  # what tf.load_op_library does, keeping the op list TensorFlow reports for the library
        global added
        ops = op_def_pb2.OpList.FromString(tf_session.TF_GetOpList(tf_session.TF_LoadLibrary(path)))
        added = {op.name for op in ops.op}
else:
    load = lambda path: ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
for path in paths:
    before = registry() if framework == "torch" else set()
    added = set()
    try:
        load(path)
    except Exception as exc:
        print("FAILED " + " ".join(str(exc).split()), flush=True)
        sys.exit(1)
    if framework == "torch":
        added = registry() - before
    for name in sorted(added):
        print("REGISTERED " + path + " " + name, flush=True)
    print("LOADED " + path, flush=True)
"""


@dataclass(frozen=True)
class ProbeResult:
    library: str
    status: str  # "loaded", "failed", "crashed", "timeout"
    message: str
    signal: int | None
    output: str
    sandbox_files: tuple[str, ...]  # what the library wrote into its working directory
    registered: tuple[str, ...] = ()  # ops/schemas the framework registry gained (framework probes only)


def run_isolated(argv: list[str], timeout: float = 60, memory_mb: int = 4096, env: dict[str, str] | None = None
                 ) -> tuple[int | None, str, tuple[str, ...], bool]:
    """(exit status or None on timeout, combined output, files left in the sandbox, timed out)."""
    sandbox = tempfile.mkdtemp(prefix="customops-probe-")
    clean = {"PATH": "/usr/bin:/bin", "HOME": sandbox, "TMPDIR": sandbox, "LANG": "C.UTF-8", **(env or {})}

    def limit() -> None:  # runs in the child, before exec
        os.setsid()
        limit_bytes = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    # Output goes to a file, not a pipe: a process the library forks would keep a pipe open after the probe.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=sandbox, env=clean, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, close_fds=True, preexec_fn=limit)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it forked
            proc.wait()
        log.seek(0)
        output = log.read()
    files = tuple(sorted(f for f in os.listdir(sandbox)))
    shutil.rmtree(sandbox, ignore_errors=True)
    return (None if timed_out else proc.returncode), output.decode("utf-8", "replace"), files, timed_out


def probe_load(library: str, python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
               after: tuple[str, ...] = (), framework: str = "none") -> ProbeResult:
    """Load `after` (in order), then `library`, in one isolated process: a duplicate registration between
    them shows as the framework's own failure (e.g. the abort of a second TORCH_LIBRARY). With a
    `framework` ("torch", "tensorflow"), the library is loaded the way that framework loads op libraries and
    the names its registry gained are reported; "none" is a plain dlopen(RTLD_NOW | RTLD_LOCAL)."""
    library = os.path.abspath(library)
    libraries = [*(os.path.abspath(a) for a in after), library]
    argv = [python or sys.executable, "-I", "-c", LOADER, framework, *libraries]
    status, output, files, timed_out = run_isolated(argv, timeout, memory_mb)
    if timed_out:
        return ProbeResult(library, "timeout", f"still loading after {timeout:g} s", None, output, files)
    if status is not None and status < 0:
        name = signal.Signals(-status).name
        reason = next((line.strip() for line in output.splitlines() if "what():" in line), "")
        return ProbeResult(library, "crashed", f"killed by {name} while loading" + (f": {reason}" if reason else ""),
                           -status, output, files)
    for line in output.splitlines():
        if line == f"LOADED {library}":
            registered = tuple(line.split(" ", 2)[2] for line in output.splitlines()
                               if line.startswith(f"REGISTERED {library} "))
            return ProbeResult(library, "loaded", "", None, output, files, registered)
        if line.startswith("FAILED "):
            return ProbeResult(library, "failed", line[len("FAILED "):], None, output, files)
    return ProbeResult(library, "crashed", f"exited with status {status} while loading", None, output, files)
