"""ONNX Runtime backend custom ops (triton.md §3.2).

For every model instance (ORT session) the backend calls RegisterCustomOpsLibrary: dlopen(RTLD_NOW |
RTLD_LOCAL), then dlsym("RegisterCustomOps"), which must be exported.
"""

from __future__ import annotations

from customops.triton.loaders.tensorflow import op_libraries
from customops.triton.plan import Context, LoaderResult
from customops.triton.repository import Model

ENTRY_POINT = "RegisterCustomOps"


def process(ctx: Context) -> LoaderResult:
    return LoaderResult()


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    return op_libraries(model, ctx, library, "onnxruntime", entry_points=(ENTRY_POINT,))
