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
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from customops.errors import printable
from customops.probe import sandbox

# ONNX Runtime's own C API through ctypes, so no Python binding is needed: inside a Triton container the
# probe uses the backend's libonnxruntime.so. Each library's RegisterCustomOps gets an OrtApi table in
# which CreateCustomOpDomain, CustomOpDomain_Add and AddCustomOpDomain (slots 26-28; the struct is
# append-only, so they never move) record what it registers and forward to the real functions. After the
# last library a session is created from an empty model: that is when ONNX Runtime rejects conflicting
# registrations (frameworks.md §4.2).
ORT_LOADER = """
    C = ctypes
    ort = C.CDLL(runtime, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    ort.OrtGetApiBase.restype = C.POINTER(C.c_void_p * 2)
    base = ort.OrtGetApiBase().contents
    STATUS = lambda *args: C.CFUNCTYPE(C.c_void_p, *args)
    get_api = C.CFUNCTYPE(C.c_void_p, C.c_uint32)(base[0])
    version = C.CFUNCTYPE(C.c_char_p)(base[1])().decode()
    emit("VERSION", version)
    api_version = int(version.split(".")[1])
    while api_version > 1 and not get_api(api_version):
        api_version -= 1
    real_address = get_api(api_version)
    def mapping_end(address):
        for line in open("/proc/self/maps"):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return end
    real = (C.c_void_p * min(1024, (mapping_end(real_address) - real_address) // 8)).from_address(real_address)
    def check(status, context=""):
        if status:
            raise RuntimeError(context + C.CFUNCTYPE(C.c_char_p, C.c_void_p)(real[2])(status).decode())
    create_domain = STATUS(C.c_char_p, C.POINTER(C.c_void_p))(real[26])
    add_op = STATUS(C.c_void_p, C.c_void_p)(real[27])
    add_domain = STATUS(C.c_void_p, C.c_void_p)(real[28])
    domain_names, domain_ops = {}, {}
    def record_domain(name, out):
        status = create_domain(name, out)
        if not status:
            domain_names[out[0]] = name.decode()
        return status
    def record_op(domain, op):
        words = C.cast(op, C.POINTER(C.c_void_p))
        name = C.CFUNCTYPE(C.c_char_p, C.c_void_p)(words[2])(op).decode()
        provider = C.CFUNCTYPE(C.c_char_p, C.c_void_p)(words[3])(op) if words[3] else None
        suffix = "" if provider in (None, b"", b"CPUExecutionProvider") else " [" + provider.decode() + "]"
        domain_ops.setdefault(domain, []).append(name + suffix)
        return add_op(domain, op)
    def record_add(options, domain):
        added.update(domain_names.get(domain, "?") + ":" + op for op in domain_ops.get(domain, []))
        return add_domain(options, domain)
    hooks = [STATUS(C.c_char_p, C.POINTER(C.c_void_p))(record_domain), STATUS(C.c_void_p, C.c_void_p)(record_op),
             STATUS(C.c_void_p, C.c_void_p)(record_add)]
    table = (C.c_void_p * len(real))(*real)
    table[26:29] = [C.cast(hook, C.c_void_p).value for hook in hooks]
    wrapped_get_api = C.CFUNCTYPE(C.c_void_p, C.c_uint32)(lambda v: C.addressof(table) if get_api(v) else None)
    wrapped_base = (C.c_void_p * 2)(C.cast(wrapped_get_api, C.c_void_p).value, base[1])
    options = C.c_void_p()
    check(STATUS(C.POINTER(C.c_void_p))(real[10])(C.byref(options)))
    def load(path):
        try:
            library = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as exc:
            raise RuntimeError("Failed to load library " + path + " with error: " + str(exc))
        try:
            register = library.RegisterCustomOps
        except AttributeError as exc:
            raise RuntimeError("Failed to get symbol RegisterCustomOps with error: " + str(exc))
        register.restype, register.argtypes = C.c_void_p, (C.c_void_p, C.c_void_p)
        check(register(options, C.addressof(wrapped_base)))
    def finish():
        env, session = C.c_void_p(), C.c_void_p()
        check(STATUS(C.c_int, C.c_char_p, C.POINTER(C.c_void_p))(real[3])(3, b"customops-probe", C.byref(env)))
        model = bytes.fromhex(  # ir_version 8, opset 17, one Identity node: y = x, float[1]
            "08083a370a100a017812017922084964656e746974791201705a0f0a0178120a0a08080112040a020801620f0a0179120a0a"
            "08080112040a02080142040a001011")
        create = STATUS(C.c_void_p, C.c_char_p, C.c_size_t, C.c_void_p, C.POINTER(C.c_void_p))(real[8])
        check(create(env, model, len(model), options, C.byref(session)), "creating a session: ")
"""

