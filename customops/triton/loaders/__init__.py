"""Loaders describe what Triton and each framework load, and how (one module per framework).

LOADERS is the one registry: the process-wide part of each loader (LD_PRELOAD, LD_LIBRARY_PATH, server
arguments), in the order launch writes LD_PRELOAD, and the per-model part of each framework backend, which
runs after Triton core has loaded the model's backend library (customops.triton.loaders.backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from customops.frameworks import Framework
from customops.triton.loaders import host, onnxruntime, pytorch, tensorflow, tensorrt
from customops.triton.plan import Context, LoaderResult

if TYPE_CHECKING:  # the process-wide loaders run on launch's cached path, which reads no repository
    from customops.triton.repository import Model

ProcessLoader = Callable[[Context], LoaderResult]
ModelLoader = Callable[["Model", Context, str, bool], LoaderResult]  # (model, ctx, backend library, first load)


@dataclass(frozen=True)
class Loader:
    framework: Framework | None  # the framework whose backend's models it serves; None: the server process itself
    process: ProcessLoader | None = None  # what the whole process needs before any model loads
    for_model: ModelLoader | None = None  # what the backend loads for one of its models

    @property
    def backend(self) -> str | None:
        return self.framework.backend if self.framework else None


LOADERS = (
    Loader(None, process=host.process),
    Loader(tensorflow.FRAMEWORK, tensorflow.process, tensorflow.for_model),
    Loader(pytorch.FRAMEWORK, pytorch.process),
    Loader(tensorrt.FRAMEWORK, tensorrt.process, tensorrt.for_model),
    Loader(onnxruntime.FRAMEWORK, for_model=onnxruntime.for_model),
)
FRAMEWORKS = tuple(loader.backend for loader in LOADERS if loader.backend)  # the framework backends modelled
OP_LIBRARY_BACKENDS = tuple(loader.framework.backend for loader in LOADERS  # those loading model_operations
                            if loader.framework and loader.framework.model_operations)


def process_wide(ctx: Context) -> list[LoaderResult]:
    """Every loader's process-wide part, in LD_PRELOAD order (host first)."""
    return [loader.process(ctx) for loader in LOADERS if loader.process is not None]


def for_model(model: Model, ctx: Context, library: str, first: bool) -> list[LoaderResult]:
    """What the framework behind the model's backend loads for it, once its backend `library` is loaded
    (`first`: the first model of that library)."""
    return [loader.for_model(model, ctx, library, first) for loader in LOADERS
            if loader.backend == model.backend and loader.for_model is not None]
