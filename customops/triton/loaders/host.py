"""Extra host preloads from the manifest ([host] preload), e.g. libpython for torch ops that link
libtorch_python; they come first in LD_PRELOAD."""

from __future__ import annotations

from customops.triton.plan import Context, LoadedBy, LoaderResult, LoadStep, Purpose, in_manifest


def process(ctx: Context) -> LoaderResult:
    paths = ctx.manifest.host_preload
    return LoaderResult(steps=tuple(LoadStep(ctx.container_path(p), p, LoadedBy.HOST, Purpose.PRELOAD, preload=True,
                                             written=in_manifest(ctx, "[host] preload", p)) for p in paths))
