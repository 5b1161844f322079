"""CO406: two libraries one server process loads register the same thing; what happens is the framework's
own rule (frameworks.md §4, triton.md §3).

- Torch: a second TORCH_LIBRARY for a namespace aborts the process inside dlopen (FRAGMENT and IMPL blocks
  are fine): predicted from the `.symtab` namespaces.
- TensorFlow: an op library loaded again from another path (same content) registers nothing: its ops are
  silently dropped.
- ONNX Runtime: the same custom-op library twice for one model (one session) fails at session creation.
- TensorRT: the same plugin library twice: the second's creators are refused ("Could not register plugin
  creator"); the first wins. Creator names cannot be read statically, so only identical libraries are
  detected; the report says so.
"""

from __future__ import annotations

import glob
import io
import os
import re
import zipfile
from collections import defaultdict

from customops import safeio
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.elf.reader import symtab_strings
from customops.errors import ElfError, InputError
from customops.findings import Finding
from customops.inspect.onnxmodel import model_ops
from customops.inspect.registrations import static_registrations
from customops.triton.plan import Context, LoadPlan, LoadStep


def check(plan: LoadPlan, reader: ElfReader, ctx: Context | None = None, models=()) -> list[Finding]:  # type: ignore[no-untyped-def]
    steps = [s for s in (*plan.preloads, *plan.dlopens) if s.purpose != "backend library"]
    registrations = {}
    for step in steps:
        try:
            registrations[step] = static_registrations(reader.read(step.source),
                                                       symtab_strings(step.source, b"TORCH_LIBRARY"))
        except ElfError:
            registrations[step] = []
    findings = _torch(steps, registrations) + _copies(steps, registrations)
    if ctx is not None:
        findings += _unregistered_torch_ops(models, registrations, ctx) + _unregistered_onnx_domains(models, ctx)
    return findings


TORCHSCRIPT_OP = re.compile(rb"\bops\.(\w+)\.(\w+)\(")


def torchscript_ops(archive: str) -> set[tuple[str, str]]:
    """(namespace, op) of every `ops.<ns>.<op>(` call in a TorchScript archive's serialized code."""
    found: set[tuple[str, str]] = set()
    try:
        with zipfile.ZipFile(io.BytesIO(safeio.map_regular(archive, safeio.MODEL_FILE_LIMIT))) as z:
            for name in z.namelist():
                if "/code/" in f"/{name}" and name.endswith(".py"):
                    with z.open(name) as member:  # read bounded: the archive's own sizes may lie (a zip bomb)
                        code = member.read(safeio.ARCHIVE_MEMBER_LIMIT + 1)
                    if len(code) > safeio.ARCHIVE_MEMBER_LIMIT:
                        continue
                    found.update((ns.decode(), op.decode()) for ns, op in TORCHSCRIPT_OP.findall(code))
    except (OSError, InputError, zipfile.BadZipFile, RuntimeError, ValueError, EOFError, NotImplementedError):
        return set()
    return found


def _unregistered_torch_ops(models, registrations: dict, ctx: Context) -> list[Finding]:  # type: ignore[no-untyped-def,type-arg]
    """CO408: a TorchScript model calls ops of a namespace that neither a loaded op library nor the
    container's own PyTorch libraries register: torch.jit.load fails with "Unknown builtin op"."""
    container = ctx.container
    target = getattr(container, "target", None)
    if target is None or container.facts.source != "root":  # type: ignore[attr-defined]
        return []  # the framework's own libraries are needed to tell built-in namespaces from missing ones
    registered = {r.name for found in registrations.values() for r in found
                  if r.framework == "torch" and r.kind in ("namespace", "fragment")}
    backend = target.host_path(f"{container.backend_dir}/pytorch")  # type: ignore[attr-defined]
    framework_files = sorted(glob.glob(os.path.join(backend, "lib*.so*"))) if backend else []
    findings = []
    for model in models:
        if model.backend != "pytorch" or not model.versions:
            continue
        archive = model.model_file("model.pt")
        calls = torchscript_ops(archive)
        for namespace in sorted({ns for ns, _ in calls} - registered):
            if not framework_files or mentioned(framework_files, f"{namespace}::".encode()):
                continue
            first = min(f"{ns}::{op}" for ns, op in calls if ns == namespace)
            findings.append(Finding(
                "CO408", f"model '{model.name}' calls {first} but nothing loaded registers the namespace "
                         f"'{namespace}': loading the TorchScript model fails", model=model.name, file=archive,
                symbol=first, predicted=f"Unknown builtin op: {first}.",
                evidence=(f"{archive} calls " + ", ".join(sorted(f"{ns}::{op}" for ns, op in calls
                                                                   if ns == namespace)),
                          f"no loaded op library defines TORCH_LIBRARY({namespace}) or a fragment of it",
                          f"not found in the container's PyTorch libraries ({backend})")))
    return findings


