"""PyTorch backend custom ops (pytorch_backend README, "Custom ops"): there is no model-config mechanism,
so nothing is loaded per model; op libraries are LD_PRELOADed, and /opt/tritonserver/backends/pytorch must be
on LD_LIBRARY_PATH so that their libtorch dependencies resolve before the backend is loaded."""

from __future__ import annotations

from customops.triton.plan import Context, LoadedBy, LoaderResult, preloaded


def process(ctx: Context) -> LoaderResult:
    return preloaded(ctx, ctx.manifest.pytorch_ops, LoadedBy.PYTORCH, "the PyTorch op libraries", "[pytorch] ops")
