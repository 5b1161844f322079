"""The TensorRT probe's loader script: loads plugin libraries against customops' recording stand-in for
libnvinfer.so.N, and reports the plugin creators each one registered.

customops never imports this module: customops/probe/tensorrt_standin.py hands its text to the sandbox
(customops/probe/sandbox_child.py's run_script), which calls main(emit, args) in the loader process. It needs
nothing but the standard library and ctypes and runs on Python 3.8 and later.

args: the stand-in (a libnvinfer.so.N built by customops), the number of placeholders, the placeholders
(libraries customops built for files the plugin libraries need that this machine lacks), TensorRT's own
plugin library (a container's libnvinfer_plugin.so.N, or "" for none), TensorRT's own libnvinfer.so.N (a
container's, or "" for none), then the libraries. The stand-in
and the placeholders are opened first, RTLD_LOCAL (their stubs must not come before anything else in any
lookup), so that a library's own DT_NEEDED libnvinfer.so.N is the stand-in (the dynamic linker matches an
object it has loaded by its SONAME), and the same for the placeholders. Each library is then dlopen()ed
(RTLD_NOW | RTLD_LOCAL), as Triton's TensorRT backend loads plugins=, which runs its static registrars;
when it exports getCreators or getPluginCreators, the creators they return are read (setLoggerFinder first,
when exported) but not registered: only TensorRT's IPluginRegistry::loadLibrary registers them, and Triton
never calls it. What it emits: VERSION once; for each library REGISTERED (library, "namespace::name/version"
and what became of it, see customops/probe/tensorrt_standin.py) for every attempt and every creator an entry
point returned, then LOADED (library); or FAILED (message) for the first library that could not be loaded,
and nothing after it; or UNAVAILABLE (message) when the stand-in cannot be opened (exit status 3). When a
container's libnvinfer.so.N is given and loads here, its registry is handed to the stand-in, which then
records each registration and lets TensorRT's own registry answer it (VERSION says which registry answered).
After the libraries, TensorRT's own plugin library is opened and its initLibNvInferPlugins(logger, "") called
with the stand-in's logger, as Triton's TensorRT backend does once the plugins= libraries are loaded, and
reported as one more library: its built-in creators, refused where a library registered one first.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

UNAVAILABLE_EXIT, FAILED_EXIT = 3, 1
LOCAL = os.RTLD_NOW | os.RTLD_LOCAL
ENTRY_POINTS = ("getCreators", "getPluginCreators")  # the registry's loadLibrary prefers the first
# What became of a registration: customops.probe.tensorrt_standin.Registration parses these
REFUSED, REPLACES = " [refused: already registered by {}]", " [replaces the one registered by {}]"
UNREACHABLE, ENTRY = " [unreachable: registered in namespace '{}']", " [entry point: not registered by dlopen]"


def main(emit: Callable[..., None], args: list[str]) -> int:
    """Load every library, stopping at the first failure; the exit status."""
    placeholders = int(args[1])
    try:
        standin = StandIn(args[0])
        for placeholder in args[2:2 + placeholders]:
            ctypes.CDLL(placeholder, mode=LOCAL)
    except OSError as exc:
        emit("UNAVAILABLE", one_line(exc))
        return UNAVAILABLE_EXIT
    emit("VERSION", standin.forward(args[3 + placeholders]))
    libraries = [(path, standin.read_entry_points) for path in args[4 + placeholders:]]
    if args[2 + placeholders]:
        libraries.append((args[2 + placeholders], standin.init_builtin))
    for path, register in libraries:
        first = standin.count()
        try:
            register(ctypes.CDLL(path, mode=LOCAL))
        except Exception as exc:
            emit("FAILED", one_line(exc))
            return FAILED_EXIT
        for index in range(first, standin.count()):
            emit("REGISTERED", path, standin.describe(index, path))
        if standin.lib.customops_standin_full():
            emit("FAILED", f"the libraries offered more creators than customops' stand-in records ({standin.count()})")
            return FAILED_EXIT
        emit("LOADED", path)
    return 0


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class StandIn:
    """The stand-in's recording registry, read through the functions it exports for customops."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path, mode=LOCAL)
        lib.customops_standin_field.restype = ctypes.c_char_p
        lib.customops_standin_field.argtypes = (ctypes.c_int32, ctypes.c_int32)
        for query in (lib.customops_standin_accepted, lib.customops_standin_entry, lib.customops_standin_other,
                      lib.customops_standin_found):
            query.argtypes = (ctypes.c_int32,)
        lib.customops_standin_logger_finder.restype = ctypes.c_void_p
        lib.customops_standin_entry_points.argtypes = (ctypes.c_void_p, ctypes.c_int32)
        lib.customops_standin_entry_points.restype = None
        self.lib = lib
        self.major = lib.customops_standin_major()
        self.owners: list[str] = []  # the library of each record, by index
        self.registry = ""  # TensorRT's own libnvinfer, once its registry answers

    def count(self) -> int:
        return int(self.lib.customops_standin_count())

    def field(self, index: int, field: int) -> str:
        return (self.lib.customops_standin_field(index, field) or b"").decode("utf-8", "replace")

    def text(self, index: int, field: int) -> str:
        """A field as reported: a library writes it, so brackets become parentheses (none forges a refusal)."""
        return self.field(index, field).replace("[", "(").replace("]", ")")

    def describe(self, index: int, path: str) -> str:
        """A record as "namespace::name/version" (the creator's own namespace), and what became of it."""
        while len(self.owners) <= index:
            self.owners.append(path)
        namespace, name, version, kind, given = (self.text(index, f) for f in range(5))
        identity = f"{namespace}::{name}/{version}" if name or version else \
            f"[a creator of kind {kind!r}, whose name customops cannot read]"
        if self.lib.customops_standin_entry(index):
            return identity + ENTRY
        other = self.lib.customops_standin_other(index)
        owner = self.owners[other] if 0 <= other < index else self.registry or "?"  # else held before any library
        if not self.lib.customops_standin_accepted(index):
            return identity + REFUSED.format(owner)
        fate = REPLACES.format(owner) if other >= 0 else ""
        return identity + fate + ("" if self.lib.customops_standin_found(index) else UNREACHABLE.format(given))

    def forward(self, path: str) -> str:
        """Hand TensorRT's own registry in `path` (a container's libnvinfer.so.N) to the stand-in, where it loads
        here; which registry answers."""
        own = f"customops' stand-in for libnvinfer.so.{self.major}"
        if not path:
            return own
        try:
            real = ctypes.CDLL(path, mode=LOCAL)
            real.getPluginRegistry.restype = ctypes.c_void_p
            registry = real.getPluginRegistry()
        except (OSError, AttributeError) as exc:
            return f"{own} (TensorRT's own {path} did not load here: {one_line(exc)})"
        if not registry:
            return f"{own} (TensorRT's own {path} returned no registry)"
        self.lib.customops_standin_forward.argtypes = (ctypes.c_void_p,)
        self.lib.customops_standin_forward(registry)  # customops' preflight run showed this does not crash
        self.registry = path
        return f"TensorRT's own registry in {path}, recorded by {own}"

    def read_entry_points(self, library: ctypes.CDLL) -> None:
        """Read what the library's getCreators (or getPluginCreators) returns, as loadLibrary would."""
        for name in ENTRY_POINTS:
            function = getattr(library, name, None)
            if function is None:
                continue
            finder = getattr(library, "setLoggerFinder", None)
            if finder is not None:
                finder.argtypes, finder.restype = (ctypes.c_void_p,), None
                finder(self.lib.customops_standin_logger_finder())
            number = ctypes.c_int32(0)
            function.argtypes, function.restype = (ctypes.POINTER(ctypes.c_int32),), ctypes.c_void_p
            creators = function(ctypes.byref(number))
            self.lib.customops_standin_entry_points(creators, number.value)
            return

    def init_builtin(self, library: ctypes.CDLL) -> None:
        """TensorRT's own plugin library registers its built-in creators when initLibNvInferPlugins is called."""
        init = getattr(library, "initLibNvInferPlugins", None)
        if init is None:
            raise OSError("it does not export initLibNvInferPlugins")
        self.lib.getLogger.restype = ctypes.c_void_p
        init.argtypes, init.restype = (ctypes.c_void_p, ctypes.c_char_p), ctypes.c_bool
        init(self.lib.getLogger(), b"")