LOADER = """
import ctypes, os, sys
framework, runtime, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    if framework in ("torch", "tensorflow"):
        __import__(framework)
    elif framework == "onnxruntime":
        ctypes.CDLL(runtime, mode=os.RTLD_NOW | os.RTLD_LOCAL)
except (ImportError, OSError) as exc:
    emit("UNAVAILABLE", " ".join(str(exc).split()))
    sys.exit(3)
finish = lambda: None
if framework == "torch":
    import torch
    registry = lambda: {s.name for s in torch._C._jit_get_all_schemas()}
    emit("VERSION", torch.__version__)
    emit("BUILTIN", " ".join(sorted({name.split("::")[0] for name in registry()})))
    load = torch.ops.load_library
elif framework == "tensorflow":
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.framework import versions
    emit("VERSION", versions.__version__)
    from tensorflow.python.client import pywrap_tf_session as tf_session
    def load(path):  # what tf.load_op_library does, keeping the op list TensorFlow reports for the library
        global added
        ops = op_def_pb2.OpList.FromString(tf_session.TF_GetOpList(tf_session.TF_LoadLibrary(path)))
        added = {op.name for op in ops.op}
elif framework == "onnxruntime":
""" + ORT_LOADER + """
else:
    load = lambda path: ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
for path in paths:
    before = registry() if framework == "torch" else set()
    added = set()
    try:
        load(path)
        if path == paths[-1]:
            finish()
    except Exception as exc:
        emit("FAILED", " ".join(str(exc).split()))
        sys.exit(1)
    if framework == "torch":
        added = registry() - before
    for name in sorted(added):
        emit("REGISTERED", path, name)
    emit("LOADED", path)
"""


@dataclass(frozen=True)
class ProbeResult:
    library: str
    status: str  # "loaded", "failed", "crashed", "timeout", "not loaded" (after a failure), "unavailable"
    message: str
    signal: int | None
    output: str
    sandbox_files: tuple[str, ...]  # what the library wrote into its working directory
    registered: tuple[str, ...] = ()  # ops/schemas the framework registry gained (framework probes only)
    framework_version: str = ""  # of the framework that loaded it (framework probes only)
    builtin_namespaces: tuple[str, ...] = ()  # Torch: the namespaces the framework registers itself
    containment: str = ""  # what the library could and could not do (sandbox.Containment.describe)


STATUSES = frozenset({"loaded", "failed", "crashed", "timeout", "not loaded", "unavailable"})


def probe_load(library: str, python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
               after: tuple[str, ...] = (), framework: str = "none", runtime: str | None = None) -> ProbeResult:
    """Load `after` (in order), then `library`, in one isolated process, and report on `library`: a
    duplicate registration between them shows as the framework's own failure (e.g. the abort of a second
    TORCH_LIBRARY); a failure of an earlier library is reported as this one's."""
    results = probe_group((*after, library), python, timeout, memory_mb, framework, runtime)
    failed = next((r for r in results if r.status != "loaded"), None)
    last = results[-1]
    if last.status == "not loaded" and failed is not None:
        return replace(last, status=failed.status, message=f"{failed.library}: {failed.message}",
                       signal=failed.signal)
    return last


def probe_group(libraries: tuple[str, ...], python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
                framework: str = "none", runtime: str | None = None) -> tuple[ProbeResult, ...]:
    """Load `libraries` in order into one isolated process, as `framework` loads op libraries, and report
    on each: "loaded" (with the names the framework's registry gained), "failed", "crashed" or "timeout"
    for the one being loaded when it went wrong, "not loaded" for the rest. "none" is a plain
    dlopen(RTLD_NOW | RTLD_LOCAL); "torch" and "tensorflow" use the framework's load call in `python`;
    "onnxruntime" registers them all into one session's options through `runtime` (a libonnxruntime.so;
    default: the one in `python`'s onnxruntime package), reports "domain:op" names, and then creates a
    session, which is when ONNX Runtime rejects conflicting registrations.

    A library runs in the loader's own process, so it could, by reading the loader's memory, learn the
    nonce and forge what the loader reports; a library that only prints the protocol, or writes it to
    every descriptor, cannot. A loader that reported every library loaded but did not finish cleanly (a
    crash, a timeout, an exit) has the last one reported as that, not as loaded."""
    paths = [os.path.abspath(lib) for lib in libraries]
    python = python or sys.executable
    if framework == "onnxruntime" and runtime is None:
        runtime = onnxruntime_library(python)
        if runtime is None:
            message = f"{python} has no onnxruntime package with a libonnxruntime.so"
            return tuple(ProbeResult(p, "unavailable", message, None, "", ()) for p in paths)
    readable = (*paths, runtime) if runtime else tuple(paths)
    run = sandbox.run(python, LOADER, [framework, runtime or "", *paths], timeout, memory_mb, readable)
    version = printable(_tagged(run.messages, "VERSION") or "")
    builtin = tuple(printable(_tagged(run.messages, "BUILTIN") or "").split())

    def result(library: str, status: str, message: str, signum: int | None = None, **found: Any) -> ProbeResult:
        return ProbeResult(library, status, printable(message), signum, run.output, run.files,
                           framework_version=version, containment=run.containment, **found)

    if run.error is not None:
        return tuple(result(p, "unavailable", f"the probe's sandbox failed: {run.error}") for p in paths)
    if (unavailable := _tagged(run.messages, "UNAVAILABLE")) is not None and run.exit_status == 3:
        return tuple(result(p, "unavailable", f"{python} cannot load {framework}: {unavailable}") for p in paths)
    results: list[ProbeResult] = []
    registered: list[str] = []
    for tag, *fields in run.messages:  # the loader reports each library in order, and stops at the first failure
        if len(results) == len(paths):
            break
        current = paths[len(results)]
        if tag == "REGISTERED" and len(fields) == 2 and fields[0] == current:
            registered.append(printable(fields[1]))
        elif tag == "LOADED" and fields == [current]:
            results.append(result(current, "loaded", "", registered=tuple(sorted(set(registered))),
                                  builtin_namespaces=builtin))
            registered = []
        elif tag == "FAILED" and len(fields) == 1:
            results.append(result(current, "failed", fields[0]))
            break
    if len(results) < len(paths) and (not results or results[-1].status == "loaded"):
        results.append(_ended(paths[len(results)], run, timeout, result, after_loaded=False))
    elif results and results[-1].status == "loaded" and not run.finished:
        results[-1] = _ended(paths[-1], run, timeout, result, after_loaded=True)
    results += [result(p, "not loaded", "an earlier library failed") for p in paths[len(results):]]
    return tuple(results)


