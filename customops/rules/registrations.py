"""CO406 and CO408: what the op libraries register, against each other and against what the models use.

CO406, two libraries one server process loads register the same thing; what happens is the framework's
own rule:
- Torch: a second TORCH_LIBRARY for a namespace aborts the process inside dlopen (FRAGMENT and IMPL blocks
  are fine): predicted from the `.symtab` namespaces.
- TensorFlow: an op library loaded again from another path (same content) registers nothing: its ops are
  silently dropped.
- ONNX Runtime: the same custom-op library twice for one model (one session) fails at session creation.
- TensorRT: the same plugin library twice: the second's creators are refused ("Could not register plugin
  creator"); the first wins. Creator names cannot be read statically, so only identical libraries are
  detected; the report says so.
CO408, a model calls ops that nothing loaded registers. With --probe, customops.rules.probed reports what
the frameworks observed through duplicate_registration() and unregistered_ops() here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from customops.codes import Severity
from customops.findings import Finding
from customops.rules.context import RuleContext
from customops.triton.plan import LoadStep

CODES = frozenset({"CO406", "CO408"})
NEEDS_PREDICTION = False


def check(ctx: RuleContext) -> list[Finding]:
    steps = list(ctx.custom_steps)
    registrations = {step: ctx.files.registrations.get(step.source, ()) for step in steps}
    return (_torch(steps, registrations) + _copies(steps, registrations, ctx)
            + _unregistered_torch_ops(ctx, registrations) + _unregistered_onnx_domains(ctx))


def duplicate_registration(message: str, **about: Any) -> Finding:
    """CO406 as a probe observed it (customops.rules.probed)."""
    return Finding("CO406", message, **about)


def unregistered_ops(message: str, **about: Any) -> Finding:
    """CO408 as a probe observed it (customops.rules.probed)."""
    return Finding("CO408", message, **about)


def _unregistered_torch_ops(ctx: RuleContext, registrations: dict) -> list[Finding]:
    """CO408: a TorchScript model calls ops of a namespace that neither a loaded op library nor the
    container's own PyTorch libraries register: torch.jit.load fails with "Unknown builtin op"."""
    framework = ctx.files.frameworks.get("pytorch")
    if framework is None:
        return []  # the framework's own libraries are needed to tell built-in namespaces from missing ones
    registered = {r.name for found in registrations.values() for r in found
                  if r.framework == "torch" and r.kind in ("namespace", "fragment")}
    findings = []
    for model in ctx.models:
        if model.backend != "pytorch" or not model.versions:
            continue
        archive = model.model_file("model.pt")
        calls = ctx.files.torchscript_calls.get(archive, frozenset())
        for namespace in sorted({ns for ns, _ in calls} - registered):
            if not framework.has_libraries or f"{namespace}::".encode() in framework.found:
                continue
            first = min(f"{ns}::{op}" for ns, op in calls if ns == namespace)
            findings.append(Finding(
                "CO408", f"model '{model.name}' calls {first} but nothing loaded registers the namespace "
                         f"'{namespace}': loading the TorchScript model fails", model=model.name, file=archive,
                symbol=first, predicted=f"Unknown builtin op: {first}.",
                evidence=(f"{archive} calls " + ", ".join(sorted(f"{ns}::{op}" for ns, op in calls
                                                                   if ns == namespace)),
                          f"no loaded op library defines TORCH_LIBRARY({namespace}) or a fragment of it",
                          f"not found in the container's PyTorch libraries ({framework.directory})")))
    return findings


