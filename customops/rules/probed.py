"""Findings from `check --probe`: what the real frameworks did with the plan's op libraries.

- CO406: a library that loads alone fails when loaded after the others of its group (a second
  TORCH_LIBRARY aborts, ONNX Runtime refuses the session), or registers op names that another library of
  its group registered first (TensorFlow keeps the first and silently drops the rest).
- CO408: a model uses ops that its probed libraries do not register (an ONNX model's domain:op, a
  TorchScript model's ns::op in a namespace the libraries do define, a SavedModel's or GraphDef's op type
  that TensorFlow does not know once the op libraries are loaded).
- CO409: a library fails to load with the real framework even alone; an error only when that framework is
  the container's version: with another one (CO507) the failure is shown as information, evidence that
  the container's own framework may or may not reproduce, unless the container's own libtorch (loaded
  without Python, for the libraries that failed) fails too.
- CO507: the framework that probed is not the container's version (both versions named, and the libraries
  that failed to load with it).
A static finding that a probe confirms is kept, with the probe's observation added to its evidence.
"""

from __future__ import annotations

import os
from typing import Any

from customops.codes import Code, Severity
from customops.emitters import emits
from customops.findings import Finding, amended
from customops.frameworks import ONNXRUNTIME, PYTORCH, TENSORFLOW, TENSORRT, probed_as
from customops.probe.groups import ProbedGroup, TensorflowRegistry
from customops.probe.results import FAILURES, ProbeStatus
from customops.rules import probed_tensorrt
from customops.rules.context import Probes, RuleContext
from customops.rules.registrations import duplicate_registration
from customops.rules.unregistered_ops import unregistered_ops
from customops.triton.plan import Context, LoadStep

NEEDS_PREDICTION = False


def check(ctx: RuleContext) -> list[Finding]:
    """What the probes observed (ctx.probes), as findings; merge() folds them into the static ones."""
    probes = ctx.probes
    if probes is None:
        return []
    observed: list[Finding] = []
    if isinstance(probes.tensorflow, TensorflowRegistry):
        observed += _unregistered_tensorflow(probes.tensorflow, ctx.models, probes)
    frameworks = [g for g in probes.groups if g.framework != TENSORRT.probe]  # TensorRT: a stand-in, not a framework
    for group in probes.groups:
        if group.unavailable:
            continue
        if group.framework == TENSORRT.probe:
            observed += probed_tensorrt.check(group)
        else:
            observed += _failures(group, ctx.triton) + _shadowed(group)
    return observed + other_versions(frameworks, ctx.triton) + _unregistered(frameworks, ctx.models, probes)


def notes(probes: Probes, container_glibc: str | None) -> list[str]:
    """What was probed, and what could not be; where the probes' glibc (this machine's) is not the container's."""
    found: list[str] = []
    if isinstance(probes.tensorflow, str):
        found.append(f"not probed: {probes.tensorflow}")
    elif probes.tensorflow is not None:
        found.append(f"probed TensorFlow's op registry with tensorflow {probes.tensorflow.version}")
    for group in probes.groups:
        if why := group.unavailable:
            found.append(f"not probed: {why}")
            continue
        if group.framework == TENSORRT.probe:
            how = "TensorRT's other entry points are stubs" if group.version.startswith("TensorRT's own") else \
                "a recording registry; TensorRT itself is not loaded"
            found.append(f"probed {len(group.steps)} TensorRT plugin librar{'y' if len(group.steps) == 1 else 'ies'} "
                         f"against {group.version or 'customops stand-in for libnvinfer'} ({how})")
            found += probed_tensorrt.notes(group)
            continue
        where = f" for model '{group.model}'" if group.model else ""
        found.append(f"probed {len(group.steps)} {group.framework} op librar{'y' if len(group.steps) == 1 else 'ies'}"
                     f"{where} with {group.framework} {group.version}"
                     + (f" ({group.runtime})" if group.runtime and group.framework == TENSORFLOW.probe else "")
                     + (f" ({group.passed_over})" if group.passed_over else ""))
        if own := next((r for r in group.container if r.status is not ProbeStatus.UNAVAILABLE), None):
            found.append(f"probed the same {group.framework} op librar{'y' if len(group.steps) == 1 else 'ies'} each "
                         f"with the container's own {group.framework} {own.framework_version} (its library, without "
                         "Python): its verdict on loading is the container's")
        if handed := sum(os.path.abspath(s.host_path) not in group.searched_here for s in group.steps):
            found.append(f"the {group.framework} probes loaded what {handed} of its librar"
                         f"{'y' if handed == 1 else 'ies'} need from the container's files, as its loader finds them")
    glibc = {g.glibc for g in probes.groups if not g.unavailable and g.framework != TENSORRT.probe}
    theirs = (container_glibc or "").removeprefix("GLIBC_")
    if glibc and glibc != {theirs}:
        found.append(f"the probes ran on this machine's glibc {', '.join(sorted(glibc)) or '(unknown)'}, the container "
                     f"has {f'glibc {theirs}' if theirs else 'a glibc of unknown version'}: a load failure they see is "
                     "evidence for the container, not a verdict")
    return found


