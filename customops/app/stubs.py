"""The Python backend's stub processes, run by the linker model: for each model the backend serves, its stub
(customops.triton.python_stub) started with the environment the backend gives it, then the extension modules its
code imports (customops.triton.python_modules) loaded as CPython loads them, in that process."""

from __future__ import annotations

import os
import posixpath
import re

import numpy as np

from customops.app.inherited import NOTHING_INHERITED, Inherited
from customops.elf.cache import ElfReader
from customops.elf.constants import EM_X86_64
from customops.errors import ElfError
from customops.findings import Finding
from customops.frameworks import PYTHON
from customops.inspect import ipc_types
from customops.linker.process import Linker
from customops.linker.target import LinkerTarget
from customops.linker.types import Dlopen, Environment, Scenario, StepStatus
from customops.rules.versions import Undecided
from customops.triton import python_modules
from customops.triton.plan import Context, LoadedBy, LoadPlan, LoadStep, Purpose
from customops.triton.python_stub import STUB, StubProcess, StubRun, stub_for
from customops.triton.repository import Model

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # docker's, where the image sets none
UTILS_MODULE = "triton_python_backend_utils"  # the stub imports it before the model (pb_stub.cc StubSetup)
INIT = "PyInit_"
NAMED_INIT = re.compile(r"_?Py([A-Z][a-z]+)_Init")  # PyMarshal_Init: the marshal module's
INTERPRETERS_OWN = frozenset({"sys", "builtins"})  # made by the interpreter itself, before any import


def stub_processes(models: list[Model], plan: LoadPlan, ctx: Context) -> tuple[list[StubProcess], list[Finding]]:
    """The stub of every model the plan's Python backend serves, and the findings on those it cannot start one for
    (their archives are unpacked in that order: the n-th is /tmp/python_env_XXXXXX/n)."""
    stubs: list[StubProcess] = []
    findings: list[Finding] = []
    archives: set[str] = set()
    by_name = {m.name: m for m in models}
    for name, library in plan.python_models:
        model = by_name[name]
        stub, found = stub_for(model, ctx, library, len(archives))
        findings += found
        if stub is not None:
            stubs.append(stub)
            if stub.environment is not None and stub.environment.archive:
                archives.add(stub.environment.path)
    return stubs, findings


def run_stubs(models: list[Model], plan: LoadPlan, ctx: Context, target: LinkerTarget, reader: ElfReader,
              inherited: Inherited = NOTHING_INHERITED) -> tuple[tuple[StubRun, ...], list[Finding], list[str]]:
    """Every stub process the plan's Python backend starts, run; the findings on those it cannot start, and the
    notes on what the imports left undecided."""
    stubs, findings = stub_processes(models, plan, ctx)
    by_name = {m.name: m for m in models}
    libraries = dict(plan.python_models)
    runs = tuple(run_stub(stub, by_name[stub.model], plan, ctx, target, reader, inherited) for stub in stubs)
    notes = [note for run in runs for note in run.notes]
    notes += [_own_stub(stub, libraries[stub.model], target) for stub in stubs if stub.custom]
    return runs, findings, notes


def _own_stub(stub: StubProcess, library: str, target: LinkerTarget) -> str:
    """What is known of a model's own stub beside the server's libtriton_python.so: the shared-memory message
    types each names (a stub of another release exchanges other messages). Not a finding: which types a build
    happens to name is not known to be the whole contract."""
    ours, theirs = (ipc_types.shared_memory_types(host) if (host := target.host_path(path)) else None
                    for path in (stub.program, library))
    head = f"{stub.model} runs its own stub {stub.program}"
    if not ours or not theirs:
        return f"{head}: which release of the Python backend it was built from is not known (the message types it " \
               f"exchanges with {library} cannot be read from both)"
    if ours == theirs:
        return f"{head}: it names the same {len(ours)} shared-memory message types as {library}"
    only = [f"only the stub: {', '.join(sorted(ours - theirs))}" if ours - theirs else "",
            f"only {library}: {', '.join(sorted(theirs - ours))}" if theirs - ours else ""]
    return f"{head}: built from another release of the Python backend than {library}? their shared-memory " \
           f"message types differ ({'; '.join(o for o in only if o)})"


def unmodelled_stubs(plan: LoadPlan, ctx: Context) -> tuple[Undecided, ...]:
    """Without the container's files, each stub process is undecided (not a pass), as is each backend library the
    container's facts cannot place: the upgrade matrix shows `?` for their models."""
    backend_dir = ctx.container.backend_dir
    return (*(Undecided(name, f"{posixpath.dirname(library)}/{STUB}", STUB, "files")
              for name, library in plan.python_models),
            *(Undecided(name, f"{backend_dir}/{backend}", f"libtriton_{backend}.so", "backend directory")
              for name, backend in plan.unknown_backends))


