"""The probe's loader script: loads op libraries in order, as a framework loads them, and reports each one.

customops never imports this module: customops/probe/frameworks.py hands its text to the sandbox
(customops/probe/sandbox_child.py's run_script), which calls main(emit, args) in the loader process of the
probe interpreter. It needs nothing but the standard library and ctypes and runs on Python 3.8 and later.

args: the framework ("none", "torch", "tensorflow", "onnxruntime" or "python"), the framework's C-API library
(the libonnxruntime.so for "onnxruntime"; for "tensorflow" a libtensorflow_cc.so.2, or "" for the Python package;
for "python" a JSON object: the version of the Python the modules are for, the directories put before sys.path,
each module's name; "" for the others), optionally "--needs" and a JSON object (each library, the C-API library
among them -> the [name, path] pairs of the container's files it needs, in the order to load them:
customops/probe/needs.py),
then the libraries. What it emits, in order: VERSION and BUILTIN (Torch's own namespaces) once;
for each library REGISTERED (library, name) for every name the registry gained, then LOADED (library); or
FAILED (message) for the first library whose load call raised, and nothing after it; or UNAVAILABLE
(message) when the framework cannot be imported (exit status 3).
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # defined by child_forks.py's text, which follows this one's in the script the sandbox runs,
    from customops.inspect.protowire import varint  # and by protowire.py's, which follows both
    from customops.probe.child_forks import in_forks

UNAVAILABLE_EXIT, FAILED_EXIT = 3, 1
LOCAL = os.RTLD_NOW | os.RTLD_LOCAL
NEEDS: dict[str, list[list[str]]] = {}  # what main read after "--needs"


def needs_loaded(library: str) -> None:
    """Before `library`: dlopen, by path, each container file its DT_NEEDED entries resolve to in the container,
    so that ld.so matches those names against them instead of searching this machine; a name the process
    already has an object for (this machine's glibc, the framework it imported) keeps that object."""
    for name, path in NEEDS.get(library, ()):
        try:
            ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            ctypes.CDLL(path, mode=LOCAL)


def main(emit: Callable[..., None], args: list[str]) -> int:
    """Load every library, stopping at the first failure; the exit status. With "--groups", each group in a
    process of its own (customops/probe/child_forks.py, whose text follows this one's)."""
    if args[2:3] == ["--needs"]:
        NEEDS.update(json.loads(args[3]))
        args = [*args[:2], *args[4:]]
    if args[2:3] == ["--groups"]:
        return in_forks(emit, args[0], args[1], args[3:])
    loader = prepare(args[0], args[1], emit)
    return loader if isinstance(loader, int) else load_all(loader, args[2:], emit)


def prepare(framework: str, runtime: str, emit: Callable[..., None]) -> Dlopen | int:
    """The framework's loader, once the framework is in the process; or the exit status when it cannot be."""
    if framework == "python":
        return python_imports(json.loads(runtime), emit)
    try:
        if runtime and framework in ("tensorflow", "onnxruntime", "torch"):
            needs_loaded(runtime)
            ctypes.CDLL(runtime, mode=LOCAL)
        elif framework in ("torch", "tensorflow"):
            __import__(framework)
    except (ImportError, OSError) as exc:
        emit("UNAVAILABLE", one_line(exc))
        return UNAVAILABLE_EXIT
    return loader_for(framework, runtime, emit)


def load_all(loader: Dlopen, paths: list[str], emit: Callable[..., None]) -> int:
    """Load `paths` in order with `loader`, reporting each; the exit status."""
    for path in paths:
        try:
            needs_loaded(path)
            added = loader.load(path)
            if path == paths[-1]:
                loader.finish()
        except Exception as exc:
            emit("FAILED", one_line(exc))
            return FAILED_EXIT
        for name in sorted(added):
            emit("REGISTERED", path, name)
        emit("LOADED", path)
    return 0


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class Dlopen:
    """A plain dlopen(RTLD_NOW | RTLD_LOCAL), as a backend opens a library it was given."""

    def load(self, path: str) -> set[str]:
        """Load `path`; the names the framework's registry gained (the set may grow until finish)."""
        ctypes.CDLL(path, mode=LOCAL)
        return set()

    def finish(self) -> None:
        """What runs after the last library (ONNX Runtime: creating a session)."""


class Torch(Dlopen):
    """torch.ops.load_library, which Triton's PyTorch backend does for each op library; the schemas gained."""

    def __init__(self, emit: Callable[..., None]) -> None:
        import torch

        self.torch = torch
        emit("VERSION", torch.__version__)
        emit("BUILTIN", " ".join(sorted({name.split("::")[0] for name in self.schemas()})))

    def schemas(self) -> set[str]:
        return {s.name for s in self.torch._C._jit_get_all_schemas()}

    def load(self, path: str) -> set[str]:
        before = self.schemas()
        self.torch.ops.load_library(path)
        return self.schemas() - before


class TorchC(Dlopen):
    """A libtorch without its Python package (the container's libtorch_cpu.so, which brings libc10.so): each
    op library is dlopen()ed as torch.ops.load_library does (RTLD_LOCAL); its TORCH_LIBRARY blocks register
    into that libtorch's dispatcher while it loads, so a library that cannot load there, or aborts, fails
    as in the server. What it registers is not listed (that needs the Python package)."""

    def __init__(self, runtime: str, emit: Callable[..., None]) -> None:
        ctypes.CDLL(runtime, mode=LOCAL)
        emit("VERSION", torch_version(runtime))


def torch_version(library: str) -> str:
    """TORCH_VERSION as libtorch_cpu.so stores it: right after the ONNX exporter's producer name "pytorch"."""
    import mmap
    import re

    with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(b"\0pytorch\0")
        while at >= 0:
            for word in bytes(data[at + 9:at + 105]).split(b"\0"):
                if re.fullmatch(rb"\d+\.\d+\.\d+[0-9A-Za-z.+-]{0,40}", word):
                    return word.decode()
            at = data.find(b"\0pytorch\0", at + 1)
    return ""


class Tensorflow(Dlopen):
    """What tf.load_op_library does, keeping the op list TensorFlow reports for the library."""

    def __init__(self, emit: Callable[..., None]) -> None:
        from tensorflow.core.framework import op_def_pb2
        from tensorflow.python.framework import versions

        emit("VERSION", versions.__version__)
        from tensorflow.python.client import pywrap_tf_session

        self.op_list, self.session = op_def_pb2.OpList, pywrap_tf_session

    def load(self, path: str) -> set[str]:
        ops = self.op_list.FromString(self.session.TF_GetOpList(self.session.TF_LoadLibrary(path)))
        return {op.name for op in ops.op}


class TensorflowBuffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t), ("dealloc", ctypes.c_void_p)]


