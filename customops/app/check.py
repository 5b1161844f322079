"""`customops check`: repository + manifest + container -> load plan -> linker model -> findings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from customops import progress
from customops.app import suppressions
from customops.app.as_if_fixed import ModelledRun, modelled_runs
from customops.app.inherited import NOTHING_INHERITED, Inherited
from customops.app.planning import build_plan
from customops.app.stubs import run_stubs, unmodelled_stubs
from customops.app.text_locations import with_text_locations
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.findings import Finding, amended
from customops.frameworks import TENSORFLOW
from customops.linker.prediction import Prediction
from customops.linker.types import AttemptResult, StepOutcome
from customops.probe.groups import ProbedGroup, ProbeSettings
from customops.rules import context as rule_context
from customops.rules import run as run_rules
from customops.rules import versions
from customops.rules.context import RuleContext
from customops.rules.versions import Undecided
from customops.triton import model_set, mounts
from customops.triton.container import SERVER, SERVER_CWD, STAND_IN_HOSTS, Container, FactsFrom
from customops.triton.manifest import Manifest
from customops.triton.plan import Context, LoadPlan, LoadStep
from customops.triton.python_stub import StubRun
from customops.triton.release_rules import rules_for
from customops.triton.repository import Model, read_repository


@dataclass
class CheckResult:
    models: list[Model]
    plan: LoadPlan
    prediction: Prediction | None
    findings: list[Finding]
    suppressed: list[Finding]
    container: Container
    notes: list[str] = field(default_factory=list)
    step_outcomes: list[tuple[LoadStep, StepOutcome]] = field(default_factory=list)
    manifest: str | None = None  # the customops.toml used (absolute), if any
    profile: str | None = None  # the container profile checked against (absolute), if any
    probes: tuple[ProbedGroup, ...] = ()  # what --probe loaded, group by group (the JSON report lists it)
    undecided: tuple[Undecided, ...] = ()  # without the container's libraries: what its facts cannot decide
    stubs: tuple[StubRun, ...] = ()  # the Python backend's stub processes, as the linker model ran them

    @property
    def loading_checked(self) -> bool:
        """Whether the server's loads were modelled: without (a release's facts, a root with no program to
        model the server with) only the configs were checked, and every report says so."""
        return self.prediction is not None


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
                    for a in s.attempts if a.result is not AttemptResult.FOUND}
        for directory in (*target.system_dirs, result.container.backend_dir, "/etc", *searched):
            host = target.host_path(directory) if directory else None
            if host and os.path.isdir(host):
                paths.add(host)
                if directory == result.container.backend_dir:
                    paths.update(os.path.join(host, d) for d in os.listdir(host))
    return sorted(paths)


def run_check(repositories: list[str], manifest: Manifest, container: Container, mounts: tuple[tuple[str, str], ...],
              config_name: str | None = None, only_models: set[str] | None = None,
              reader: ElfReader | None = None, inherited: Inherited = NOTHING_INHERITED,
              server_plugins: tuple[str, ...] = (), probe: ProbeSettings | None = None,
              auto_complete: bool = True, model_namespacing: bool = False,
              cache_dir: str | None = None) -> CheckResult:
    """`probe`: also load the op libraries with the real frameworks, in isolated child processes;
    `auto_complete` and `model_namespacing`: tritonserver's --disable-auto-complete-config (False) and
    --model-namespacing; `cache_dir`: where execution environments are unpacked (None: --no-cache)."""
    reader = reader or ElfReader()
    if container.target is not None:  # the repository is visible inside the container where it is mounted
        container = replace(container, target=container.target.with_mounts(mounts))
    progress.stage("reading the model repositories")
    release = rules_for(container.facts.triton_version)  # the repository rules of the container's release
    models = [m for repo in repositories for m in read_repository(repo, config_name, None, auto_complete, release)]
    asked, every_name = only_models, [m.name for m in models]
    if only_models is not None:  # explicit mode: what --load-model names, and the models its ensembles step through
        loaded = model_set.loaded_with(models, only_models)
        models = [m for m in models if m.name in loaded]
    ctx = Context(container, manifest, mounts, server_cwd=container.working_directory or SERVER_CWD,
                  server_plugins=server_plugins, checkouts=tuple(os.path.abspath(r) for r in repositories),
                  cache_dir=cache_dir, auto_complete=auto_complete)
    plan, findings, unchecked = build_plan(models, ctx)
    notes: list[str] = [f"mounted {host} at {container_dir}" for container_dir, host in mounts] + unchecked
    prediction = None
    step_outcomes: list[tuple[LoadStep, StepOutcome]] = []
    rules = None  # what the rules read, built once (its file facts are read here)
    undecided: tuple[Undecided, ...] = ()
    stub_runs: tuple[StubRun, ...] = ()
    if container.target is not None:
        target = container.target
        executable = _server_program(container, notes)
        if executable is not None:
            progress.stage("modelling the server's loads")
            runs = modelled_runs(plan, executable, ctx, target, reader, inherited)
            prediction, step_outcomes = runs[0].prediction, runs[0].outcomes
            stub_runs, unstarted, stub_notes = run_stubs(models, plan, ctx, target, reader, inherited)
            findings, notes = findings + unstarted, notes + stub_notes
            rules = replace(rule_context.build(plan, ctx, reader, models, prediction, step_outcomes), stubs=stub_runs)
            findings += _every_problem(rules, runs)
            notes += [f"assumed: {a}" for a in target.assumptions]  # of the linker's model
    else:
        rules = rule_context.build(plan, ctx, reader, models)
        findings += run_rules(rules)
        undecided = _from_facts_only(rules, notes)
    probed_groups: tuple[ProbedGroup, ...] = ()
    if probe is not None:
        base = rules or rule_context.build(plan, ctx, reader, models, prediction, step_outcomes)
        findings, probed_groups = _probed(base, probe, findings, notes)
    findings += _served_together(models, findings, asked, model_namespacing, every_name)
    findings = with_text_locations(_located_in_checkout(findings, models, repositories), models, manifest.path,
                                   (*plan.preloads, *plan.dlopens))
    could = suppressions.producible(limited=only_models is not None, predicted=prediction is not None,
                                    own_files=container.facts.known_from is FactsFrom.ROOT,
                                    probed=probe is not None)
    kept, dropped = suppressions.apply(findings, manifest, models, could)
    return CheckResult(models, plan, prediction, kept, dropped, container, notes, step_outcomes,
                       probes=probed_groups, undecided=undecided, stubs=stub_runs)


def _server_program(container: Container, notes: list[str]) -> str | None:
    """The program the server's loads are modelled with: tritonserver, else a stand-in host program (said in
    `notes`), else None (also said)."""
    target = container.target
    if container.server is not None or target is None:
        return container.server
    executable = next((h for h in STAND_IN_HOSTS if target.host_path(h)), None)
    notes.append(f"no {SERVER} in the target: the global scope is modelled with {executable} as the host "
                 "program" if executable else f"not checked: loading and symbol resolution (the target has "
                 f"no {SERVER} and no program to stand in for it: {', '.join(STAND_IN_HOSTS)}), so the "
                 "server's loads are not modelled")
    return executable


def _from_facts_only(rules: RuleContext, notes: list[str]) -> tuple[Undecided, ...]:
    """Without the container's libraries: what its facts cannot decide, said in `notes` with what is not checked."""
    undecided = tuple(versions.undecided(rules))
    notes += [f"not checked: {m}" for m in rules.triton.container.facts.missing]
    notes += [f"not checked: {u.library} needs {u.needed}, and the container's {u.unknown} is not known"
              for u in undecided]
    return undecided + unmodelled_stubs(rules.plan, rules.triton)  # their notes come from planning