def _unregistered_onnx_domains(ctx: RuleContext) -> list[Finding]:
    """CO408: an ONNX model uses a domain that ONNX Runtime does not build in (the domain's name does not
    occur as a string in the container's ORT libraries) and that is not a function of the model itself,
    while the model loads no custom-op library: creating the session fails. With op libraries listed, what
    they register is not readable statically (`customops probe`), so nothing is claimed."""
    framework = ctx.files.frameworks.get("onnxruntime")
    if framework is None or not framework.has_libraries:
        return []
    findings = []
    for model in ctx.models:
        if model.backend != "onnxruntime" or not model.versions or model.op_libraries:
            continue
        path = model.model_file("model.onnx")
        ops = ctx.files.onnx_ops.get(path)
        if ops is None:
            continue  # absent or unreadable: ONNX Runtime's to report
        used, local = ops
        custom = sorted((d, op) for d, op in used - local if d not in ("", "ai.onnx"))
        for domain in sorted({d for d, _ in custom}):
            if b"\0" + domain.encode() + b"\0" in framework.found:
                continue  # built into ONNX Runtime (com.microsoft, ai.onnx.ml, ...)
            ops_used = [op for d, op in custom if d == domain]
            findings.append(Finding(
                "CO408", f"model '{model.name}' uses {domain}:{ops_used[0]} but loads no custom-op library and ONNX "
                         f"Runtime does not build in the domain '{domain}': creating its session fails",
                model=model.name, file=path, symbol=f"{domain}:{ops_used[0]}",
                predicted=f"Fatal error: {domain}:{ops_used[0]}(-1) is not a registered function/op",
                evidence=(f"{path} uses " + ", ".join(f"{domain}:{op}" for op in ops_used),
                          "config.pbtxt lists no model_operations op_library_filename",
                          f"'{domain}' does not occur in the container's ONNX Runtime libraries "
                          f"({framework.directory})")))
    return findings


def _torch(steps: list[LoadStep], registrations: dict) -> list[Finding]:
    owners: dict[str, list[LoadStep]] = defaultdict(list)
    for step in steps:
        for r in registrations[step]:
            if r.framework == "torch" and r.kind == "namespace" and step not in owners[r.name]:
                owners[r.name].append(step)
    findings = []
    for namespace, defining in sorted(owners.items()):
        if len({s.path for s in defining}) < 2:
            continue
        first, second = defining[0], defining[1]
        findings.append(Finding(
            "CO406", f"{second.path} defines TORCH_LIBRARY({namespace}) again after {first.path}: loading it aborts "
                     "the server", model=second.model, library=second.path, file=second.source, symbol=namespace,
            predicted=f"Only a single TORCH_LIBRARY can be used to register the namespace {namespace}; please put "
                      "all of your definitions in a single TORCH_LIBRARY block.",
            evidence=(*(f"TORCH_LIBRARY({namespace}) in {s.path}" for s in defining),
                      "use TORCH_LIBRARY_FRAGMENT to add to a namespace defined elsewhere")))
    return findings


def _copies(steps: list[LoadStep], registrations: dict, ctx: RuleContext) -> list[Finding]:
    by_content: dict[tuple[str, str], list[LoadStep]] = defaultdict(list)
    for step in steps:
        digest = ctx.files.digests.get(step.source)
        if digest is not None:
            by_content[(step.loader, digest)].append(step)
    findings = []
    for (loader, _digest), copies in by_content.items():
        if len(copies) < 2:
            continue
        frameworks = {r.framework for s in copies for r in registrations[s]}
        first, second = copies[0], copies[1]
        if loader == "tensorflow" and "tensorflow" in frameworks and first.path != second.path:
            findings.append(Finding(
                "CO406", f"{second.path} is a copy of {first.path}: TensorFlow silently drops the ops it registers "
                         "again; the models share the first copy's ops", severity=Severity.WARNING, model=second.model,
                library=second.path, file=second.source, evidence=(f"same content as {first.path}",)))
        elif loader == "onnxruntime" and first.model == second.model:
            findings.append(Finding(
                "CO406", f"model '{first.model}' registers {second.path} twice (same content as {first.path}): "
                         "creating its session fails", model=first.model, library=second.path, file=second.source,
                predicted="Domain already set in registry"))
        elif loader == "tensorrt" and "tensorrt" in frameworks:
            findings.append(Finding(
                "CO406", f"{second.path} is a copy of {first.path}: TensorRT refuses its plugin creators, the first "
                         "library's win", model=second.model, library=second.path, file=second.source,
                predicted="Could not register plugin creator", evidence=(
                    "static check: TensorRT creator names are not readable without TensorRT; only identical plugin "
                    "libraries are detected",)))
    return findings
