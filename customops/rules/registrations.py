"""CO406: what the op libraries register, against each other (CO408, against what the models use:
customops.rules.unregistered_ops).

CO406, two libraries one server process loads register the same thing; what happens is the framework's rule:
- Torch: a second TORCH_LIBRARY for a namespace aborts the process inside dlopen (FRAGMENT and IMPL blocks
  are fine), a second STABLE_TORCH_LIBRARY crashes it (the stable shim's error is ignored, the library handle
  stays null): predicted from the `.symtab` namespaces. A schema defined twice is refused ("Tried to register
  an operator ... multiple times"), which aborts the process where the library's def() throws on it
  (torch::Library, StableLibrary of torch 2.13's headers on) and is skipped where it does not (older
  StableLibrary: customops.inspect.registrations.refused_def), torch 2.11 to 2.15 alike; a second kernel
  replaces the first, with a warning. So one op library loaded from two paths (same content: every
  registration runs again) kills the server, stripped or not, unless `.symtab` shows stable fragment and kernel
  blocks only and its def() skips refusals (information); of two builds defining one schema, the one that
  registers second (of preloads, the first listed) decides (a warning where it loads). Where a stripped
  library's namespaces cannot be read, a shared op name is only a warning.
- TensorFlow: an op library loaded again from another path (same content) registers nothing: its ops are
  silently dropped.
- ONNX Runtime: the same custom-op library twice for one model (one session) fails at session creation.
- TensorRT: the same plugin library twice: the second's creators are refused ("Could not register plugin
  creator"); the first wins. Creator names cannot be read statically, so only identical libraries are
  detected; the report says so.
With --probe, customops.rules.probed reports what the frameworks observed through duplicate_registration()
here.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from typing import Any

from customops.codes import Code, Severity
from customops.emitters import emits
from customops.findings import Finding
from customops.frameworks import PYTORCH, TENSORFLOW, TENSORRT
from customops.inspect.registrations import FoundIn, RefusedDef, Registration
from customops.rules.context import RuleContext, again
from customops.triton.plan import LoadedBy, LoadStep

TORCH = PYTORCH.probe  # what Torch registrations are registered with
NEEDS_PREDICTION = False
OVERRIDDEN = "Overriding a previously registered kernel for the same operator and the same dispatch key"  # torch's


def check(ctx: RuleContext) -> list[Finding]:
    steps = list(ctx.registrants)  # every library of the process, wherever it comes from
    registrations = {step: ctx.files.registrations.get(step.host_path, ()) for step in steps}
    loaded = _distinct_files(steps, ctx)  # Torch registers in static initialisers: once per file ld.so maps
    torch = _torch(loaded, registrations)
    torch += _torch_copies(loaded, registrations, ctx, {f.library for f in torch})
    torch += _torch_schemas(_registration_order(loaded), registrations, ctx, {f.library for f in torch})
    return torch + _copies(steps, registrations, ctx)


def _distinct_files(steps: list[LoadStep], ctx: RuleContext) -> list[LoadStep]:
    """The steps less those naming a file loaded already: ld.so maps one file (device, inode) once, whatever
    its path (_dl_file_id_match_p), so its registrations run once. Identities are known with a prediction."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for step in steps:
        identity = ctx.files.identities.get(step.host_path)
        if identity is not None and identity in seen:
            continue
        if identity is not None:
            seen.add(identity)
        kept.append(step)
    return kept


def _registration_order(steps: list[LoadStep]) -> list[LoadStep]:
    """The steps in the order their static initialisers run, which is the order they register in: ld.so runs
    the LD_PRELOAD libraries' at start-up, after their dependencies and the last listed first (_dl_init walks
    the sorted link map backwards; libraries that do not need each other keep their order there, as two builds
    of one library do), and a dlopen()ed library's when it is opened, later."""
    return [*reversed([s for s in steps if s.preload]), *(s for s in steps if not s.preload)]


@emits(Code.CO406)
def duplicate_registration(message: str, **about: Any) -> Finding:
    """Two libraries of one process register the same thing: read from their files, or observed by a probe."""
    return Finding(Code.CO406, message, **about)


