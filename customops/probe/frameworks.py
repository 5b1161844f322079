"""Loading a library for real, without letting it touch the checker.

Every load happens in a contained child process (customops/probe/sandbox.py): a fresh interpreter in new
namespaces where the machine allows them, with another uid when customops is root, no capabilities,
Landlock, a temporary working directory (the sandbox), a cleaned environment, no inherited file
descriptors, resource limits and a timeout; nothing it starts outlives it. A child that aborts is reported
with its signal and what it printed: a duplicate TORCH_LIBRARY, for one, aborts inside dlopen and cannot
be caught in-process. The checker's own process never loads an untrusted library, and believes only what
the loader script reports over its private channel (`emit`), never what a library prints.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from customops.frameworks import DESCRIPTORS, ONNXRUNTIME, PYTHON, TENSORFLOW, TENSORRT
from customops.inspect import protowire
from customops.probe import sandbox
from customops.probe.needs import Needs
from customops.probe.reported import Reported, tagged
from customops.probe.results import ProbeResult, ProbeStatus


def _following(path: str | Path) -> str:
    """A text that follows another in one script: without its __future__ import (only the first text may have it)."""
    return "\n" + Path(path).read_text().replace("from __future__ import annotations\n", "", 1)


# run in the sandbox, never imported: child_load.py's text, then child_forks.py's (one script, one __future__
# import), then protowire.py's (the varint decoder both loader scripts read TensorFlow's OpList with)
WIRE = _following(protowire.__file__)
LOADER = Path(__file__).with_name("child_load.py").read_text() + _following(Path(__file__).with_name(
    "child_forks.py")) + WIRE
TENSORFLOW_OPS = Path(__file__).with_name("child_tensorflow_ops.py").read_text() + WIRE
# The framework library a probe may load its op libraries with instead of the Python package (the container's).
C_API_LIBRARY = {f.probe: f.c_api for f in DESCRIPTORS if f.probe and f.c_api and f is not TENSORRT}
UNAVAILABLE_EXIT = 3  # the scripts' exit status when the framework cannot be imported (their UNAVAILABLE_EXIT)
IMPORTS = PYTHON.backend  # the loader's "framework" for a stub's modules: the interpreter imports them (its runtime:
# a JSON object, the Python they are for, the directories before sys.path, each module's name)


def probe_load(library: str, python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
               after: tuple[str, ...] = (), framework: str = "none", runtime: str | None = None,
               needs: Needs | None = None) -> ProbeResult:
    """Load `after` (in order), then `library`, in one isolated process, and report on `library`: a
    duplicate registration between them shows as the framework's own failure (e.g. the abort of a second
    TORCH_LIBRARY); a failure of an earlier library is reported as this one's."""
    results = probe_group((*after, library), python, timeout, memory_mb, framework, runtime, needs)
    failed = next((r for r in results if r.status is not ProbeStatus.LOADED), None)
    last = results[-1]
    if last.status is ProbeStatus.NOT_LOADED and failed is not None:
        return replace(last, status=failed.status, message=f"{failed.library}: {failed.message}",
                       signal=failed.signal)
    return last


def probe_group(libraries: tuple[str, ...], python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
                framework: str = "none", runtime: str | None = None,
                needs: Needs | None = None) -> tuple[ProbeResult, ...]:
    """Load `libraries` in order into one isolated process, as `framework` loads op libraries, and report
    on each: LOADED (with the names the framework's registry gained), FAILED, CRASHED or TIMED_OUT for the
    one being loaded when it went wrong, NOT_LOADED for the rest. "none" is a plain
    dlopen(RTLD_NOW | RTLD_LOCAL); "torch" and "tensorflow" use the framework's load call in `python`;
    "onnxruntime" registers them all into one session's options through `runtime` (a libonnxruntime.so;
    default: the one in `python`'s onnxruntime package), reports "domain:op" names, and then creates a
    session, which is when ONNX Runtime rejects conflicting registrations (customops/probe/child_load.py).
    "tensorflow" with a `runtime` (a libtensorflow_cc.so.2, e.g. the container's) calls its C API's
    TF_LoadLibrary through ctypes instead of importing `python`'s tensorflow package; "torch" with a
    `runtime` (a libtorch_cpu.so) loads it and then dlopens the libraries, as torch.ops.load_library does,
    without the Python package: a verdict on loading, with no registrations listed. "tensorrt" loads them
    against a recording stand-in for the libnvinfer.so.N they need and lists the plugin creators each one
    registered as "namespace::name/version" (customops/probe/tensorrt_standin.py). `needs`: for each library
    (and the C-API library), the container's files it needs, loaded by path before it (customops/probe/needs.py).

    A library runs in the loader's own process, so it could, by reading the loader's memory, learn the
    nonce and forge what the loader reports; a library that only prints the protocol, or writes it to
    every descriptor, cannot. A loader that reported every library loaded but did not finish cleanly (a
    crash, a timeout, an exit) has the last one reported as that, not as loaded."""
    if framework == TENSORRT.probe:  # no framework in `python`: a recording stand-in for libnvinfer (its own module)
        # imported here: it reads ELF files (numpy), which the system python probing as uid 65534 has not
        from customops.probe import tensorrt_standin

        return tensorrt_standin.probe_group(libraries, python, timeout, memory_mb)
    paths = tuple(os.path.abspath(lib) for lib in libraries)
    python = python or sys.executable
    runtime, missing = settled_runtime(framework, runtime, python)
    if missing is not None:
        return tuple(ProbeResult(p, ProbeStatus.UNAVAILABLE, missing, None, "", ()) for p in paths)
    readable = (*paths, *runtime_files(runtime)) if runtime else paths
    given = needs_args(needs, (*paths, *((runtime,) if runtime else ())))
    run = sandbox.run(python, LOADER, [framework, runtime or "", *given, *paths], timeout, memory_mb,
                      (*readable, *needed_files(needs, given)))
    return unavailable(run, timeout, paths, python, runtime or framework) or Reported(run, timeout).each(paths)


