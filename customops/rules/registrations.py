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

import hashlib
from collections import defaultdict

from customops.codes import Severity
from customops.errors import ElfError
from customops.findings import Finding
from customops.plan import LoadPlan, LoadStep
from customops.scanners.elf import symtab_strings
from customops.scanners.elfcache import ElfReader
from customops.scanners.registrations import static_registrations


def check(plan: LoadPlan, reader: ElfReader) -> list[Finding]:
    steps = [s for s in (*plan.preloads, *plan.dlopens) if s.purpose != "backend library"]
    registrations = {}
    for step in steps:
        try:
            registrations[step] = static_registrations(reader.read(step.source),
                                                       symtab_strings(step.source, b"TORCH_LIBRARY"))
        except ElfError:
            registrations[step] = []
    return _torch(steps, registrations) + _copies(steps, registrations)


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
            with open(step.source, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
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
                predicted="Domain already set in registry / Conflicting with a registered kernel"))
        elif loader == "tensorrt" and "tensorrt" in frameworks:
            findings.append(Finding(
                "CO406", f"{second.path} is a copy of {first.path}: TensorRT refuses its plugin creators, the first "
                         "library's win", model=second.model, library=second.path, file=second.source,
                predicted="Could not register plugin creator", evidence=(
                    "static check: TensorRT creator names are not readable without TensorRT; only identical plugin "
                    "libraries are detected",)))
    return findings
