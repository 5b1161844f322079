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
import functools
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace

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
    print("VERSION " + version, flush=True)
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
    print("UNAVAILABLE " + " ".join(str(exc).split()), flush=True)
    sys.exit(3)
finish = lambda: None
if framework == "torch":
    import torch
    registry = lambda: {s.name for s in torch._C._jit_get_all_schemas()}
    print("VERSION " + torch.__version__, flush=True)
    print("BUILTIN " + " ".join(sorted({name.split("::")[0] for name in registry()})), flush=True)
    load = torch.ops.load_library
elif framework == "tensorflow":
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.framework import versions
    print("VERSION " + versions.__version__, flush=True)
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
    status: str  # "loaded", "failed", "crashed", "timeout", "not loaded" (after a failure), "unavailable"
    message: str
    signal: int | None
    output: str
    sandbox_files: tuple[str, ...]  # what the library wrote into its working directory
    registered: tuple[str, ...] = ()  # ops/schemas the framework registry gained (framework probes only)
    framework_version: str = ""  # of the framework that loaded it (framework probes only)
    builtin_namespaces: tuple[str, ...] = ()  # Torch: the namespaces the framework registers itself


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
    session, which is when ONNX Runtime rejects conflicting registrations."""
    paths = [os.path.abspath(lib) for lib in libraries]
    python = python or sys.executable
    if framework == "onnxruntime" and runtime is None:
        runtime = onnxruntime_library(python)
        if runtime is None:
            message = f"{python} has no onnxruntime package with a libonnxruntime.so"
            return tuple(ProbeResult(p, "unavailable", message, None, "", ()) for p in paths)
    argv = [python, "-I", "-c", LOADER, framework, runtime or "", *paths]
    status, output, files, timed_out = run_isolated(argv, timeout, memory_mb)
    lines = output.splitlines()
    version = _tagged(lines, "VERSION") or ""
    builtin = tuple((_tagged(lines, "BUILTIN") or "").split())
    if (unavailable := _tagged(lines, "UNAVAILABLE")) is not None:
        message = f"{python} cannot load {framework}: {unavailable}"
        return tuple(ProbeResult(p, "unavailable", message, None, output, files) for p in paths)
    results: list[ProbeResult] = []
    registered: list[str] = []
    for line in lines:  # the loader reports each library in order, and stops at the first failure
        if len(results) == len(paths):
            break
        if line.startswith(prefix := f"REGISTERED {paths[len(results)]} "):
            registered.append(line[len(prefix):])
        elif line == f"LOADED {paths[len(results)]}":
            results.append(ProbeResult(paths[len(results)], "loaded", "", None, output, files,
                                       tuple(sorted(set(registered))), version, builtin))
            registered = []
        elif line.startswith("FAILED "):
            results.append(ProbeResult(paths[len(results)], "failed", line[len("FAILED "):], None, output, files,
                                       framework_version=version))
            break
    if len(results) < len(paths) and (not results or results[-1].status == "loaded"):
        current = paths[len(results)]
        if timed_out:
            results.append(ProbeResult(current, "timeout", f"still loading after {timeout:g} s", None, output, files,
                                       framework_version=version))
        elif status is not None and status < 0:
            name = signal.Signals(-status).name
            reason = next((line.strip() for line in lines if "what():" in line), "")
            results.append(ProbeResult(current, "crashed", f"killed by {name} while loading"
                                       + (f": {reason}" if reason else ""), -status, output, files,
                                       framework_version=version))
        else:
            results.append(ProbeResult(current, "crashed", f"exited with status {status} while loading", None,
                                       output, files, framework_version=version))
    results += [ProbeResult(p, "not loaded", "an earlier library failed", None, output, files,
                            framework_version=version) for p in paths[len(results):]]
    return tuple(results)


def _tagged(lines: list[str], tag: str) -> str | None:
    """The rest of the first line the loader printed with `tag`, if any."""
    return next((line[len(tag) + 1:] for line in lines if line.startswith(tag + " ")), None)


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
    print("UNAVAILABLE " + " ".join(str(exc).split()), flush=True)
    sys.exit(3)
print("VERSION " + versions.__version__, flush=True)
for path in sys.argv[1:]:
    try:
        tf_session.TF_LoadLibrary(path)
    except Exception as exc:  # the library's own failure is reported by its probe; its ops are then missing
        print("FAILED " + path + " " + " ".join(str(exc).split()), flush=True)
ops = op_def_pb2.OpList.FromString(tf_session.TF_GetBuffer(tf_session.TF_GetAllOpList()))
for op in ops.op:
    print("OP " + op.name, flush=True)
"""


def tensorflow_ops(libraries: tuple[str, ...], python: str | None = None, timeout: float = 120,
                   memory_mb: int = 4096) -> tuple[frozenset[str], str] | str:
    """(every op name TensorFlow has registered once `libraries` are loaded in order, its version), or why
    TensorFlow could not be asked: what a SavedModel or GraphDef can use in that process."""
    argv = [python or sys.executable, "-I", "-c", TENSORFLOW_OPS, *(os.path.abspath(lib) for lib in libraries)]
    status, output, _files, timed_out = run_isolated(argv, timeout, memory_mb)
    lines = output.splitlines()
    if (unavailable := _tagged(lines, "UNAVAILABLE")) is not None:
        return f"{python or sys.executable} cannot load tensorflow: {unavailable}"
    ops = frozenset(line[len("OP "):] for line in lines if line.startswith("OP "))
    if timed_out or status != 0 or not ops:
        return f"listing TensorFlow's ops failed ({'timeout' if timed_out else f'status {status}'})"
    return ops, _tagged(lines, "VERSION") or ""