def _torch(steps: list[LoadStep], registrations: dict) -> list[Finding]:
    owners: dict[str, list[LoadStep]] = defaultdict(list)
    for step in steps:
        for r in registrations[step]:
            if r.framework == TORCH and r.kind == "namespace" and step not in owners[r.name]:
                owners[r.name].append(step)
    findings = []
    for namespace, defining in sorted(owners.items()):
        if len({s.path for s in defining}) < 2:
            continue
        first, second = defining[0], defining[1]
        macro = {s: "STABLE_TORCH_LIBRARY" if _api(registrations[s], namespace) == "stable" else "TORCH_LIBRARY"
                 for s in defining}
        evidence = (*(f"{macro[s]}({namespace}) in {s.path}" for s in defining),
                    f"use {macro[second]}_FRAGMENT to add to a namespace defined elsewhere")
        if macro[second] == "STABLE_TORCH_LIBRARY":  # torch/csrc/stable/library.h ignores the shim's error
            findings.append(duplicate_registration(
                f"{second.path} defines STABLE_TORCH_LIBRARY({namespace}) again after {first.path}: torch "
                "refuses the namespace, the library handle stays null and its first def() crashes the "
                "server (SIGSEGV)", **again(first, second), symbol=namespace, evidence=evidence))
            continue
        findings.append(duplicate_registration(
            f"{second.path} defines TORCH_LIBRARY({namespace}) again after {first.path}: loading it aborts "
            "the server", **again(first, second), symbol=namespace,
            predicted=f"Only a single TORCH_LIBRARY can be used to register the namespace {namespace}; please put "
                      "all of your definitions in a single TORCH_LIBRARY block.", evidence=evidence))
    return findings


def _api(found: tuple[Registration, ...], namespace: str) -> str:
    return next((r.api for r in found if r.framework == TORCH and r.kind == "namespace" and r.name == namespace), "")


def op_library(found: tuple[Registration, ...]) -> Registration | None:
    """The library's mark as a Torch op library that defines schemas (imports the def API)."""
    return next((r for r in found if r.framework == TORCH and r.kind == "op-library"), None)


def torch_schemas_of(found: tuple[Registration, ...]) -> list[str]:
    return [r.name for r in found if r.framework == TORCH and r.kind == "schema"]


def _blocks(found: tuple[Registration, ...]) -> set[str]:
    """The kinds of Torch blocks a library may have: exact from `.symtab`, else bounded by its imported stable
    shims; empty when unknown (a stripped library using torch::Library)."""
    exact = {r.kind for r in found if r.framework == TORCH and r.kind in ("namespace", "fragment", "impl")}
    library = op_library(found)
    return exact or set(library.blocks if library else ())


def _torch_copies(steps: list[LoadStep], registrations: dict, ctx: RuleContext, reported: set) -> list[Finding]:
    """CO406: one Torch op library loaded from two paths (same content, two files): ld.so maps both, and every
    registration of the second runs again, whatever is left of its `.symtab` (_copy_fate)."""
    by_content: dict[str, list[LoadStep]] = defaultdict(list)
    for step in steps:
        digest = ctx.files.digests.get(step.host_path)
        if digest is not None and op_library(registrations[step]) is not None:
            by_content[digest].append(step)
    findings = []
    for copies in by_content.values():
        paths = list(dict.fromkeys(s.path for s in copies))
        if len(paths) < 2:
            continue
        first = copies[0]
        second = next(s for s in copies if s.path != first.path)
        if second.path in reported:
            continue
        found = registrations[second]
        refusal = ctx.files.refused_defs.get(second.host_path)
        schemas = torch_schemas_of(found)
        evidence = [f"same content as {first.path}: ld.so loads both files, and their static initialisers register "
                    "with torch twice"]
        if schemas:
            evidence.append("schemas it defines (read from its strings): " + ", ".join(schemas[:10])
                            + (" ..." if len(schemas) > 10 else ""))
        if not any(r.found_in is FoundIn.SYMTAB for r in found if r.framework == TORCH):
            evidence.append("its namespaces are not readable (no .symtab); its imports show it defines schemas")
        if refusal is not None and any(r.api == "stable" for r in found if r.framework == TORCH):
            evidence.append(_refusal_evidence(refusal))
        how, predicted, severity = _copy_fate(found, refusal)
        findings.append(duplicate_registration(
            f"{second.path} is a copy of {first.path}: loading it registers the same Torch ops again; {how}",
            severity=severity, **again(first, second),
            symbol=schemas[0] if schemas else None, predicted=predicted, evidence=tuple(evidence)))
    return findings