def needs_args(needs: Needs | None, libraries: tuple[str, ...]) -> list[str]:
    """The loader script's "--needs" arguments for these libraries (none when nothing is known of them)."""
    chosen = {library: [list(need) for need in needs[library]] for library in dict.fromkeys(libraries)
              if needs and needs.get(library)}
    return ["--needs", json.dumps(chosen)] if chosen else []


def needed_files(needs: Needs | None, given: list[str]) -> tuple[str, ...]:
    """The container's files the loader script was handed (the sandbox lets it read them)."""
    if not given:
        return ()
    return tuple(dict.fromkeys(path for pairs in json.loads(given[1]).values() for _, path in pairs))


def settled_runtime(framework: str, runtime: str | None, python: str) -> tuple[str | None, str | None]:
    """The C-API library the loader loads the framework with (None: the Python package), or why there is none."""
    if framework == IMPORTS:
        return runtime, None
    if framework == ONNXRUNTIME.probe and runtime is None:
        runtime = onnxruntime_library(python)
        if runtime is None:
            return None, f"{python} has no onnxruntime package with a libonnxruntime.so"
    return (runtime if runtime and os.path.basename(runtime).startswith(C_API_LIBRARY.get(framework, "\0"))
            else None), None


def unavailable(run: sandbox.Run, timeout: float, paths: tuple[str, ...], python: str,
                what: str) -> tuple[ProbeResult, ...] | None:
    """UNAVAILABLE results for every library when the sandbox or the framework could not run at all."""
    found = Reported(run, timeout)
    if run.error is not None:
        return tuple(found.result(p, ProbeStatus.UNAVAILABLE, f"the probe's sandbox failed: {run.error}")
                     for p in paths)
    if (missing := tagged(run.messages, "UNAVAILABLE")) is not None and run.exit_status == UNAVAILABLE_EXIT:
        return tuple(found.result(p, ProbeStatus.UNAVAILABLE, f"{python} cannot load {what}: {missing}")
                     for p in paths)
    return None


def runtime_files(runtime: str) -> tuple[str, ...]:
    """The C-API library and the framework library it needs beside it (TensorFlow's), which the loader reads."""
    if runtime.startswith("{"):  # the stub's interpreter settings (IMPORTS): no file
        return ()
    name = os.path.basename(runtime)
    beside = next((f.c_api_needs for f in DESCRIPTORS if f.c_api and f.c_api_needs and name.startswith(f.c_api)), None)
    return (runtime, os.path.join(os.path.dirname(runtime), beside)) if beside else (runtime,)


@functools.cache
def package_file(python: str, package: str) -> str | None:
    """The __init__.py of `python`'s `package`, found without importing it (once per run): reinstalling
    the package replaces the file, which changes its identity."""
    try:
        origin = subprocess.run([python, "-I", "-c", "import importlib.util as u, sys; s = u.find_spec(sys.argv[1]); "
                                 "print(s.origin if s and s.origin else '')", package],
                                capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return origin or None


def onnxruntime_library(python: str) -> str | None:
    """The C-API library inside `python`'s onnxruntime package, found without importing the package."""
    init = package_file(python, ONNXRUNTIME.probe)
    found = sorted(glob.glob(os.path.join(os.path.dirname(init), "capi", f"{ONNXRUNTIME.c_api}.so*"))) if init else []
    return found[0] if found else None


def tensorflow_ops(libraries: tuple[str, ...], python: str | None = None, timeout: float = 120,
                   memory_mb: int = 4096, runtime: str | None = None) -> tuple[frozenset[str], str] | str:
    """(every op name TensorFlow has registered once `libraries` are loaded in order, its version), or why
    TensorFlow could not be asked: what a SavedModel or GraphDef can use in that process. `runtime`: a
    libtensorflow_cc.so.2 (the container's) whose C API to use; None: `python`'s tensorflow package."""
    python = python or sys.executable
    paths = [os.path.abspath(lib) for lib in libraries]
    readable = (*paths, *runtime_files(runtime)) if runtime else tuple(paths)
    run = sandbox.run(python, TENSORFLOW_OPS, [runtime or "", *paths], timeout, memory_mb, readable)
    if run.error is not None:
        return f"listing TensorFlow's ops failed: the probe's sandbox failed: {run.error}"
    if (unavailable := tagged(run.messages, "UNAVAILABLE")) is not None and run.exit_status == UNAVAILABLE_EXIT:
        return f"{python} cannot load {runtime or TENSORFLOW.probe}: {unavailable}"
    ops = frozenset(name for m in run.messages if m[0] == "OPS" for name in m[1:])
    if not run.finished or not ops:
        return f"listing TensorFlow's ops failed ({'timeout' if run.timed_out else f'status {run.exit_status}'})"
    return ops, tagged(run.messages, "VERSION") or ""