def _label(group: ProbedGroup) -> str:
    return f"{group.framework} {group.version}".strip()


def _backend(group: ProbedGroup) -> str:
    """The Triton backend of the group's framework, which the container's facts name its version by."""
    framework = probed_as(group.framework)
    return framework.backend if framework else group.framework


def _other_version(group: ProbedGroup, ctx: Context) -> str | None:
    """The container's version of the group's framework when the probe's framework is another one (CO507)."""
    expected = ctx.container.facts.version_of(_backend(group))
    probed = group.version.split("+")[0]
    if not expected or not probed or probed.split(".")[:len(expected.split("."))] == expected.split("."):
        return None
    return str(expected)


def differences(group: ProbedGroup, ctx: Context, step: LoadStep) -> tuple[str, ...]:
    """How the process that probed `step` was not the container's, besides the framework's version: then what it
    saw is evidence for the container, not a verdict (issue #38 §5)."""
    found = []
    fact = ctx.container.facts.glibc or ""
    theirs = fact.removeprefix("GLIBC_")
    if not group.glibc or group.glibc != theirs:
        found.append(f"the probe ran on this machine's glibc {group.glibc or '(its version unknown)'}, the container "
                     f"has {f'glibc {theirs}' if theirs else 'a glibc of unknown version'}")
    if os.path.abspath(step.host_path) in group.searched_here:
        found.append(f"the probe looked {step.path}'s dependencies up on this machine: the static model does not load "
                     "it in the container")
    return tuple(found)


def _failures(group: ProbedGroup, ctx: Context) -> list[Finding]:
    """CO409 for each library that fails alone: with the container's own framework library (Torch: its libtorch,
    loaded without Python) where that probed it, an error unless the probe's process differed from the container's
    (differences()); with the probe interpreter's framework otherwise, information when that is another version
    than the container's (`other`) or the process differed. CO406 for one that fails only after the others."""
    found = []
    other = _other_version(group, ctx)
    members = group.members()
    for index, (step, alone, together) in enumerate(members):
        differs = differences(group, ctx, step)
        evidence_only = tuple(f"{d}: this failure is evidence for the container, not a verdict" for d in differs)
        own = group.in_container(step.host_path)
        if own is not None and own.status in FAILURES:  # the container's own framework library: the verdict
            label = f"the container's {group.framework} {own.framework_version or other or group.version}".strip()
            found.append(fails_to_load(
                f"{step.path} fails to load with {label}: {own.message}", model=step.model,
                severity=Severity.INFO if differs else None,
                library=step.path, file=step.host_path, predicted=own.message,
                evidence=(f"probe ({label}, its libtorch without Python): {own.status.value} when loaded "
                          f"alone: {own.message}",
                          f"probe ({_label(group)}): {alone.status.value} when loaded alone"
                          + (f": {alone.message}" if alone.message else ""), *evidence_only)))
            continue
        if alone.status in FAILURES:
            version = (f"{group.framework} {group.version} is not the container's {other}: this failure is evidence "
                       "for the container's framework, not a verdict",) if other else ()
            theirs = f"the container's {group.framework} {own.framework_version or other or ''}".strip() if own else ""
            loads = (f"probe ({theirs}, without Python): {own.status.value} when loaded alone",) if own else ()
            found.append(fails_to_load(
                f"{step.path} fails to load with {_label(group)}"
                f"{f' (the container ships {other})' if other else ''}: {alone.message}",
                severity=Severity.INFO if other or differs or own is not None else None, model=step.model,
                library=step.path, file=step.host_path, predicted=alone.message,
                evidence=(f"probe ({_label(group)}): {alone.status.value} when loaded alone: {alone.message}",
                          *version, *loads, *evidence_only)))
        elif together.status in FAILURES:
            earlier = group.steps[:index]
            shared = sorted({name for _, r, _ in members[:index] for name in r.registered} & set(alone.registered))
            session = f"one session of model '{group.model}'" if group.model else "one process"
            found.append(duplicate_registration(
                f"{step.path} loads alone but fails after {', '.join(s.path for s in earlier)} in {session}: "
                         f"{together.message}", model=step.model, library=step.path, file=step.host_path,
                symbol=shared[0] if shared else None, predicted=together.message,
                evidence=(f"probe ({_label(group)}): {together.status.value} when loaded after "
                          f"{', '.join(s.path for s in earlier)} ({together.message}); loads alone",
                          *([f"registered by both: {', '.join(shared[:10])}" + (" ..." if len(shared) > 10 else "")]
                            if shared else []))))
    return found


