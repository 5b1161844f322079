"""CO408: a model uses ops that nothing loaded registers; loading the model fails.

Read from the files (with --probe, customops.rules.probed reports what the frameworks observed through
unregistered_ops() here):
- Torch: a TorchScript model calls ops of a namespace that no loaded op library and no library of the container's
  PyTorch backend registers ("Unknown builtin op").
- ONNX Runtime: an ONNX model uses a domain that ONNX Runtime does not build in, and loads no op library.
- TensorFlow: a SavedModel or GraphDef uses an op type whose name is a string in none of the container's
  TensorFlow libraries and none of the loaded op libraries, where REGISTER_OP("Name") would keep it ("Op type not
  registered"). A name found anywhere counts as registered, even as the tail of a longer string: only a name that
  no loaded file could register is claimed.
An LD_PRELOAD entry ld.so ignores ("cannot be preloaded ... ignored", the server starts without it) registers
nothing: the findings name it, as the library whose ops the model then lacks (issue #38 §6).
"""

from __future__ import annotations

from typing import Any

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.frameworks import ONNXRUNTIME, PYTORCH, TENSORFLOW
from customops.inspect.registrations import FoundIn
from customops.rules.context import RuleContext
from customops.rules.registrations import TORCH, namespaced_ops, op_library, torch_schemas_of
from customops.triton.plan import LoadStep

NEEDS_PREDICTION = False


def check(ctx: RuleContext) -> list[Finding]:
    registrations = {step: ctx.files.registrations.get(step.host_path, ()) for step in loaded(ctx)}
    return (_unregistered_torch_ops(ctx, registrations) + _unregistered_onnx_domains(ctx)
            + _unregistered_tensorflow_ops(ctx))


def loaded(ctx: RuleContext) -> list[LoadStep]:
    """The registrants the process really loads: all of them without a prediction, else those whose load the
    model predicts to succeed (an ignored preload, a failed dlopen register nothing)."""
    outcome = {id(step): o for step, o in ctx.outcomes}
    return [s for s in ctx.registrants if ctx.prediction is None or id(s) not in outcome or outcome[id(s)].ok]


def ignored_preloads(ctx: RuleContext) -> list[tuple[LoadStep, str]]:
    """(preload, why) for each LD_PRELOAD entry ld.so ignores: the server starts without what it registers."""
    if ctx.prediction is None:
        return []
    return [(step, o.message) for step, o in ctx.outcomes if step.preload and not o.ok]


def _without_ignored(ctx: RuleContext, names: str) -> tuple[tuple[str, ...], str]:
    """The evidence and fix naming the ignored preloads, where there are any."""
    ignored = ignored_preloads(ctx)
    if not ignored:
        return (), ""
    evidence = tuple(f"LD_PRELOAD entry {step.path} is ignored ({why}): the server starts without the ops it "
                     "registers" for step, why in ignored)
    paths = ", ".join(step.path for step, _ in ignored)
    return evidence, (f"Make {paths} loadable in the container (ld.so ignores it, and the model then lacks "
                      f"{names}), or load the library that registers {names}.")


@emits(Code.CO408)
def unregistered_ops(message: str, **about: Any) -> Finding:
    """A model uses ops that nothing loaded registers: read from the files, or observed by a probe."""
    return Finding(Code.CO408, message, **about)


def _unregistered_torch_ops(ctx: RuleContext, registrations: dict) -> list[Finding]:
    """CO408: a TorchScript model calls ops of a namespace that neither a loaded op library nor the
    container's own PyTorch libraries register: torch.jit.load fails with "Unknown builtin op". A loaded
    library registers a namespace when its `.symtab` shows a (STABLE_)TORCH_LIBRARY or _FRAGMENT block for it,
    when one of its schema strings is qualified with it, or, stripped and on the stable ABI (whose schemas are
    whole C string literals, all readable), when it defines the schema of an op called there. Nothing is
    claimed while a stripped op library's schemas may be incomplete (torch::Library's, which g++ may build
    from immediates) or are not readable at all."""
    framework = ctx.files.frameworks.get(PYTORCH.backend)
    if framework is None:
        return []  # the framework's own libraries are needed to tell built-in namespaces from missing ones
    registered = {r.name for found in registrations.values() for r in found
                  if r.framework == TORCH and r.kind in ("namespace", "fragment")}
    schemas: set[tuple[str, str]] = set()  # (namespace or "" where not readable, op without overload)
    for found in registrations.values():
        library = op_library(found)
        if library is None:
            continue
        known, unknown = namespaced_ops(found)
        registered |= {ns for ns, _ in known}  # a schema defined in a namespace registers the namespace
        if any(r.found_in is FoundIn.SYMTAB for r in found if r.framework == TORCH):
            continue
        if library.api != "stable" or not torch_schemas_of(found):
            return []  # stripped, its schemas not all readable: it may register any namespace
        schemas |= {(ns, op.split(".")[0]) for ns, op in known} | {("", op.split(".")[0]) for op in unknown}
    findings = []
    for model in ctx.models:
        if model.backend != PYTORCH.backend or not model.versions:
            continue
        archive = model.model_file(PYTORCH.model_file)
        calls = ctx.files.torchscript_calls.get(archive, frozenset())
        for namespace in sorted({ns for ns, _ in calls} - registered):
            if not framework.has_libraries or f"{namespace}::".encode() in framework.found:
                continue
            if any((namespace, op) in schemas or ("", op) in schemas for ns, op in calls if ns == namespace):
                continue  # a loaded library defines the op's schema (its namespace read from the schema or .symtab)
            first = min(f"{ns}::{op}" for ns, op in calls if ns == namespace)
            because, fix = _without_ignored(ctx, f"the namespace '{namespace}'")
            findings.append(unregistered_ops(
                f"model '{model.name}' calls {first} but nothing loaded registers the namespace "
                f"'{namespace}': loading the TorchScript model fails", model=model.name, file=archive,
                symbol=first, predicted=f"Unknown builtin op: {first}.",
                evidence=(f"{archive} calls " + ", ".join(sorted(f"{ns}::{op}" for ns, op in calls
                                                                   if ns == namespace)),
                          f"no loaded op library defines TORCH_LIBRARY({namespace}) or a fragment of it (nor the "
                          "STABLE_TORCH_LIBRARY forms), nor a schema of the ops called",
                          f"not found in the container's PyTorch libraries ({framework.directory})", *because),
                **({"hint": fix} if fix else {})))
    return findings


