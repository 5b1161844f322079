"""PyTorch backend custom ops (triton.md §3.3): there is no model-config mechanism; op libraries are
LD_PRELOADed, and /opt/tritonserver/backends/pytorch must be on LD_LIBRARY_PATH so that their libtorch
dependencies resolve before the backend is loaded."""

from __future__ import annotations

from customops.triton.plan import Context, LoaderResult, LoadStep
from customops.triton.repository import Model


def process(ctx: Context) -> LoaderResult:
    paths = ctx.manifest.pytorch_ops  # type: ignore[attr-defined]
    if not paths:
        return LoaderResult()
    steps = tuple(LoadStep(ctx.container_path(p), p, "pytorch", "preload", preload=True) for p in paths)
    return LoaderResult(steps=steps, library_path=(f"{ctx.container.backend_dir}/pytorch",),  # type: ignore[attr-defined]
                        library_path_for="the PyTorch op libraries")


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    return LoaderResult()