def run_stub(stub: StubProcess, model: Model, plan: LoadPlan, ctx: Context, target: LinkerTarget, reader: ElfReader,
             inherited: Inherited = NOTHING_INHERITED) -> StubRun:
    """The stub started, then, where it starts, the model's extension modules loaded in it."""
    target = target.with_mounts((*target.mounts, *stub.mounts))
    linker = Linker(target, reader)
    server_path = inherited.library_path_with(plan.library_path)
    environment = Environment(library_path=":".join([*stub.library_path, *([server_path] if server_path else [])])
                              or None, preload=inherited.preload_with(plan.ld_preload), cwd=ctx.server_cwd)
    started = linker.run(Scenario(stub.program, environment))
    libpython = _libpython(stub, target, reader)
    env_python = python_modules.environment_version(target.host_path, stub.environment.directory) \
        if stub.environment is not None else None
    startup = started.startup
    version = python_modules.version_of(libpython or "")
    loaded = next((o.path for o in started.objects if posixpath.basename(o.name) == libpython
                   or o.soname == libpython), None)
    if startup is None or startup.status in (StepStatus.FATAL, StepStatus.CRASH) or version is None \
            or loaded is None or (env_python is not None and env_python != version):
        return StubRun(stub, started, libpython=libpython, environment_python=env_python)
    python = _interpreter(stub, model, ctx, target, version, loaded, reader)
    found = python_modules.imports(_model_py(stub, model, ctx), ctx.container_path(model.path), python,
                                   target.host_path, (UTILS_MODULE,),
                                   stub.environment.directory if stub.environment else None, ctx.cache_dir)
    steps = tuple(LoadStep(m.path, m.host_path, LoadedBy.PYTHON, Purpose.EXTENSION_MODULE, model=model.name,
                           entry_points=(INIT + m.module.rpartition(".")[2],)) for m in found.extensions)
    labels = [f"{i}:{stub.model}:{step.path}" for i, step in enumerate(steps)]
    prediction = linker.run(Scenario(stub.program, environment, tuple(
        Dlopen(s.path, calls=s.entry_points, label=label) for s, label in zip(steps, labels, strict=True))))
    by_label = dict(zip(labels, steps, strict=True))
    outcomes = tuple((by_label[o.label], o) for o in prediction.outcomes if o.label in by_label)
    optional = frozenset(m.path for m in found.extensions if m.optional)
    notes = [*found.notes, *(f"{model.name}: {step.path} fails to load ({outcome.message}); the code imports it under "
                             "try/except ImportError" for step, outcome in outcomes
                             if step.path in optional and not outcome.ok)]
    return StubRun(stub, prediction, outcomes, python, libpython, env_python, tuple(notes),
                   tuple((m.path, m.chain) for m in found.extensions), _own_path(stub, model, ctx, python, target),
                   optional)


def _own_path(stub: StubProcess, model: Model, ctx: Context, python: python_modules.Interpreter,
              target: LinkerTarget) -> tuple[str, ...]:
    """The stub's sys.path entries that are the model's or its environment's, where they are on this machine (what a
    probe puts before its own interpreter's path: never the container's standard library)."""
    own = tuple(d.rstrip("/") + "/" for d in (ctx.container_path(model.path),
                                               *([stub.environment.directory] if stub.environment else [])))
    hosts = (target.host_path(entry) for entry in python.sys_path if (entry + "/").startswith(own))
    return tuple(dict.fromkeys(h for h in hosts if h is not None and os.path.isdir(h)))


def _libpython(stub: StubProcess, target: LinkerTarget, reader: ElfReader) -> str | None:
    """The libpython3.X.so.1.0 the stub links (its DT_NEEDED)."""
    host = target.host_path(stub.program)
    try:
        needed = reader.read(host).needed if host else ()
    except ElfError:
        return None
    return next((n for n in needed if python_modules.version_of(n)), None)


def _interpreter(stub: StubProcess, model: Model, ctx: Context, target: LinkerTarget, version: str, libpython: str,
                 reader: ElfReader) -> python_modules.Interpreter:
    environ = dict(ctx.container.environment)
    env = stub.environment
    search_path = ":".join([*([f"{env.directory}/bin"] if env else []), environ.get("PATH", DEFAULT_PATH)])
    model_dir = ctx.container_path(model.path)
    appended = ((f"{model_dir}/{model.versions[0]}", model_dir) if model.backend == PYTHON.backend
                else (f"{ctx.container.backend_dir}/{model.backend}",)) + (stub.python_lib,)
    return python_modules.interpreter(version, _builtins(libpython, reader), _machine(libpython, reader),
                                      target.host_path, env.directory if env else None, search_path,
                                      environ.get("PYTHONPATH", ""), ctx.server_cwd, appended)


def _builtins(libpython: str, reader: ElfReader) -> frozenset[str]:
    """The modules compiled into libpython: those whose init function it exports (PyInit_posix; PyMarshal_Init and
    _PyWarnings_Init name theirs after the module), and the two every interpreter makes before any import (CPython's
    Python/pylifecycle.c: pycore_init_builtins, _PySys_Create)."""
    try:
        symbols = reader.read(libpython).symbols
    except ElfError:
        return INTERPRETERS_OWN
    names = (symbols.name(int(i)).decode("ascii", "replace")
             for i in np.nonzero(symbols.exported_mask & symbols.defined_mask)[0])
    found = set(INTERPRETERS_OWN)
    for name in names:
        if name.startswith(INIT):
            found.add(name[len(INIT):])
        elif match := NAMED_INIT.fullmatch(name):
            found.add(("_" if name.startswith("_") else "") + match.group(1).lower())
    return frozenset(found)


def _machine(libpython: str, reader: ElfReader) -> int:
    try:
        return reader.read(libpython).machine_code
    except ElfError:
        return EM_X86_64


def _model_py(stub: StubProcess, model: Model, ctx: Context) -> str:
    """The file the stub imports: the version directory's default_model_filename (model.py), or a Python-based
    backend's model.py."""
    if model.backend == PYTHON.backend:
        return ctx.container_path(model.model_file(PYTHON.model_file or ""))
    return f"{ctx.container.backend_dir}/{model.backend}/{PYTHON.model_file}"