def _unregistered_onnx_domains(ctx: RuleContext) -> list[Finding]:
    """CO408: an ONNX model uses a domain that ONNX Runtime does not build in (the domain's name does not
    occur as a string in the container's ORT libraries) and that is not a function of the model itself,
    while the model loads no custom-op library: creating the session fails. With op libraries listed, what
    they register is not readable statically (`customops probe`), so nothing is claimed."""
    framework = ctx.files.frameworks.get(ONNXRUNTIME.backend)
    if framework is None or not framework.has_libraries:
        return []
    findings = []
    for model in ctx.models:
        if model.backend != ONNXRUNTIME.backend or not model.versions or model.op_libraries:
            continue
        path = model.model_file(ONNXRUNTIME.model_file)
        ops = ctx.files.onnx_ops.get(path)
        if ops is None:
            continue  # absent or unreadable: ONNX Runtime's to report
        used, local = ops
        custom = sorted((d, op) for d, op in used - local if d not in ("", "ai.onnx"))
        for domain in sorted({d for d, _ in custom}):
            if b"\0" + domain.encode() + b"\0" in framework.found:
                continue  # built into ONNX Runtime (com.microsoft, ai.onnx.ml, ...)
            ops_used = [op for d, op in custom if d == domain]
            findings.append(unregistered_ops(
                f"model '{model.name}' uses {domain}:{ops_used[0]} but loads no custom-op library and ONNX "
                f"Runtime does not build in the domain '{domain}': creating its session fails",
                model=model.name, file=path, symbol=f"{domain}:{ops_used[0]}",
                predicted=f"Fatal error: {domain}:{ops_used[0]}(-1) is not a registered function/op",
                evidence=(f"{path} uses " + ", ".join(f"{domain}:{op}" for op in ops_used),
                          "config.pbtxt lists no model_operations op_library_filename",
                          f"'{domain}' does not occur in the container's ONNX Runtime libraries "
                          f"({framework.directory})")))
    return findings


def _unregistered_tensorflow_ops(ctx: RuleContext) -> list[Finding]:
    """CO408: a TensorFlow model uses op types that no loaded file could register (module docstring)."""
    framework = ctx.files.frameworks.get(TENSORFLOW.backend)
    if framework is None or not framework.has_libraries:
        return []  # the framework's own libraries are needed to tell built-in ops from missing ones
    registering = loaded(ctx)
    registered = {name.decode() for name in framework.found} | {
        name for step in registering for name in ctx.files.op_names.get(step.host_path, ())}
    failed = {step.model for step in ctx.registrants if step not in registering}
    findings = []
    for model in ctx.models:
        if model.backend != TENSORFLOW.backend or not model.versions or model.name in failed:
            continue  # a model whose own op library fails to load fails there first
        path = model.model_file(TENSORFLOW.file_for(model.platform))
        missing = sorted(ctx.files.tensorflow_ops.get(path, frozenset()) - registered)
        if not missing:
            continue
        named = ", ".join(f"'{op}'" for op in missing)
        because, fix = _without_ignored(ctx, named)
        findings.append(unregistered_ops(
            f"model '{model.name}' uses the TensorFlow op {missing[0]}, which nothing loaded registers: loading the "
            "model fails", model=model.name, file=path, symbol=missing[0],
            predicted=f"Op type not registered '{missing[0]}' in binary running on <host>",
            evidence=(f"{path} uses {', '.join(missing)}",
                      f"no string {named} in the container's TensorFlow libraries ({framework.directory}) or in a "
                      "loaded op library, where REGISTER_OP would keep it", *because),
            **({"hint": fix} if fix else {})))
    return findings
