"""ONNX Runtime backend custom ops (onnxruntime_backend src/onnxruntime.cc).

For every model instance (ORT session) the backend calls RegisterCustomOpsLibrary: dlopen(RTLD_NOW |
RTLD_LOCAL), then dlsym("RegisterCustomOps"), which must be exported. The backend has no process-wide
mechanism: op libraries come only from each model's model_operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from customops.triton.loaders.tensorflow import op_libraries
from customops.triton.plan import Context, LoadedBy, LoaderResult

if TYPE_CHECKING:  # the process-wide loaders run on launch's cached path, which reads no repository
    from customops.triton.repository import Model

ENTRY_POINT = "RegisterCustomOps"


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    return op_libraries(model, ctx, library, LoadedBy.ONNXRUNTIME, entry_points=(ENTRY_POINT,))