def _shadowed(group: ProbedGroup) -> list[Finding]:
    """TensorFlow: a library's ops that an earlier library registered are silently dropped, the first wins."""
    if group.framework != TENSORFLOW.probe:
        return []
    found = []
    members = group.members()
    for index, (step, alone, together) in enumerate(members):
        if index == 0 or together.status is not ProbeStatus.LOADED:
            continue
        dropped = set(alone.registered) - set(together.registered)
        winners = [s for s, r, _ in members[:index] if dropped & set(r.registered)]
        if not dropped or not winners:
            continue
        names = sorted(dropped)
        found.append(duplicate_registration(
            f"{step.path} registers {len(names)} TensorFlow op(s) that {winners[0].path} registered first "
                     f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): TensorFlow silently keeps the "
                     "first library's", model=step.model, library=step.path, file=step.host_path, symbol=names[0],
            evidence=(f"probe ({_label(group)}): alone it registers {', '.join(names[:10])}; loaded after "
                      f"{', '.join(s.path for s in winners)} it registers {len(together.registered)} op(s)",)))
    return found


@emits(Code.CO409)
def fails_to_load(message: str, **fields: Any) -> Finding:
    """A library that fails, crashes or hangs when its framework loads it alone, in a contained child."""
    return Finding(Code.CO409, message, **fields)


@emits(Code.CO507)
def other_versions(groups: list[ProbedGroup], ctx: Context) -> list[Finding]:
    """Once per framework whose probes ran with another version than the container's: both versions, the
    library that probed, and the libraries that failed to load with it (CO409, shown as information)."""
    found, seen = [], set()
    for group in groups:
        expected = _other_version(group, ctx)
        if expected is None or group.framework in seen or group.unavailable:
            continue
        seen.add(group.framework)
        same = [g for g in groups if g.framework == group.framework and not g.unavailable]
        failed = sorted({s.path for g in same for s, alone, _ in g.members() if alone.status in FAILURES})
        found.append(Finding(
            Code.CO507, f"the probes loaded {group.framework} op libraries with {group.framework} {group.version}; "
                        f"the container ships {expected}: what they register and how they fail may differ",
            version=group.version,
            evidence=(f"container: {_backend(group)} {expected}",
                      f"probed with: {group.framework} {group.version}"
                      + (f" ({group.runtime})" if group.runtime else " (the probe interpreter's package)"),
                      *([group.passed_over] if group.passed_over else []),
                      *([f"failed to load with {group.framework} {group.version} (CO409, information): "
                         + ", ".join(failed)] if failed else []))))
    return found


