"""CO301-CO308: will each library load, and will the server find its entry points?"""

from __future__ import annotations

import os
import re

from customops.findings import Finding
from customops.plan import Context, LoadPlan, LoadStep
from customops.scanners.demangle import demangle
from customops.scanners.elfcache import ElfReader
from customops.scanners.linker import Binding, Prediction, StepOutcome

NOT_LOADABLE = ("wrong ELF class", "invalid ELF header", "cannot be dlopen()ed", "data encoding",
                "only ET_DYN", "file too short")
VERSION_ERROR = re.compile(r"^(?P<provider>.*): version `(?P<version>[^']+)' not found \(required by (?P<by>.*)\)$")
SHOWN = 20


def check(plan: LoadPlan, prediction: Prediction, outcomes: list[tuple[LoadStep, object]], ctx: Context,
          reader: ElfReader) -> list[Finding]:
    findings: list[Finding] = []
    for step, outcome in outcomes:
        assert isinstance(outcome, StepOutcome)
        findings += _step(step, outcome, ctx, reader)
    startup = next((o for o in prediction.outcomes if o.kind == "startup"), None)
    if startup is not None and startup.status in ("fatal", "crash"):
        findings += _startup(startup, plan)
    elif startup is not None:  # preloads are bound lazily at exec: their missing functions fail when called
        for step in plan.preloads:
            failures = tuple(b for b in startup.lazy_failures if b.referrer == step.path)
            findings += _lazy(step, failures)
    return findings


def _lazy(step: LoadStep, failures: tuple[Binding, ...]) -> list[Finding]:
    if not failures:
        return []
    first = failures[0]
    return [Finding(
        "CO305", f"{_what(step)}: {len(failures)} function{' is' if len(failures) == 1 else 's are'} defined nowhere; "
                 f"the first call of {_shown(first)} "
                 "kills the server", symbol=first.symbol.decode("utf-8", "replace"),
        predicted=f"symbol lookup error: {first.referrer}: undefined symbol: {first.symbol.decode()}",
        evidence=_symbols(failures), **_about(step))]


def _about(step: LoadStep) -> dict:
    return {"model": step.model, "library": step.path, "file": step.source}


def _what(step: LoadStep) -> str:
    return f"{step.purpose} {step.path}" + (f" of model '{step.model}'" if step.model else "")


def _step(step: LoadStep, outcome: StepOutcome, ctx: Context, reader: ElfReader) -> list[Finding]:
    findings: list[Finding] = []
    if outcome.status == "ignored":  # a preload ld.so could not map: only a warning to ld.so
        code = "CO303" if "ELF class" in outcome.message else "CO301"
        reason = "is not a loadable ELF file for this container" if code == "CO303" else "does not exist"
        findings.append(Finding(code, f"LD_PRELOAD entry {step.path} {reason}; ld.so ignores it and the server "
                                      "starts without it", predicted=outcome.message, **_about(step)))
    elif outcome.status in ("failed", "crash"):
        findings.append(_failure(step, outcome, ctx, reader))
    findings += _lazy(step, outcome.lazy_failures)
    for call in outcome.calls:
        if call.status == "ok":
            continue
        if step.purpose == "backend library":
            findings.append(Finding(
                "CO202", f"backend library {step.path} does not export {call.symbol} (C linkage, default visibility)",
                symbol=call.symbol, predicted=f"unable to find required entrypoint '{call.symbol}' in shared library",
                **_about(step)))
        elif call.symbol == "RegisterCustomOps":
            findings.append(Finding(
                "CO308", f"op library {step.path} of model '{step.model}' does not export RegisterCustomOps",
                symbol=call.symbol, predicted=f"Failed to get symbol RegisterCustomOps with error: {step.path}: "
                                              "undefined symbol: RegisterCustomOps", **_about(step)))
    if step.loader == "tensorrt" and step.purpose == "plugin library" and findings:
        findings = [_trt_logged(f) for f in findings]
    return findings


def _trt_logged(finding: Finding) -> Finding:
    from dataclasses import replace

    return replace(finding, evidence=(*finding.evidence, "the TensorRT backend only logs this failure; the model then "
                                      "fails to deserialize (getPluginCreator could not find plugin ...)"))