def _copy_fate(found: tuple[Registration, ...], refusal: RefusedDef | None) -> tuple[str, str | None, Severity | None]:
    """What a copy's registrations do the second time (how, torch's message, the severity if not the code's):
    torch refuses its namespaces and schemas and takes its kernels in place of the first copy's, with a warning;
    whether the refusals kill the server is the library's own doing (_survives)."""
    blocks, stable = _blocks(found), any(r.api == "stable" for r in found if r.framework == TORCH)
    if _survives(found, refusal):
        return ("torch refuses its schemas the second time, which this build ignores, and takes its kernels in place "
                "of the first copy's (the same code): the server loads, with a warning", OVERRIDDEN, Severity.INFO)
    if blocks and "namespace" not in blocks:
        return ("torch refuses each schema the second time, which aborts the server",
                "with the same name and overload name multiple times", None)
    if blocks == {"namespace"} or blocks == {"namespace", "impl"}:
        return ("torch refuses its namespace the second time and its first def() crashes the server (SIGSEGV)"
                if stable else "torch refuses its namespace the second time, which aborts the server"), None, None
    if stable and refusal is RefusedDef.IGNORED:
        return ("torch refuses its namespace or its schemas the second time: a refused STABLE_TORCH_LIBRARY namespace "
                "crashes the server (SIGSEGV); refused schemas of _FRAGMENT blocks this build ignores, and then the "
                "server loads; which blocks it has is not readable without .symtab"), None, None
    return ("torch refuses its namespace or its schemas the second time, which aborts "
            + ("(or crashes) the server" if stable else "the server")), None, None  # torch::Library throws either way


def _survives(found: tuple[Registration, ...], refusal: RefusedDef | None) -> bool:
    """Whether loading the library goes on when torch refuses its schema definitions: its `.symtab` shows only
    stable-ABI fragment and kernel blocks (StableLibrary's; a refused STABLE_TORCH_LIBRARY namespace leaves a null
    handle that its first def() crashes on) and its def() does not check the shim's error code."""
    blocks = [r for r in found if r.framework == TORCH and r.found_in is FoundIn.SYMTAB]
    return (refusal is RefusedDef.IGNORED and bool(blocks) and all(r.api == "stable" for r in blocks)
            and not any(r.kind == "namespace" for r in blocks))


def _refusal_evidence(refusal: RefusedDef) -> str:
    if refusal is RefusedDef.THROWS:
        return "its def() checks the shim's error code and throws on a refusal (the check's text is in its rodata)"
    return ("its def() does not check the shim's error code (no such check's text in its rodata: StableLibrary of "
            "torch headers before 2.13), so a schema torch refuses is skipped")


def namespaced_ops(found: tuple[Registration, ...]) -> tuple[set[tuple[str, str]], set[str]]:
    """((namespace, op) of each schema whose namespace is known, ops whose namespace is not): the namespace
    from the schema, else the one namespace its `.symtab` blocks define or extend."""
    namespaces = {r.name for r in found if r.framework == TORCH and r.kind in ("namespace", "fragment")}
    known: set[tuple[str, str]] = set()
    unknown: set[str] = set()
    for name in torch_schemas_of(found):
        ns, _, op = name.rpartition("::")
        if ns:
            known.add((ns, op))
        elif len(namespaces) == 1:
            known.add((next(iter(namespaces)), op))
        else:
            unknown.add(op)
    return known, unknown


def _torch_schemas(steps: list[LoadStep], registrations: dict, ctx: RuleContext, reported: set) -> list[Finding]:
    """CO406: two different Torch op libraries (two builds of one library) that define one schema, `steps` in the
    order they register (_registration_order). Torch refuses the later definition: that aborts the server
    unless the library making it ignores the refusal (_survives), and then its kernels run under the first's."""
    libraries = [s for s in steps if op_library(registrations[s]) is not None]
    findings = []
    for index, second in enumerate(libraries):
        if second.path in reported:
            continue
        known, unknown = namespaced_ops(registrations[second])
        refusal = ctx.files.refused_defs.get(second.host_path)
        for first in libraries[:index]:
            if first.path == second.path or ctx.files.digests.get(first.host_path) == ctx.files.digests.get(
                    second.host_path) is not None:
                continue
            first_known, first_unknown = namespaced_ops(registrations[first])
            shared = sorted(f"{ns}::{op}" for ns, op in known & first_known)
            maybe = sorted((unknown | {op for _, op in known}) & (first_unknown | {op for _, op in first_known}))
            if shared or (maybe and (unknown or first_unknown)):
                findings.append(_schema_clash(first, second, shared or maybe, bool(shared), refusal,
                                              _survives(registrations[second], refusal)))
                reported.add(second.path)
                break
    return findings