def delimited(data: bytes) -> Any:
    """(field number, bytes) for every length-delimited field of a protobuf message; others skipped. Its
    varints are read strictly, of any length (varint: customops/inspect/protowire.py, whose text follows)."""
    at = 0
    while at < len(data):
        key, at = varint(data, at, strict=True, most=None)
        kind = key & 7
        if kind == 0:
            _, at = varint(data, at, strict=True, most=None)
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        elif kind == 2:
            size, at = varint(data, at, strict=True, most=None)
            yield key >> 3, data[at:at + size]
            at += size
        else:
            raise ValueError(f"unexpected protobuf wire type {kind}")


def op_names(op_list: bytes) -> set[str]:
    """The names of an OpList's ops (tensorflow/core/framework/op_def.proto: OpList.op = 1, OpDef.name = 1)."""
    return {name.decode() for number, op in delimited(op_list) if number == 1
            for n, name in delimited(op) if n == 1}


class TensorflowC(Dlopen):
    """TensorFlow's own C API through ctypes, as Triton's TensorFlow backend loads a model's op libraries
    (TF_LoadLibrary), so no Python package is needed: the container's libtensorflow_cc.so.2 (which brings its
    libtensorflow_framework.so.2) loads them; TF_GetOpList gives the ops each library registered."""

    def __init__(self, runtime: str, emit: Callable[..., None]) -> None:
        tf = ctypes.CDLL(runtime, mode=LOCAL)  # dlsym on its handle also finds what its dependencies define
        tf.TF_Version.restype = ctypes.c_char_p
        tf.TF_NewStatus.restype = ctypes.c_void_p
        tf.TF_GetCode.restype, tf.TF_GetCode.argtypes = ctypes.c_int, (ctypes.c_void_p,)
        tf.TF_Message.restype, tf.TF_Message.argtypes = ctypes.c_char_p, (ctypes.c_void_p,)
        tf.TF_LoadLibrary.restype, tf.TF_LoadLibrary.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_void_p)
        tf.TF_GetOpList.restype, tf.TF_GetOpList.argtypes = TensorflowBuffer, (ctypes.c_void_p,)
        emit("VERSION", tf.TF_Version().decode())
        self.tf = tf

    def load(self, path: str) -> set[str]:
        status = self.tf.TF_NewStatus()
        library = self.tf.TF_LoadLibrary(os.fsencode(path), status)
        if self.tf.TF_GetCode(status) != 0 or not library:
            raise RuntimeError((self.tf.TF_Message(status) or b"").decode(errors="replace"))
        found = self.tf.TF_GetOpList(library)
        return op_names(ctypes.string_at(found.data, found.length) if found.data else b"")