def _unregistered_onnx_domains(models, ctx: Context) -> list[Finding]:  # type: ignore[no-untyped-def]
    """CO408: an ONNX model uses a domain that ONNX Runtime does not build in (the domain's name does not
    occur as a string in the container's ORT libraries) and that is not a function of the model itself,
    while the model loads no custom-op library: creating the session fails. With op libraries listed, what
    they register is not readable statically (`customops probe`), so nothing is claimed."""
    container = ctx.container
    target = getattr(container, "target", None)
    if target is None or container.facts.source != "root":  # type: ignore[attr-defined]
        return []
    backend = target.host_path(f"{container.backend_dir}/onnxruntime")  # type: ignore[attr-defined]
    framework_files = sorted(glob.glob(os.path.join(backend, "lib*.so*"))) if backend else []
    findings = []
    for model in models:
        if model.backend != "onnxruntime" or not model.versions or model.op_libraries or not framework_files:
            continue
        path = model.model_file("model.onnx")
        if not os.path.isfile(path):
            continue
        try:
            used, local = model_ops(path)
        except (InputError, ValueError, BufferError):
            continue  # an unreadable model is ONNX Runtime's to report
        custom = sorted((d, op) for d, op in used - local if d not in ("", "ai.onnx"))
        for domain in sorted({d for d, _ in custom}):
            if mentioned(framework_files, b"\0" + domain.encode() + b"\0"):
                continue  # built into ONNX Runtime (com.microsoft, ai.onnx.ml, ...)
            ops = [op for d, op in custom if d == domain]
            findings.append(Finding(
                "CO408", f"model '{model.name}' uses {domain}:{ops[0]} but loads no custom-op library and ONNX "
                         f"Runtime does not build in the domain '{domain}': creating its session fails",
                model=model.name, file=path, symbol=f"{domain}:{ops[0]}",
                predicted=f"Fatal error: {domain}:{ops[0]}(-1) is not a registered function/op",
                evidence=(f"{path} uses " + ", ".join(f"{domain}:{op}" for op in ops),
                          "config.pbtxt lists no model_operations op_library_filename",
                          f"'{domain}' does not occur in the container's ONNX Runtime libraries ({backend})")))
    return findings


def mentioned(paths: list[str], needle: bytes) -> bool:
    """Whether any of the files contains `needle` (a name a framework library builds in)."""
    for path in paths:
        try:
            if safeio.map_regular(path, safeio.LIBRARY_LIMIT).find(needle) != -1:
                return True
        except (InputError, ValueError):
            continue
    return False


def _torch(steps: list[LoadStep], registrations: dict) -> list[Finding]:  # type: ignore[type-arg]
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


def _copies(steps: list[LoadStep], registrations: dict) -> list[Finding]:  # type: ignore[type-arg]
    by_content: dict[tuple[str, str], list[LoadStep]] = defaultdict(list)
    for step in steps:
        try:
            digest = safeio.sha256(step.source, safeio.LIBRARY_LIMIT)
        except InputError:
            continue
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
