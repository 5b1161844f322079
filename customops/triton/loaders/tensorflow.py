"""TensorFlow backend custom ops (tensorflow_backend src/tensorflow.cc).

model_operations.op_library_filename -> TF_LoadLibrary at model load -> dlopen(RTLD_NOW | RTLD_LOCAL), inside a
process where the backend has already loaded libtensorflow_framework.so.2 (matched by SONAME). The manifest's
[tensorflow] preload instead puts libraries in LD_PRELOAD, which needs backends/tensorflow on LD_LIBRARY_PATH
(they NEED libtensorflow_framework.so.2 before any backend is loaded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from customops.codes import Code
from customops.emitters import emits
from customops.frameworks import TENSORFLOW, Framework
from customops.triton.plan import Context, LoadedBy, LoaderResult, LoadStep, Purpose, Written, preloaded

if TYPE_CHECKING:  # the process-wide loaders run on launch's cached path, which reads no repository
    from customops.findings import Finding
    from customops.triton.repository import Model

FRAMEWORK = TENSORFLOW


def process(ctx: Context) -> LoaderResult:
    return preloaded(ctx, FRAMEWORK)


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    return op_libraries(model, ctx, library, FRAMEWORK)


def op_libraries(model: Model, ctx: Context, backend_library: str, framework: Framework) -> LoaderResult:
    """model_operations entries, dlopen()ed by the framework inside the backend's process, which then looks up
    its entry points in each."""
    steps, findings = [], []
    for n, written in enumerate(model.op_libraries):
        if not written.startswith("/"):
            findings.append(relative_op_library(model, written, ctx))
        path = ctx.absolute(written)
        text = Written(model.config_path, written, "op_library_filename", model.op_libraries[:n].count(written)) \
            if model.config_path else None
        steps.append(LoadStep(path, ctx.source(path), LoadedBy(framework.backend), Purpose.OP_LIBRARY,
                              model=model.name, entry_points=framework.entry_points, caller=backend_library,
                              written=text))
    return LoaderResult(steps=tuple(steps), findings=tuple(findings))


@emits(Code.CO104)
def relative_op_library(model: Model, written: str, ctx: Context) -> Finding:
    """An op_library_filename that is not absolute: dlopen resolves it against the server's working directory,
    or through the ld.so search for a bare name."""
    from customops.findings import Finding  # per model only: launch's cached start runs the process-wide part

    how = f"against the server working directory {ctx.server_cwd}" if "/" in written else "through the ld.so search"
    return Finding(Code.CO104, f"op library '{written}' of model '{model.name}' is not an absolute path",
                   model=model.name, library=written, file=model.config_path, evidence=(f"dlopen resolves it {how}",))