def _failure(step: LoadStep, outcome: StepOutcome, ctx: Context, reader: ElfReader) -> Finding:
    message = outcome.message
    if not ctx.exists(step.path):
        suggestion = ctx.suggest_mount(step.path) if step.path.startswith("/") else None
        hint = (f"{suggestion}: a file with the same path tail is in the checkout" if suggestion else "")
        return Finding("CO301", f"{_what(step)} does not exist in the container"
                                + (f"; with {suggestion} it would" if suggestion else ""), predicted=message,
                       evidence=(f"container path: {step.path}", f"checked: {ctx.source(step.path)}"),
                       hint=hint, **_about(step))
    version = VERSION_ERROR.match(message)
    if version:
        name = version.group("version")
        code = "CO505" if name.startswith("VERS_") and "onnxruntime" in version.group("provider") else "CO306"
        return Finding(code, f"{_what(step)} needs version {name}, which {version.group('provider')} does not define",
                       version=name, predicted=message, **_about(step))
    if outcome.unresolved:
        first = outcome.unresolved[0]
        framework = _framework_of(first, outcome, ctx, reader)
        if framework:
            return Finding("CO504", f"{_what(step)} was built against another version of {framework}: "
                                    f"{_count(len(outcome.unresolved))} missing there, "
                                    f"first {_shown(first)}",
                           symbol=first.symbol.decode("utf-8", "replace"), version=first.version, predicted=message,
                           evidence=_symbols(outcome.unresolved), **_about(step))
        return Finding("CO304", f"{_what(step)}: {len(outcome.unresolved)} undefined symbol(s), first "
                                f"{_shown(first)}", symbol=first.symbol.decode("utf-8", "replace"),
                       version=first.version, predicted=message, evidence=_symbols(outcome.unresolved),
                       **_about(step))
    missing = next((s for s in reversed(outcome.searches) if s.found is None), None)
    if missing is not None and not any(word in message for word in NOT_LOADABLE if "ELF class" not in word):
        code = "CO303" if "wrong ELF class" in message else "CO302"
        return Finding(code, f"{_what(step)}: {missing.name} (needed by {missing.requested_by}) is not found",
                       predicted=message, evidence=_trace(missing), **_about(step))
    if any(word in message for word in NOT_LOADABLE):
        return Finding("CO303", f"{_what(step)} cannot be loaded: {message}", predicted=message, **_about(step))
    if "Inconsistency detected" in message:
        return Finding("CO306", f"{_what(step)} crashes ld.so: a versioned symbol's provider has no version "
                                "information", predicted=message, **_about(step))
    return Finding("CO304", f"{_what(step)} fails to load: {message}", predicted=message, **_about(step))


def _count(n: int) -> str:
    """ "1 of its symbols is", "2 of its symbols are"."""
    return f"{n} of its symbols {'is' if n == 1 else 'are'}"


def _framework_of(binding: Binding, outcome: StepOutcome, ctx: Context, reader: ElfReader) -> str | None:
    """The container framework library (a DT_NEEDED entry found in a backend directory) that exports the
    missing symbol's namespace: the library was built against another version of it. Decided from the
    demangled name and the framework's own symbols, with no list of frameworks."""
    name = demangle(binding.symbol)
    if "::" not in name:
        return None
    namespace = name.split("::", 1)[0]
    target = ctx.container.target  # type: ignore[attr-defined]
    backend_dir = ctx.container.backend_dir  # type: ignore[attr-defined]
    from customops.errors import ElfError

    host = target.host_path(outcome.request)
    if host is None:
        return None
    try:
        needed = reader.read(host).needed
    except ElfError:
        return None
    mangled = f"_ZN{len(namespace)}{namespace}".encode()
    for directory in sorted(os.listdir(target.host_path(backend_dir) or "/nonexistent")):
        for name in needed:
            candidate = target.host_path(f"{backend_dir}/{directory}/{name}")
            if candidate:
                try:
                    if reader.read(candidate).symbols.names_containing(mangled).any():
                        return name
                except ElfError:
                    continue
    return None


def _startup(outcome: StepOutcome, plan: LoadPlan) -> list[Finding]:
    missing = next((s for s in reversed(outcome.searches) if s.found is None), None)
    preload = next((s for s in plan.preloads if missing and s.path == missing.requested_by), None)
    about = _about(preload) if preload else {}
    if missing is not None:
        return [Finding("CO302", f"the server cannot start: {missing.name} (needed by {missing.requested_by}, "
                                 "loaded through LD_PRELOAD) is not found", predicted=outcome.message,
                        evidence=_trace(missing), **about)]
    if outcome.unresolved:
        first = outcome.unresolved[0]
        return [Finding("CO304", f"the server cannot start: {_shown(first)} is defined nowhere",
                        symbol=first.symbol.decode("utf-8", "replace"), predicted=outcome.message,
                        evidence=_symbols(outcome.unresolved), **about)]
    return [Finding("CO304", f"the server cannot start: {outcome.message}", predicted=outcome.message, **about)]


def _shown(binding: Binding) -> str:
    name = demangle(binding.symbol)
    return name + (f" (version {binding.version})" if binding.version else "")


def _symbols(bindings: tuple[Binding, ...]) -> tuple[str, ...]:
    lines = [f"undefined: {_shown(b)} (referenced by {b.referrer})" for b in bindings[:SHOWN]]
    if len(bindings) > SHOWN:
        lines.append(f"... and {len(bindings) - SHOWN} more")
    return tuple(lines)


def _trace(search) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    return tuple(f"tried {a.path} ({a.source}: {a.result})" for a in search.attempts
                 if "/glibc-hwcaps/" not in a.path and "/tls/" not in a.path)