def _probed(rules: RuleContext, probe: ProbeSettings, findings: list[Finding],
            notes: list[str]) -> tuple[list[Finding], tuple[ProbedGroup, ...]]:
    """--probe: the plan's libraries loaded by the real frameworks (isolated), what they observed folded into
    the findings and said in `notes` (extended here); the groups probed."""
    from customops.probe.groups import containment_notes, framework_libraries, probe_plan, tensorflow_registry
    from customops.probe.needs import container_needs
    from customops.probe.stub_imports import stub_group
    from customops.rules import probed

    plan = rules.plan
    tensorflow_models = any(m.backend == TENSORFLOW.backend for m in rules.models)
    tensorflow = tensorflow_registry(plan, probe) if tensorflow_models else None
    needs = container_needs(rules.prediction, (*(s.host_path for s in (*plan.preloads, *plan.dlopens)),
                                               *framework_libraries(plan)))
    groups = (*probe_plan(plan, probe, needs), *(stub_group(run, probe) for run in rules.stubs if run.outcomes))
    probes = rule_context.probed(groups, tensorflow, rules.models)
    notes += probed.notes(probes, rules.triton.container.facts.glibc) + containment_notes(list(groups))
    return probed.merge(findings, probed.check(replace(rules, probes=probes))), groups


def _every_problem(rules: RuleContext, runs: list[ModelledRun]) -> list[Finding]:
    """The findings of the server as it is, then those that only a run modelled as if what stops the server
    were fixed can see (not those about the libraries it leaves out), each marked with that assumption."""
    findings = run_rules(rules)
    seen = {_identity(f) for f in findings}
    for run in runs[1:]:
        for f in run_rules(rule_context.with_prediction(rules, run.prediction, run.outcomes)):
            if _identity(f) not in seen and f.library not in run.left_out:
                seen.add(_identity(f))
                findings.append(amended(f, assumes=run.assumes))
    return findings


def _served_together(models: list[Model], findings: list[Finding], asked: set[str] | None,
                     namespacing: bool, every_name: list[str]) -> list[Finding]:
    """CO108-CO110: models asked for that no repository has, names in several repositories, and ensembles whose
    step models fail (known only once every model's own findings are); `every_name`: the repositories' models,
    explicit mode's unchecked ones too (a misspelt step's did-you-mean)."""
    failing: dict[str, str] = {}
    for f in findings:
        if f.model and f.level >= Severity.ERROR and f.code[:3] in ("CO1", "CO2", "CO3"):
            failing.setdefault(f.model, f.message)
    missing = model_set.not_in_any_repository(asked, models, every_name) if asked is not None else []
    duplicated = model_set.not_unique(models, namespacing)
    failing.update({f.model: f.message for f in duplicated if f.model})
    return missing + duplicated + model_set.ensemble_findings(models, failing, every_name)


def _identity(f: Finding) -> tuple:
    return (f.code, f.model, f.library, f.symbol, f.message)


def _located_in_checkout(findings: list[Finding], models: list[Model], repositories: list[str]) -> list[Finding]:
    """A finding about a file outside the repositories (in the container) points at the config.pbtxt of its
    model, so that code-scanning annotations land in the repository; the library keeps its container path."""
    roots = tuple(os.path.abspath(r).rstrip("/") + "/" for r in repositories)
    configs = {m.name: m.config_path for m in models}
    located = []
    for f in findings:
        if f.file and not os.path.abspath(f.file).startswith(roots) and configs.get(f.model or ""):
            f = amended(f, file=configs[f.model or ""], line=None, column=None)
        located.append(f)
    return located


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
