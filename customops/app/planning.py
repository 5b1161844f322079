"""The load plan of one server process for a set of models: what each loader adds (customops.triton.loaders),
merged in the server's order, with the findings made while building it."""

from __future__ import annotations

import os
from dataclasses import replace

from customops.findings import Finding, amended
from customops.memo import once
from customops.triton import loaders
from customops.triton.container import Container
from customops.triton.loaders import backend
from customops.triton.plan import Context, LoaderResult, LoadPlan, merge
from customops.triton.release_rules import rules_for
from customops.triton.repository import Model


def build_plan(models: list[Model], ctx: Context) -> tuple[LoadPlan, list[Finding], list[str]]:
    """The plan, the findings made while building it, and notes on what a facts-only container leaves
    unchecked (its backend directory cannot be looked into). Within read_once (the upgrade matrix) it is built
    once for the releases whose facts agree in what planning reads of them (`planned_from`)."""
    key = ("plan", tuple(map(id, models)), ctx.manifest, ctx.mounts, ctx.server_cwd, ctx.server_plugins,
           ctx.checkouts, planned_from(ctx.container))
    plan, findings, notes = once(key, lambda: _build_plan(models, ctx))
    return plan, list(findings), list(notes)


def planned_from(container: Container) -> tuple:
    """All that planning reads of the container: where it lies and what its backend directory holds, and of
    its facts the backends it ships and its release's repository rules (the Python-based backends). A loader that
    reads another fact adds it here; tests/test_upgrade_matrix.py holds every release's column of a matrix to
    that release checked alone."""
    facts = container.facts
    return (id(container.target), container.backend_dir, container.server, container.server_args,
            container.environment, container.working_directory, facts.backends, facts.absent_backends,
            rules_for(facts.triton_version))


def _build_plan(models: list[Model], ctx: Context) -> tuple[LoadPlan, tuple[Finding, ...], tuple[str, ...]]:
    findings = [amended(problem, predicted=_as_served(problem.predicted, model, ctx))
                for model in models for problem in model.problems]
    results: list[LoaderResult] = loaders.process_wide(ctx)
    assumed: dict[str, list[str]] = {}
    unknown: list[tuple[str, str]] = []
    stubs: list[tuple[str, str]] = []  # the models served by the Python backend, each run by a stub of its own
    loaded_libraries: set[str] = set()
    for model in models:
        if not model.loadable or not model.backend:
            continue
        lookup = backend.library_for(model, ctx)
        if lookup.missing is not None:
            findings.append(lookup.missing)
        if lookup.unknown:
            unknown.append((model.name, model.backend))
        if lookup.library is None:
            continue
        library = lookup.library
        if os.path.basename(library) == backend.PYTHON_LIBRARY:
            stubs.append((model.name, library))
        if lookup.assumed:
            assumed.setdefault(model.backend, []).append(model.name)
        first = library not in loaded_libraries  # Triton core loads a backend library once per path
        loaded_libraries.add(library)
        results.append(backend.for_model(model, ctx, library, first and not lookup.assumed))  # assumed: no file
        results += loaders.for_model(model, ctx, library, first)
    plan = replace(merge(results), python_models=tuple(stubs), unknown_backends=tuple(unknown))
    unchecked = [name for name, _ in stubs] if ctx.container.target is None else []  # a root's are run (app.stubs)
    return plan, (*findings, *plan.findings), tuple(_unchecked(ctx.container.backend_dir, assumed,
                                                               [name for name, _ in unknown], unchecked))


def _unchecked(backend_dir: str, assumed: dict[str, list[str]], unknown: list[str], stubs: list[str]) -> list[str]:
    """Notes on the backends a facts-only container is assumed to ship, those it cannot say anything of, and the
    Python backend's stub processes, which without the container's files cannot be modelled."""
    notes = [f"assumed: the container ships the {name} backend in {backend_dir}/{name} (from the container's "
             f"facts; its libraries are not checked), for {', '.join(sorted(names))}"
             for name, names in sorted(assumed.items())]
    if unknown:
        notes.append(f"not checked: the backend library of {', '.join(sorted(unknown))}: it is not in the model "
                     f"directory and the container's {backend_dir} cannot be looked into (use --container-root or a "
                     "profile with the container's libraries)")
    if stubs:
        notes.append(f"not checked: the Python backend's stub process of {', '.join(sorted(stubs))} (the stub and its "
                     "libpython, EXECUTION_ENV_PATH, the native modules model.py imports): the container's files are "
                     "needed (--container-root, --image or a profile with its libraries)")
    return notes


def _as_served(predicted: str | None, model: Model, ctx: Context) -> str | None:
    """The core's message about a model's files names them where the server sees them (`failed to read text
    proto from /models/m/config.pbtxt`), not where this machine holds the checkout."""
    if not predicted:
        return None
    return predicted.replace(model.path, ctx.container_path(model.path)) if model.path else predicted
