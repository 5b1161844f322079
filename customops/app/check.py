"""`customops check`: repository + manifest + container -> load plan -> linker model -> findings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from customops import progress
from customops.app import suppressions
from customops.elf.cache import ElfReader
from customops.findings import Finding
from customops.linker.simulate import Dlopen, Environment, Linker, Prediction, Scenario
from customops.probe.groups import ProbeSettings
from customops.triton import mounts
from customops.triton.container import Container
from customops.triton.loaders import backend, host, onnxruntime, pytorch, tensorflow, tensorrt
from customops.triton.manifest import Manifest
from customops.triton.plan import Context, LoaderResult, LoadPlan, LoadStep, merge
from customops.triton.repository import Model, read_repository

FRAMEWORK_LOADERS = {"tensorflow": tensorflow, "onnxruntime": onnxruntime, "pytorch": pytorch, "tensorrt": tensorrt}
STAND_IN_HOSTS = ("/usr/bin/true", "/bin/true", "/bin/sh")


@dataclass
class CheckResult:
    models: list[Model]
    plan: LoadPlan
    prediction: Prediction | None
    findings: list[Finding]
    suppressed: list[Finding]
    container: Container
    notes: list[str] = field(default_factory=list)
    step_outcomes: list[tuple[LoadStep, object]] = field(default_factory=list)
    manifest: str | None = None  # the customops.toml used (absolute), if any
    profile: str | None = None  # the container profile checked against (absolute), if any


def dependencies(result: CheckResult) -> list[str]:
    """The container files and directories a check's answer depends on, for caching it: every object
    loaded, the system, backend and /etc directories, and every directory a failed search looked in (a
    directory's mtime changes when a file is added to or removed from it)."""
    if result.prediction is None:
        return []
    target = result.container.target
    paths = {o.path for o in result.prediction.objects}
    if target is not None:
        searched = {os.path.dirname(a.path) for o in result.prediction.outcomes for s in o.searches
                    for a in s.attempts if a.result != "found"}
        for directory in (*target.system_dirs, result.container.backend_dir, "/etc", *searched):
            host = target.host_path(directory) if directory else None
            if host and os.path.isdir(host):
                paths.add(host)
                if directory == result.container.backend_dir:
                    paths.update(os.path.join(host, d) for d in os.listdir(host))
    return sorted(paths)


def run_check(repositories: list[str], manifest: Manifest, container: Container, mounts: tuple[tuple[str, str], ...],
              config_name: str | None = None, only_models: set[str] | None = None,
              reader: ElfReader | None = None, extra_preload: str | None = None,
              server_plugins: tuple[str, ...] = (), probe: ProbeSettings | None = None) -> CheckResult:
    """`probe`: also load the op libraries with the real frameworks, in isolated child processes."""
    reader = reader or ElfReader()
    if container.target is not None:  # the repository is visible inside the container where it is mounted
        container = replace(container, target=container.target.with_mounts(mounts))
    progress.stage("reading the model repositories")
    models = [m for repo in repositories for m in read_repository(repo, config_name, only_models)]
    ctx = Context(container, manifest, mounts, server_plugins=server_plugins,
                  checkouts=tuple(os.path.abspath(r) for r in repositories))
    plan, findings, unchecked = build_plan(models, ctx)
    notes: list[str] = [f"mounted {host} at {container_dir}" for container_dir, host in mounts] + unchecked
    prediction = None
    step_outcomes: list[tuple[LoadStep, object]] = []
    if container.target is not None:
        target = container.target
        executable = container.server
        if executable is None:
            executable = next((h for h in STAND_IN_HOSTS if target.host_path(h)), None)
            notes.append(f"no {'/opt/tritonserver/bin/tritonserver'} in the target: the global scope is modelled with "
                         f"{executable} as the host program")
        if executable is not None:
            progress.stage("modelling the server's loads")
            scenario = scenario_for(plan, executable, ctx, extra_preload)
            prediction = Linker(target, reader).run(scenario)
            step_outcomes = pair_outcomes(plan, prediction)
            from customops.rules import run_rules

            findings += run_rules(plan, prediction, step_outcomes, ctx, reader, models)
        notes += [f"assumed: {a}" for a in target.assumptions]
    else:
        notes += [f"not checked: {m}" for m in container.facts.missing]
        from customops.rules import run_fact_rules

        findings += run_fact_rules(plan, ctx, reader, models)
    if probe is not None:
        from customops.probe.groups import containment_notes, probe_plan, tensorflow_registry
        from customops.rules import probed

        tensorflow = tensorflow_registry(plan, probe) if any(m.backend == "tensorflow" for m in models) else None
        groups = probe_plan(plan, probe)
        findings, probe_notes = probed.check(groups, findings, ctx, models, tensorflow)
        notes += probe_notes + containment_notes(groups)
    findings = _located_in_checkout(findings, models, repositories)
    could = suppressions.producible(limited=only_models is not None, predicted=prediction is not None,
                                    source=container.facts.source, probed=probe is not None)
    kept, dropped = suppressions.apply(findings, manifest, models, could)
    return CheckResult(models, plan, prediction, kept, dropped, container, notes, step_outcomes)


def _located_in_checkout(findings: list[Finding], models: list[Model], repositories: list[str]) -> list[Finding]:
    """A finding about a file outside the repositories (in the container) points at the config.pbtxt of its
    model, so that code-scanning annotations land in the repository; the library keeps its container path."""
    roots = tuple(os.path.abspath(r).rstrip("/") + "/" for r in repositories)
    configs = {m.name: m.config_path for m in models}
    located = []
    for f in findings:
        if f.file and not os.path.abspath(f.file).startswith(roots) and configs.get(f.model or ""):
            f = replace(f, file=configs[f.model or ""], line=None, column=None)
        located.append(f)
    return located


def build_plan(models: list[Model], ctx: Context) -> tuple[LoadPlan, list[Finding], list[str]]:
    """The plan, the findings made while building it, and notes on what a facts-only container leaves
    unchecked (its backend directory cannot be looked into)."""
    findings: list[Finding] = []
    assumed: dict[str, list[str]] = {}
    unknown: list[str] = []
    for model in models:
        for problem in model.problems:
            findings.append(Finding(problem.code, problem.message, model=model.name, file=model.config_path,
                                    line=problem.line, column=problem.column, predicted=problem.predicted or None,
                                    hint=problem.hint))
    results: list[LoaderResult] = [host.process(ctx), tensorflow.process(ctx), pytorch.process(ctx),
                                   tensorrt.process(ctx)]
    loaded_libraries: set[str] = set()
    for model in models:
        if not model.loadable or not model.backend:
            continue
        lookup = backend.library_for(model, ctx)
        if lookup.missing is not None:
            findings.append(lookup.missing)
        if lookup.unknown:
            unknown.append(model.name)
        if lookup.library is None:
            continue
        library = lookup.library
        if lookup.assumed:
            assumed.setdefault(model.backend, []).append(model.name)
        first = library not in loaded_libraries
        loaded_libraries.add(library)
        results.append(backend.for_model(model, ctx, library, first and not lookup.assumed))  # assumed: no file
        loader = FRAMEWORK_LOADERS.get(model.backend)
        if loader is not None:
            results.append(loader.for_model(model, ctx, library, first))
    plan = merge(results)
    backend_dir = ctx.container.backend_dir  # type: ignore[attr-defined]
    notes = [f"assumed: the container ships the {name} backend in {backend_dir}/{name} (from the container's "
             f"facts; its libraries are not checked), for {', '.join(sorted(names))}"
             for name, names in sorted(assumed.items())]
    if unknown:
        notes.append(f"not checked: the backend library of {', '.join(sorted(unknown))}: it is not in the model "
                     f"directory and the container's {backend_dir} cannot be looked into (use --container-root or a "
                     "profile with the container's libraries)")
    return plan, findings + list(plan.findings), notes


def scenario_for(plan: LoadPlan, executable: str, ctx: Context, extra_preload: str | None = None) -> Scenario:
    """The server process: LD_PRELOAD and LD_LIBRARY_PATH as launch sets them, then the dlopen steps."""
    preload = ":".join(p for p in (extra_preload, plan.ld_preload) if p) or None
    library_path = ":".join(plan.library_path) or None
    env = Environment(library_path=library_path, preload=preload, cwd=ctx.server_cwd)
    steps = tuple(Dlopen(s.path, lazy=s.lazy, calls=s.entry_points, caller=s.caller,
                         label=f"{s.model or ''}:{s.purpose}") for s in plan.dlopens)
    return Scenario(executable, env, steps)


def pair_outcomes(plan: LoadPlan, prediction: Prediction) -> list[tuple[LoadStep, object]]:
    """Each plan step with the model's outcome for it (preloads first, then dlopens, in order)."""
    pairs: list[tuple[LoadStep, object]] = []
    preload_outcomes = [o for o in prediction.outcomes if o.kind == "preload"]
    dlopen_outcomes = [o for o in prediction.outcomes if o.kind == "dlopen"]
    for step, outcome in zip(plan.preloads, preload_outcomes, strict=False):
        pairs.append((step, outcome))
    for step, outcome in zip(plan.dlopens, dlopen_outcomes, strict=False):
        pairs.append((step, outcome))
    return pairs


def default_mounts(repositories: list[str], container: Container, explicit: tuple[tuple[str, str], ...] = (),
                   container_repository: str | None = None) -> tuple[tuple[str, str], ...]:
    """customops.triton.mounts.default_mounts for this container: a repository from outside it is mounted where
    tritonserver is told to find it (--model-repository in the profile's recorded arguments), else at
    /models, as `docker run -v REPO:/models` would."""
    recorded = [a.split("=", 1)[1] for a in container.server_args if a.startswith(("--model-repository=",
                                                                                   "--model-store="))]
    target = container.target
    root = None if target is None else "/" if target.is_live else target.root
    return mounts.default_mounts(repositories, root, explicit,
                                 container_repository or (recorded[0] if recorded else mounts.DEFAULT_REPOSITORY))