def _schema_clash(first: LoadStep, second: LoadStep, ops: list[str], known: bool, refusal: RefusedDef | None,
                  survives: bool) -> Finding:
    """CO406 for `second` defining `ops` again after `first`: in a namespace both are known to share (`known`),
    else in one of them not readable (a warning)."""
    evidence = (f"both define: {', '.join(ops[:10])}" + (" ..." if len(ops) > 10 else ""),
                *((f"ld.so runs {first.path}'s static initialisers before {second.path}'s (LD_PRELOAD: the last "
                   "listed first)",) if first.preload and second.preload else ()))
    clash = partial(duplicate_registration, **again(first, second), symbol=ops[0])
    if not known:
        if survives:
            then = f"torch refuses {second.path}'s definition, which it ignores: its kernels replace the first's"
        elif refusal is RefusedDef.IGNORED:
            then = (f"torch refuses {second.path}'s definition: the server aborts unless the library ignores that, as "
                    "its def() calls, not checked with torch's macros, seem to (its kernels then replace the first's)")
        else:
            then = f"loading {second.path} aborts the server"
        return clash(f"{second.path} and {first.path} both define a schema for {ops[0]}, and the namespace of at "
                     f"least one is not readable (no .symtab): if it is the same, {then}", severity=Severity.WARNING,
                     evidence=evidence)
    evidence += ("namespaces and ops read from their .symtab and schema strings",)
    if survives:
        return clash(f"{second.path} defines {ops[0]} again after {first.path}: torch refuses the schema, which this "
                     f"build ignores, and takes its kernels in place of the first's: the server loads, and runs "
                     f"{second.path}'s code under {first.path}'s schemas", severity=Severity.WARNING,
                     predicted=OVERRIDDEN, evidence=(*evidence, _refusal_evidence(RefusedDef.IGNORED)))
    return clash(f"{second.path} defines {ops[0]} again after {first.path}: torch refuses the schema, which aborts "
                 "the server", predicted="with the same name and overload name multiple times", evidence=evidence)


def _copies(steps: list[LoadStep], registrations: dict, ctx: RuleContext) -> list[Finding]:
    """CO406, one library twice in one registry: the process's (TensorFlow ops, TensorRT plugins), a session's."""
    by_content: dict[tuple[bool, str], list[LoadStep]] = defaultdict(list)
    for step in steps:
        digest = ctx.files.digests.get(step.host_path)
        if digest is not None:
            by_content[(step.loader is LoadedBy.ONNXRUNTIME, digest)].append(step)
    findings = []
    for (session, _digest), copies in by_content.items():
        if len(copies) < 2:
            continue
        frameworks = {r.framework for s in copies for r in registrations[s]}
        first, second = copies[0], copies[1]
        if not session and TENSORFLOW.probe in frameworks and first.path != second.path:
            findings.append(duplicate_registration(
                f"{second.path} is a copy of {first.path}: TensorFlow silently drops the ops it registers "
                "again; the models share the first copy's ops", severity=Severity.WARNING,
                **again(first, second), evidence=(f"same content as {first.path}",)))
        elif session and first.model == second.model:
            findings.append(duplicate_registration(
                f"model '{first.model}' registers {second.path} twice (same content as {first.path}): "
                "creating its session fails", **again(first, second),
                predicted="Domain already set in registry"))
        elif not session and TENSORRT.probe in frameworks:
            findings.append(duplicate_registration(
                f"{second.path} is a copy of {first.path}: TensorRT refuses its plugin creators, the first "
                "library's win", **again(first, second),
                predicted="Could not register plugin creator", evidence=(
                    "static check: TensorRT creator names are not readable without TensorRT; only identical plugin "
                    "libraries are detected",)))
    return findings
