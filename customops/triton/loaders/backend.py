"""Triton core loading a backend: the library search order, dlopen(RTLD_NOW|RTLD_LOCAL), entry points.

Triton core src/backend_model.cc, src/shared_library.cc and src/backend_manager.cc: the library is
`runtime` or `libtriton_<backend>.so`, searched in <model>/<version>/, <model>/, <backend_dir>/<backend>/
(first existing file wins; a runtime library, its symlinks resolved, must lie in the directory it was found in);
a Python-based backend is <backend_dir>/<backend>/model.py served by libtriton_python.so;
TRITONBACKEND_ModelInstanceExecute is the one required entry point.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

from customops import chroot
from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.frameworks import PYTHON
from customops.triton.loaders import FRAMEWORKS, OP_LIBRARY_BACKENDS
from customops.triton.plan import Context, LoadedBy, LoaderResult, LoadStep, Purpose, Written
from customops.triton.release_rules import rules_for
from customops.triton.repository import Model

PYTHON_BACKEND = PYTHON.backend  # the Python backend: its library also runs the Python-based backends
PYTHON_LIBRARY, MODEL_PY = PYTHON.backend_library, PYTHON.model_file  # libtriton_python.so, model.py

REQUIRED_ENTRY_POINT = "TRITONBACKEND_ModelInstanceExecute"


@dataclass(frozen=True)
class BackendLookup:
    """Where Triton will find a model's backend library. `library` is None when it finds none (`missing`
    says why) or when that cannot be known (`unknown`: only the container's facts are available, and the
    place Triton would look is the container's backend directory). `assumed`: the library lies in the
    backend directory of a facts-only container whose facts say it ships this backend."""

    library: str | None
    searched: tuple[str, ...] = ()
    missing: Finding | None = None
    unknown: bool = False
    assumed: bool = False


def library_for(model: Model, ctx: Context) -> BackendLookup:
    """The backend library Triton will dlopen for this model (a container path) and every path it tries,
    or the finding that says why there is none."""
    backend_dir = ctx.container.backend_dir
    facts = ctx.container.facts
    model_dir = ctx.container_path(model.path)
    version_dir = f"{model_dir}/{model.versions[0]}" if model.versions else None
    libname = model.runtime or f"libtriton_{model.backend}.so"
    dirs = [d for d in (version_dir, model_dir, f"{backend_dir}/{model.backend}") if d]
    searched: list[str] = []
    unseen: list[str] = []  # candidates in a facts-only container's own directories
    if model.runtime != MODEL_PY:
        found = _search(dirs, libname, ctx, searched, unseen)
        if found is not None:  # the core checks where a runtime library really lies, not a default-named one
            escape = _escape(model, ctx, libname, found[0]) if model.runtime else None
            return BackendLookup(None if escape else found[1], tuple(searched), escape)
    python_based = f"{backend_dir}/{model.backend}/{MODEL_PY}"
    python_based_ok = rules_for(ctx.container.facts.triton_version).python_based_backends  # from 23.10 on
    if model.runtime == MODEL_PY or (not model.runtime and python_based_ok and ctx.exists(python_based)):
        return _python_based(model, ctx, dirs, searched)
    if model.runtime:
        predicted = _not_found(libname, model.name, dirs)
    else:
        predicted = (f"unable to find backend library for backend '{model.backend}', try specifying runtime on the "
                     "model configuration.")
    absent = model.backend in facts.absent_backends or (
        bool(facts.backends) and model.backend not in facts.backends and model.backend in FRAMEWORKS)
    if unseen and not absent:
        shipped = model.backend in facts.backends or (not facts.backends and model.backend in FRAMEWORKS)
        if shipped and not model.runtime:
            return BackendLookup(unseen[-1], tuple(searched), assumed=True)
        return BackendLookup(None, tuple(searched), unknown=True)
    emit = backend_not_shipped if absent else backend_not_found
    message = (f"model '{model.name}' needs the {model.backend} backend, which this container does not ship" if absent
               else f"backend library {libname} for model '{model.name}' not found")
    return BackendLookup(None, tuple(searched), emit(model, message + _did_you_mean(model, ctx, absent), predicted,
                                                     tuple(f"searched: {p}" for p in searched)))


@emits(Code.CO201)
def backend_not_found(model: Model, message: str, predicted: str, evidence: tuple[str, ...] = ()) -> Finding:
    """A backend library found in none of the places the core searches, or one whose path escapes the directory
    it was found in."""
    return Finding(Code.CO201, message, model=model.name, file=model.config_path, predicted=predicted,
                   evidence=evidence)


@emits(Code.CO203)
def backend_not_shipped(model: Model, message: str, predicted: str, evidence: tuple[str, ...] = ()) -> Finding:
    """A framework backend the container's release does not ship, and no library stands in for it."""
    return Finding(Code.CO203, message, model=model.name, file=model.config_path, predicted=predicted,
                   evidence=evidence)


def _search(directories: list[str] | tuple[str, ...], libname: str, ctx: Context, searched: list[str],
            unseen: list[str]) -> tuple[str, str] | None:
    """FindBackendLibraryPath: (directory, library) for the first directory where <directory>/<libname> exists
    (access(F_OK): symlinks and `..` resolved as the kernel does), adding each path tried to `searched`."""
    for directory in directories:
        path = f"{directory}/{libname}"
        candidate = os.path.normpath(path)
        searched.append(candidate)
        seen = ctx.visible(path)
        if seen:
            return directory, candidate
        if seen is None:
            unseen.append(candidate)
    return None


def _escape(model: Model, ctx: Context, libname: str, directory: str) -> Finding | None:
    """IsChildPathEscapingParentPath: the library found in `directory`, its symlinks resolved (weakly_canonical),
    must lie under that directory (canonical): `1/lib -> ../lib` or a `..` in runtime leaves it."""
    child, parent = _real(ctx, f"{directory}/{libname}"), _real(ctx, directory)
    if child is None or parent is None or child == parent or child.startswith(parent.rstrip("/") + "/"):
        return None
    message = (f"backend library name '{libname}' escapes backend directory '{directory}', for model "
               f"'{model.name}', check model config runtime field")
    return backend_not_found(model, message, message, (f"resolved: {child}",))


def _real(ctx: Context, path: str) -> str | None:
    """A container path with its symlinks and `..` resolved inside the container, or None (absent or unknown)."""
    target = ctx.container.target
    if target is not None:
        return target.resolve(path)
    found = chroot.resolve(None, tuple(sorted(ctx.mounts, key=lambda m: -len(m[0]))), path)
    return None if found is None else found[0]


def _python_based(model: Model, ctx: Context, dirs: list[str], searched: list[str]) -> BackendLookup:
    """A Python-based backend (runtime "model.py", or <backend_dir>/<backend>/model.py with no library): the Python
    backend's libtriton_python.so in the model's directories, then <backend_dir>/python; with runtime "model.py"
    the backend's model.py must exist too."""
    backend_dir = ctx.container.backend_dir
    directories = (*dirs, f"{backend_dir}/{PYTHON_BACKEND}")
    found = _search(directories, PYTHON_LIBRARY, ctx, searched, [])
    if found is None:
        if ctx.container.target is None:
            return BackendLookup(None, tuple(searched), unknown=True)
        message = _not_found(PYTHON_LIBRARY, model.name, directories)
        return BackendLookup(None, tuple(searched), backend_not_found(model, message, message))
    escape = _escape(model, ctx, PYTHON_LIBRARY, found[0])
    model_py = f"{backend_dir}/{model.backend}/{MODEL_PY}"
    if escape is None and model.runtime == MODEL_PY and ctx.visible(model_py) is False:
        message = (f"unable to find Python backend based backend library 'model.py' for model '{model.name}', "
                   f"searched: '{model_py}'")
        escape = backend_not_found(model, message, message)
    return BackendLookup(None if escape else found[1], tuple(searched), escape)


def _not_found(libname: str, model: str, directories: list[str] | tuple[str, ...]) -> str:
    """The core's message (backend_model.cc ResolveBackendPaths): each directory searched, quoted and followed
    by a space, not the files tried."""
    return (f"unable to find backend library '{libname}' for model '{model}', searched: "
            + "".join(f"'{d}' " for d in directories))


def _did_you_mean(model: Model, ctx: Context, absent: bool) -> str:
    """For a backend name that is close to one the container ships (`onnxruntme`): the likely intended one. A
    backend name Triton knows (one the container lists, a framework backend, the Python backend) is never
    "corrected" into another (`python` is no typo of `pytorch`): the container lacks its directory."""
    if absent or model.runtime:
        return ""
    facts = ctx.container.facts
    if model.backend in {*facts.backends, *FRAMEWORKS, PYTHON_BACKEND}:
        return f" (the container has no {ctx.container.backend_dir}/{model.backend})"
    known = sorted(set(facts.backends) | ({*FRAMEWORKS} - set(facts.absent_backends) if not facts.backends else set()))
    close = difflib.get_close_matches(model.backend or "", known, n=1)
    return f" (did you mean backend '{close[0]}'?)" if close else ""


def for_model(model: Model, ctx: Context, library: str, first: bool) -> LoaderResult:
    """Triton core's part: the backend library is dlopen()ed once per path, its entry points looked up."""
    findings = [operations_ignored(model)] if model.op_libraries and model.backend not in OP_LIBRARY_BACKENDS else []
    steps: tuple[LoadStep, ...] = ()
    if first:
        field = "runtime" if model.runtime else "backend"  # the config field naming it (else its platform)
        written = Written(model.config_path, getattr(model, field), field) if model.config_path else None
        steps = (LoadStep(library, ctx.source(library), LoadedBy.BACKEND, Purpose.BACKEND_LIBRARY, model=model.name,
                          entry_points=(REQUIRED_ENTRY_POINT,), written=written),)
    return LoaderResult(steps=steps, findings=tuple(findings))


@emits(Code.CO105)
def operations_ignored(model: Model) -> Finding:
    """model_operations on a model whose backend never loads op libraries."""
    return Finding(Code.CO105, f"model '{model.name}' lists model_operations, which the {model.backend} backend "
                               "ignores", model=model.name, file=model.config_path,
                   evidence=tuple(f"op_library_filename: {p}" for p in model.op_libraries))