# Slots of ONNX Runtime's OrtApi (include/onnxruntime/core/session/onnxruntime_c_api.h; the struct is
# append-only, so they never move).
GET_ERROR_MESSAGE, CREATE_ENV, CREATE_SESSION_FROM_ARRAY, CREATE_SESSION_OPTIONS = 2, 3, 8, 10
CREATE_CUSTOM_OP_DOMAIN, CUSTOM_OP_DOMAIN_ADD, ADD_CUSTOM_OP_DOMAIN = 26, 27, 28
EMPTY_MODEL = bytes.fromhex(  # ir_version 8, opset 17, one Identity node: y = x, float[1]
    "08083a370a100a017812017922084964656e746974791201705a0f0a0178120a0a08080112040a020801620f0a0179120a0a"
    "08080112040a02080142040a001011")


def status_function(*argtypes: Any) -> Any:
    """The ctypes type of an OrtApi function that returns an OrtStatus* (NULL: success)."""
    return ctypes.CFUNCTYPE(ctypes.c_void_p, *argtypes)


def mapping_end(address: int) -> int:
    """Where the mapping that holds `address` ends: how much of the OrtApi table can be copied."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return end
    raise RuntimeError(f"no mapping holds the OrtApi table at {address:#x}")


class OnnxRuntime(Dlopen):
    """ONNX Runtime's own C API through ctypes, so no Python binding is needed: inside a Triton container
    the probe uses the backend's libonnxruntime.so. Each library's RegisterCustomOps gets an OrtApi table in
    which CreateCustomOpDomain, CustomOpDomain_Add and AddCustomOpDomain record what it registers and forward
    to the real functions. After the last library a session is created from an empty model: that is when
    ONNX Runtime rejects conflicting registrations (CreateCustomRegistry in
    onnxruntime/core/session/custom_ops.cc, called when the session is created)."""

    def __init__(self, runtime: str, emit: Callable[..., None]) -> None:
        ort = ctypes.CDLL(runtime, mode=LOCAL)
        ort.OrtGetApiBase.restype = ctypes.POINTER(ctypes.c_void_p * 2)
        base = ort.OrtGetApiBase().contents
        get_api = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)(base[0])
        version = ctypes.CFUNCTYPE(ctypes.c_char_p)(base[1])().decode()
        emit("VERSION", version)
        api_version = int(version.split(".")[1])
        while api_version > 1 and not get_api(api_version):
            api_version -= 1
        address = get_api(api_version)
        self.real = (ctypes.c_void_p * min(1024, (mapping_end(address) - address) // 8)).from_address(address)
        self.domain_names: dict[int, str] = {}
        self.domain_ops: dict[int, list[str]] = {}
        self.added: set[str] = set()
        pointer_out = ctypes.POINTER(ctypes.c_void_p)
        self.hooks = [status_function(ctypes.c_char_p, pointer_out)(self.record_domain),
                      status_function(ctypes.c_void_p, ctypes.c_void_p)(self.record_op),
                      status_function(ctypes.c_void_p, ctypes.c_void_p)(self.record_add)]
        self.table = (ctypes.c_void_p * len(self.real))(*self.real)
        self.table[CREATE_CUSTOM_OP_DOMAIN:ADD_CUSTOM_OP_DOMAIN + 1] = [
            ctypes.cast(hook, ctypes.c_void_p).value for hook in self.hooks]
        self.wrapped_get_api = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)(
            lambda v: ctypes.addressof(self.table) if get_api(v) else None)
        self.wrapped_base = (ctypes.c_void_p * 2)(ctypes.cast(self.wrapped_get_api, ctypes.c_void_p).value, base[1])
        self.create_domain = self.api(CREATE_CUSTOM_OP_DOMAIN, ctypes.c_char_p, pointer_out)
        self.add_op = self.api(CUSTOM_OP_DOMAIN_ADD, ctypes.c_void_p, ctypes.c_void_p)
        self.add_domain = self.api(ADD_CUSTOM_OP_DOMAIN, ctypes.c_void_p, ctypes.c_void_p)
        self.options = ctypes.c_void_p()
        self.check(self.api(CREATE_SESSION_OPTIONS, pointer_out)(ctypes.byref(self.options)))

    def api(self, slot: int, *argtypes: Any) -> Any:
        """The real OrtApi function in `slot`, as a callable that returns an OrtStatus*."""
        return status_function(*argtypes)(self.real[slot])

    def check(self, status: int | None, context: str = "") -> None:
        if status:
            message = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(self.real[GET_ERROR_MESSAGE])(status)
            raise RuntimeError(context + message.decode())

    def record_domain(self, name: bytes, out: Any) -> int | None:
        status: int | None = self.create_domain(name, out)
        if not status:
            self.domain_names[out[0]] = name.decode()
        return status

    def record_op(self, domain: int, op: int) -> int | None:
        words = ctypes.cast(op, ctypes.POINTER(ctypes.c_void_p))
        name = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(words[2])(op).decode()
        provider = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(words[3])(op) if words[3] else None
        suffix = "" if provider in (None, b"", b"CPUExecutionProvider") else " [" + provider.decode() + "]"
        self.domain_ops.setdefault(domain, []).append(name + suffix)
        status: int | None = self.add_op(domain, op)
        return status

    def record_add(self, options: int, domain: int) -> int | None:
        self.added.update(self.domain_names.get(domain, "?") + ":" + op for op in self.domain_ops.get(domain, []))
        status: int | None = self.add_domain(options, domain)
        return status

    def load(self, path: str) -> set[str]:
        """RegisterCustomOps(options, api_base), as ONNX Runtime's RegisterCustomOpsLibrary does, with the
        recording table; the domain:op names added (until finish, which may still add some)."""
        self.added = set()
        try:
            library = ctypes.CDLL(path, mode=LOCAL)
        except OSError as exc:
            raise RuntimeError("Failed to load library " + path + " with error: " + str(exc)) from None
        try:
            register = library.RegisterCustomOps
        except AttributeError as exc:
            raise RuntimeError("Failed to get symbol RegisterCustomOps with error: " + str(exc)) from None
        register.restype, register.argtypes = ctypes.c_void_p, (ctypes.c_void_p, ctypes.c_void_p)
        self.check(register(self.options, ctypes.addressof(self.wrapped_base)))
        return self.added

    def finish(self) -> None:
        env, session = ctypes.c_void_p(), ctypes.c_void_p()
        pointer_out = ctypes.POINTER(ctypes.c_void_p)
        self.check(self.api(CREATE_ENV, ctypes.c_int, ctypes.c_char_p, pointer_out)(3, b"customops-probe",
                                                                                  ctypes.byref(env)))
        create = self.api(CREATE_SESSION_FROM_ARRAY, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                          ctypes.c_void_p, pointer_out)
        self.check(create(env, EMPTY_MODEL, len(EMPTY_MODEL), self.options, ctypes.byref(session)),
                   "creating a session: ")


class PythonImport(Dlopen):
    """CPython importing extension modules by file, as the Python backend's stub imports a model's: its extension
    loader dlopen()s the file (RTLD_NOW | RTLD_LOCAL, sys.getdlopenflags()) and calls PyInit_<name>."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def load(self, path: str) -> set[str]:
        import importlib.machinery
        import importlib.util
        import sys

        name = self.names.get(path) or os.path.basename(path).split(".")[0]
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_loader(name, loader, origin=path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        loader.exec_module(module)
        return set()


def python_imports(settings: dict[str, Any], emit: Callable[..., None]) -> Dlopen | int:
    """This interpreter as the stub's, where it is that Python: the stub's directories first on sys.path."""
    import sys

    have = ".".join(map(str, sys.version_info[:2]))
    emit("VERSION", ".".join(map(str, sys.version_info[:3])))
    if settings["version"] and have != settings["version"]:
        emit("UNAVAILABLE", f"it is Python {have}; the stub's is {settings['version']}")
        return UNAVAILABLE_EXIT
    sys.path[:0] = settings["path"]
    return PythonImport(settings["names"])


def loader_for(framework: str, runtime: str, emit: Callable[..., None]) -> Dlopen:
    if framework == "torch":
        return TorchC(runtime, emit) if runtime else Torch(emit)
    if framework == "tensorflow":
        return TensorflowC(runtime, emit) if runtime else Tensorflow(emit)
    if framework == "onnxruntime":
        return OnnxRuntime(runtime, emit)
    return Dlopen()
