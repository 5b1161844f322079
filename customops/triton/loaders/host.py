"""Extra host preloads from the manifest ([host] preload), e.g. libpython for torch ops that link
libtorch_python; they come first in LD_PRELOAD."""

from __future__ import annotations

from customops.triton.plan import Context, LoaderResult, LoadStep


def process(ctx: Context) -> LoaderResult:
    paths = ctx.manifest.host_preload
    return LoaderResult(steps=tuple(LoadStep(ctx.container_path(p), p, "host", "preload", preload=True)
                                    for p in paths))
