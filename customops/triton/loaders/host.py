"""Extra host preloads from the manifest ([host] preload), e.g. libpython for torch ops that link
libtorch_python; they come first in LD_PRELOAD."""

from __future__ import annotations

from customops.triton.plan import Context, LoadedBy, LoaderResult, manifest_preload


def process(ctx: Context) -> LoaderResult:
    return LoaderResult(steps=tuple(manifest_preload(ctx, p, LoadedBy.HOST, "[host] preload")
                                    for p in ctx.manifest.host_preload))