def _unregistered(groups: list[ProbedGroup], models, probes: Probes) -> list[Finding]:
    found = []
    by_model = {g.model: g for g in groups if g.framework == ONNXRUNTIME.probe and not g.unavailable}
    torch = next((g for g in groups if g.framework == PYTORCH.probe and not g.unavailable), None)
    for model in models:
        if not model.versions:
            continue
        if model.backend == ONNXRUNTIME.backend and (group := by_model.get(model.name)):
            path = model.model_file(ONNXRUNTIME.model_file)
            ops = probes.onnx_ops.get(path)
            if ops is None:
                continue
            used, local = ops
            registered = {name.split(" [")[0] for r in group.alone for name in r.registered}
            missing = sorted(f"{d}:{op}" for d, op in used - local if d not in ("", "ai.onnx")
                             and f"{d}:{op}" not in registered and not _built_in(probes, group.runtime, d))
            if missing:
                found.append(unregistered_ops(
                    f"model '{model.name}' uses {missing[0]}, which neither ONNX Runtime nor its op "
                             "libraries register: creating its session fails", model=model.name, file=path,
                    symbol=missing[0], predicted=f"Fatal error: {missing[0]}(-1) is not a registered function/op",
                    evidence=(f"{path} uses {', '.join(missing)}",
                              f"probe ({_label(group)}): its op libraries register "
                              f"{len(registered)} op(s), not these")))
        elif model.backend == PYTORCH.backend and torch is not None:
            archive = model.model_file(PYTORCH.model_file)
            schemas = {name for r in torch.alone for name in r.registered}
            namespaces = {name.split("::")[0] for name in schemas} - {
                ns for r in torch.alone for ns in r.builtin_namespaces}
            missing = sorted(f"{ns}::{op}" for ns, op in probes.torchscript_calls.get(archive, frozenset())
                             if ns in namespaces and f"{ns}::{op}" not in schemas)
            if missing:
                namespace = missing[0].split("::")[0]
                defined = ", ".join(sorted(s for s in schemas if s.startswith(namespace + "::")))
                found.append(unregistered_ops(
                    f"model '{model.name}' calls {missing[0]}, which the op libraries defining its namespace "
                             "do not register: loading the TorchScript model fails", model=model.name, file=archive,
                    symbol=missing[0], predicted=f"Unknown builtin op: {missing[0]}.",
                    evidence=(f"{archive} calls {', '.join(missing)}",
                              f"probe ({_label(torch)}): {namespace} registers {defined}")))
    return found


def _unregistered_tensorflow(registry: TensorflowRegistry, models, probes: Probes) -> list[Finding]:
    """CO408: a SavedModel or GraphDef uses op types TensorFlow does not know, even with the plan's op
    libraries loaded: loading the model fails."""
    found = []
    for model in models:
        if model.backend != TENSORFLOW.backend or not model.versions:
            continue
        path = model.model_file(TENSORFLOW.file_for(model.platform))
        ops = probes.tensorflow_ops.get(path)
        if ops is None:
            continue  # absent or unreadable: the backend's own error, reported elsewhere
        missing = sorted(ops - registry.ops)
        if missing:
            loaded = ", ".join(registry.libraries) or "no TensorFlow op libraries"
            found.append(unregistered_ops(
                f"model '{model.name}' uses the TensorFlow op {missing[0]}, which neither TensorFlow nor "
                         "the loaded op libraries register: loading the model fails", model=model.name, file=path,
                symbol=missing[0], predicted=f"Op type not registered '{missing[0]}' in binary running on",
                evidence=(f"{path} uses {', '.join(missing)}",
                          f"probe (tensorflow {registry.version}): not registered after loading {loaded}")))
    return found


def _built_in(probes: Probes, runtime: str | None, domain: str) -> bool:
    """Whether the ONNX Runtime library that probed names the domain (com.microsoft, ai.onnx.ml, ...)."""
    return runtime is not None and domain in probes.built_in.get(runtime, frozenset())


def merge(findings: list[Finding], observed: list[Finding]) -> list[Finding]:
    """A probe's finding that a static one already predicted (the same code for the library, or for CO409
    any error about it: the static check names the cause) becomes evidence on the static one."""
    merged = list(findings)
    for new in observed:
        same = next((i for i, f in enumerate(merged) if f.library == new.library and f.library is not None
                     and (f.code == new.code or (new.code == Code.CO409 and f.level == Severity.ERROR))), None)
        if same is None:
            merged.append(new)
        else:
            merged[same] = amended(merged[same], evidence=(*merged[same].evidence, *new.evidence))
    return merged
