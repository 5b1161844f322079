"""PyTorch backend custom ops (pytorch_backend README, "Custom ops"): there is no model-config mechanism,
so nothing is loaded per model; op libraries are LD_PRELOADed, and /opt/tritonserver/backends/pytorch must be
on LD_LIBRARY_PATH so that their libtorch dependencies resolve before the backend is loaded."""

from __future__ import annotations

from customops.triton.plan import Context, LoaderResult, LoadStep


def process(ctx: Context) -> LoaderResult:
    paths = ctx.manifest.pytorch_ops
    if not paths:
        return LoaderResult()
    steps = tuple(LoadStep(ctx.container_path(p), p, "pytorch", "preload", preload=True) for p in paths)
    return LoaderResult(steps=steps, library_path=(f"{ctx.container.backend_dir}/pytorch",),
                        library_path_for="the PyTorch op libraries")
