"""TensorRT plugin libraries (tensorrt_backend src/tensorrt.cc): either LD_PRELOAD, or
--backend-config=tensorrt,plugins=a.so;b.so (one setting per flag), which the backend dlopen()s (RTLD_NOW |
RTLD_LOCAL) in TRITONBACKEND_Initialize, at the first TensorRT model load, before its model is deserialized. A
plugin that fails to load there is only logged; the model then fails at deserialization."""

from __future__ import annotations

from typing import TYPE_CHECKING

from customops.frameworks import TENSORRT
from customops.triton.plan import Context, LoadedBy, LoaderResult, LoadStep, Purpose, in_manifest, manifest_preload

if TYPE_CHECKING:  # the process-wide loaders run on launch's cached path, which reads no repository
    from customops.triton.repository import Model


FRAMEWORK = TENSORRT
PLUGINS = FRAMEWORK.manifest.entry if FRAMEWORK.manifest else ""  # the manifest entry listing them


def process(ctx: Context) -> LoaderResult:
    manifest = ctx.manifest
    paths = manifest.listed(FRAMEWORK)
    if not paths:
        return LoaderResult()
    if manifest.load(FRAMEWORK) == "preload":
        return LoaderResult(steps=tuple(manifest_preload(ctx, p, LoadedBy.TENSORRT, PLUGINS) for p in paths))
    setting = f"{FRAMEWORK.backend},{FRAMEWORK.plugins}=" + ";".join(ctx.container_path(p) for p in paths)
    return LoaderResult(server_args=(f"--backend-config={setting}",))


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    """At the first TensorRT model: the plugins of the command line's plugins= setting, then the manifest's."""
    if not first:
        return LoaderResult()
    manifest = ctx.manifest
    ours = manifest.listed(FRAMEWORK) if manifest.load(FRAMEWORK) == "backend-config" else ()
    written = {ctx.container_path(p): in_manifest(ctx, PLUGINS, p) for p in reversed(ours)}  # the first wins
    paths = dict.fromkeys([*ctx.server_plugins, *(ctx.container_path(p) for p in ours)])
    return LoaderResult(steps=tuple(  # a plugin of the server's command line is written in no text here
        LoadStep(path, ctx.source(path), LoadedBy.TENSORRT, Purpose.PLUGIN_LIBRARY, model=model.name, caller=library,
                 written=written.get(path)) for path in paths))