def _ended(library: str, run: sandbox.Run, timeout: float, result: Callable[..., ProbeResult], after_loaded: bool
           ) -> ProbeResult:
    """The library that was loading (or was reported loaded last) when the loader ended without finishing."""
    then = "was reported loaded, then " if after_loaded else ""
    if run.timed_out:
        return result(library, "timeout", f"{then}still running after {timeout:g} s" if after_loaded
                      else f"still loading after {timeout:g} s")
    status = run.exit_status
    while_loading = "" if after_loaded else " while loading"
    if status is not None and status < 0:
        reason = next((line.strip() for line in run.output.splitlines() if "what():" in line), "")
        return result(library, "crashed", f"{then}killed by {_signal_name(-status)}{while_loading}"
                      + (f": {reason}" if reason else ""), -status)
    how = f"exited with status {status}" if status is not None else "ended without a status"
    return result(library, "crashed", f"{then}{how}{while_loading}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tagged(messages: tuple[tuple[str, ...], ...], tag: str) -> str | None:
    """The value of the first message the loader emitted with `tag`, if any."""
    return next((m[1] for m in messages if len(m) == 2 and m[0] == tag), None)


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
    init = package_file(python, "onnxruntime")
    found = sorted(glob.glob(os.path.join(os.path.dirname(init), "capi", "libonnxruntime.so*"))) if init else []
    return found[0] if found else None


TENSORFLOW_OPS = """
import sys
try:
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as tf_session
    from tensorflow.python.framework import versions
except ImportError as exc:
    emit("UNAVAILABLE", " ".join(str(exc).split()))
    sys.exit(3)
emit("VERSION", versions.__version__)
for path in sys.argv[1:]:
    try:
        tf_session.TF_LoadLibrary(path)
    except Exception as exc:  # the library's own failure is reported by its probe; its ops are then missing
        emit("FAILED", path, " ".join(str(exc).split()))
ops = op_def_pb2.OpList.FromString(tf_session.TF_GetBuffer(tf_session.TF_GetAllOpList()))
emit("OPS", *(op.name for op in ops.op))
"""


def tensorflow_ops(libraries: tuple[str, ...], python: str | None = None, timeout: float = 120,
                   memory_mb: int = 4096) -> tuple[frozenset[str], str] | str:
    """(every op name TensorFlow has registered once `libraries` are loaded in order, its version), or why
    TensorFlow could not be asked: what a SavedModel or GraphDef can use in that process."""
    python = python or sys.executable
    paths = [os.path.abspath(lib) for lib in libraries]
    run = sandbox.run(python, TENSORFLOW_OPS, paths, timeout, memory_mb, tuple(paths))
    if run.error is not None:
        return f"listing TensorFlow's ops failed: the probe's sandbox failed: {run.error}"
    if (unavailable := _tagged(run.messages, "UNAVAILABLE")) is not None and run.exit_status == 3:
        return f"{python} cannot load tensorflow: {unavailable}"
    ops = frozenset(name for m in run.messages if m[0] == "OPS" for name in m[1:])
    if not run.finished or not ops:
        return f"listing TensorFlow's ops failed ({'timeout' if run.timed_out else f'status {run.exit_status}'})"
    return ops, _tagged(run.messages, "VERSION") or ""
