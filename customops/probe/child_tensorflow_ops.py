"""The probe script that lists TensorFlow's op registry once the given op libraries are loaded in order.

customops never imports this module: customops/probe/frameworks.py hands its text to the sandbox
(customops/probe/sandbox_child.py's run_script), which calls main(emit, args) in the loader process of the
probe interpreter. It needs nothing but the standard library and runs on Python 3.8 and later.

args: a libtensorflow_cc.so.2 whose C API to use (the container's), or "" for the interpreter's tensorflow
package; then the libraries. It emits VERSION, FAILED (library, message) for each library TensorFlow
refused, then OPS with every op name registered; or UNAVAILABLE (message) when TensorFlow cannot be loaded
(exit status 3).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # defined by customops/inspect/protowire.py's text, which follows this one's in the script
    from customops.inspect.protowire import varint

UNAVAILABLE_EXIT = 3


def main(emit: Callable[..., None], args: list[str]) -> int:
    runtime, paths = args[0], args[1:]
    try:
        registry = CApi(runtime) if runtime else Package()
    except (ImportError, OSError) as exc:
        emit("UNAVAILABLE", one_line(exc))
        return UNAVAILABLE_EXIT
    emit("VERSION", registry.version)
    for path in paths:
        try:
            registry.load(path)
        except Exception as exc:  # the library's own failure is reported by its probe; its ops are then missing
            emit("FAILED", path, one_line(exc))
    emit("OPS", *sorted(registry.ops()))
    return 0


class Package:
    """The interpreter's tensorflow package."""

    def __init__(self) -> None:
        from tensorflow.core.framework import op_def_pb2
        from tensorflow.python.client import pywrap_tf_session
        from tensorflow.python.framework import versions

        self.version, self.op_list, self.session = versions.__version__, op_def_pb2.OpList, pywrap_tf_session

    def load(self, path: str) -> None:
        self.session.TF_LoadLibrary(path)

    def ops(self) -> set[str]:
        return {op.name for op in self.op_list.FromString(self.session.TF_GetBuffer(self.session.TF_GetAllOpList())).op}


class Buffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t), ("dealloc", ctypes.c_void_p)]


class CApi:
    """TensorFlow's C API in a libtensorflow_cc.so.2 (TF_LoadLibrary, TF_GetAllOpList), through ctypes."""

    def __init__(self, runtime: str) -> None:
        tf = ctypes.CDLL(runtime, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        tf.TF_Version.restype = ctypes.c_char_p
        tf.TF_NewStatus.restype = ctypes.c_void_p
        tf.TF_GetCode.restype, tf.TF_GetCode.argtypes = ctypes.c_int, (ctypes.c_void_p,)
        tf.TF_Message.restype, tf.TF_Message.argtypes = ctypes.c_char_p, (ctypes.c_void_p,)
        tf.TF_LoadLibrary.restype, tf.TF_LoadLibrary.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_void_p)
        tf.TF_GetAllOpList.restype = ctypes.POINTER(Buffer)
        self.tf, self.version = tf, tf.TF_Version().decode()

    def load(self, path: str) -> None:
        status = self.tf.TF_NewStatus()
        if not self.tf.TF_LoadLibrary(os.fsencode(path), status) or self.tf.TF_GetCode(status) != 0:
            raise RuntimeError((self.tf.TF_Message(status) or b"").decode(errors="replace"))

    def ops(self) -> set[str]:
        found = self.tf.TF_GetAllOpList().contents
        return op_names(ctypes.string_at(found.data, found.length))


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


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
