"""The probe script that lists TensorFlow's op registry once the given op libraries are loaded in order.

customops never imports this module: customops/probe/frameworks.py hands its text to the sandbox
(customops/probe/sandbox_child.py's run_script), which calls main(emit, args) in the loader process of the
probe interpreter. It needs nothing but the standard library and runs on Python 3.8 and later.

args: the libraries. It emits VERSION, FAILED (library, message) for each library TensorFlow refused, then
OPS with every op name registered; or UNAVAILABLE (message) when TensorFlow cannot be imported (exit
status 3).
"""

from __future__ import annotations

from collections.abc import Callable

UNAVAILABLE_EXIT = 3


def main(emit: Callable[..., None], args: list[str]) -> int:
    try:
        from tensorflow.core.framework import op_def_pb2
        from tensorflow.python.client import pywrap_tf_session as tf_session
        from tensorflow.python.framework import versions
    except ImportError as exc:
        emit("UNAVAILABLE", one_line(exc))
        return UNAVAILABLE_EXIT
    emit("VERSION", versions.__version__)
    for path in args:
        try:
            tf_session.TF_LoadLibrary(path)
        except Exception as exc:  # the library's own failure is reported by its probe; its ops are then missing
            emit("FAILED", path, one_line(exc))
    ops = op_def_pb2.OpList.FromString(tf_session.TF_GetBuffer(tf_session.TF_GetAllOpList()))
    emit("OPS", *(op.name for op in ops.op))
    return 0


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
