"""CO202, CO301-CO306, CO308, CO501, CO502, CO504, CO505: will each library load, and will the server find
its entry points? With the linker model's outcomes, a dependency of another TensorRT or CUDA major
(customops.rules.versions.major_mismatches, whose emitters make CO501 and CO502) that is then not found is one
CO501/CO502, not a CO302 advising to ship it. Without them (facts only), CO306, CO501 and CO502 come from the
libraries' version needs and the container's facts."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from customops.codes import Code
from customops.elf.cache import ElfReader
from customops.elf.demangle import demangle
from customops.emitters import emits
from customops.errors import ElfError
from customops.findings import Finding, amended
from customops.frameworks import ONNXRUNTIME
from customops.linker.types import (
    NOT_LOADABLE,
    Binding,
    CallOutcome,
    CallStatus,
    ConstructorCall,
    Failure,
    FailureKind,
    Search,
    SearchAttempt,
    StepOutcome,
    StepStatus,
)
from customops.rules import constructors
from customops.rules.context import RuleContext
from customops.rules.framework_drift import framework_of, rebuild_against
from customops.rules.needed import needed_not_found
from customops.rules.version_nodes import preload_bringing, version_missing, version_not_defined
from customops.rules.versions import Mismatch, from_facts, major_mismatch, major_mismatches
from customops.triton.plan import Context, LoadedBy, LoadPlan, LoadStep, Purpose

SHOWN = 20
CPYTHON = re.compile(rb"^_?Py[A-Z_]")  # the Python C API's naming: PyModule_Create2, _Py_NoneStruct, Py_BuildValue
LFS_HINT = "Run `git lfs pull` (or fetch LFS objects in CI: actions/checkout with lfs: true)."
LOAD_FAILED = "unable to load shared library: "  # the core's prefix to dlerror() (shared_library.cc)
UNREADABLE_HINT = ("Make the file readable by the server's user, and every directory above it searchable "
                   "(chmod a+r the file, a+x the directories).")
NEEDS_PREDICTION = False  # without one it reports what the facts tell


def check(rules: RuleContext) -> list[Finding]:
    if rules.prediction is None:
        return from_facts(rules)
    plan, prediction, ctx, reader = rules.plan, rules.prediction, rules.triton, rules.reader
    findings: list[Finding] = []
    facts = ctx.container.facts
    mismatches = {step: _mismatches(step, reader, facts) for step in (*plan.preloads, *plan.dlopens)}
    for step, outcome in rules.outcomes:
        assert isinstance(outcome, StepOutcome)
        findings += _step(step, outcome, ctx, reader, mismatches.get(step, []), plan, rules.files.backends)
    startup = prediction.startup
    if startup is not None and startup.status in (StepStatus.FATAL, StepStatus.CRASH):
        findings += _startup(startup, rules, mismatches)
    elif startup is not None:  # preloads are bound lazily at exec: their missing functions fail when called
        for step in plan.preloads:
            failures = tuple(b for b in startup.lazy_failures if b.referrer == step.path)
            findings += lazily_undefined(step, failures, constructors.undecided(startup, step.path))
    covered = {(f.library, f.code) for f in findings if f.code in (Code.CO501, Code.CO502)}
    reached = {id(step) for step, _ in rules.outcomes}
    dies = startup is not None and startup.status in (StepStatus.FATAL, StepStatus.CRASH)
    for step, found in mismatches.items():  # a mismatched dependency that is found (shipped along) still is one
        if dies and not step.preload and id(step) not in reached:
            continue  # a dlopen the dead server never makes: the run modelled as if it started reports it
        findings += [major_mismatch(m, f"{step.path} needs {m.needed} ({m.needs}); the container has {m.has}",
                                    **_about(step)) for m in found if (step.path, m.code) not in covered]
    return findings


def _mismatches(step: LoadStep, reader: ElfReader, facts) -> list[Mismatch]:
    try:
        return major_mismatches(reader.read(step.host_path), facts)
    except ElfError:
        return []


def _mismatch_not_found(missing: Search, mismatches: list[Mismatch], message: str, what: str,
                        plan: LoadPlan | None, about: dict) -> Finding | None:
    """CO501/CO502 for a dependency of another major than the container's that is then not found: one finding
    saying both, with the runtime's message and the search (not a CO302 advising to ship that dependency)."""
    match = next((m for m in mismatches if m.needed == missing.name), None)
    if match is None:
        return None
    return major_mismatch(match, f"{what} needs {match.needed} ({match.needs}), which is not found: the "
                                 f"container has {match.has}", predicted=message, evidence=search_trace(missing, plan),
                          **about)


@emits(Code.CO305)
def lazily_undefined(step: LoadStep, failures: tuple[Binding, ...], undecided: str = "",
                     process: str = "the server") -> list[Finding]:
    """Functions a lazily bound library calls through its PLT that nothing defines, and that no constructor is
    known to call: the first call kills the process (`undecided`: why a constructor might call one at load)."""
    if not failures:
        return []
    first = failures[0]
    return [Finding(
        Code.CO305, f"{_what(step)}: {len(failures)} function{' is' if len(failures) == 1 else 's are'} defined "
                    f"nowhere; the first call of {_shown(first)} kills {process}",
        symbol=first.symbol.decode("utf-8", "replace"),
        predicted=f"symbol lookup error: {first.referrer}: undefined symbol: {first.symbol.decode()}",
        evidence=(*_symbols(failures), *((undecided,) if undecided else ())), **_about(step))]


def _about(step: LoadStep) -> dict:
    return {"model": step.model, "library": step.path, "file": step.host_path}


def _what(step: LoadStep) -> str:
    return f"{step.purpose} {step.path}" + (f" of model '{step.model}'" if step.model else "")


def _step(step: LoadStep, outcome: StepOutcome, ctx: Context, reader: ElfReader,
          mismatches: list[Mismatch] | None = None, plan: LoadPlan | None = None,
          backends: Mapping[str, tuple[str, ...]] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    if outcome.status == StepStatus.IGNORED:  # a preload ld.so could not map: only a warning to ld.so
        emit, hint = not_loadable if _kind(outcome) == FailureKind.WRONG_CLASS else unusable_file, ""
        reason = "is not a loadable ELF file for this container" if emit is not_loadable else "does not exist"
        if outcome.problem is not None:
            emit, reason, hint = _problem(outcome.problem)
        findings.append(emit(f"LD_PRELOAD entry {step.path} {reason}; ld.so ignores it and the server starts "
                             "without it", predicted=outcome.message, hint=hint, **_about(step)))
    elif outcome.status in (StepStatus.FAILED, StepStatus.CRASH):
        findings.append(_as_the_core_says(step, failure_finding(step, outcome, ctx, reader, mismatches or [], plan,
                                                                  backends)))
    findings += lazily_undefined(step, outcome.lazy_failures)
    for call in outcome.calls:
        if call.status == CallStatus.OK:
            continue
        if step.purpose is Purpose.BACKEND_LIBRARY:
            findings.append(missing_entry_point(step, call))
        elif call.symbol in ONNXRUNTIME.entry_points:
            findings.append(missing_register_custom_ops(step, call))
    if step.loader is LoadedBy.TENSORRT and step.purpose is Purpose.PLUGIN_LIBRARY and findings:
        findings = [_trt_logged(f) for f in findings]
    return findings


def _as_the_core_says(step: LoadStep, finding: Finding) -> Finding:
    """A backend library the core cannot dlopen: its message is the core's (shared_library.cc
    OpenLibraryHandle), with dlerror() after its prefix."""
    if (step.purpose is not Purpose.BACKEND_LIBRARY or not finding.predicted
            or finding.predicted.startswith(LOAD_FAILED)):
        return finding
    return amended(finding, predicted=LOAD_FAILED + finding.predicted)


def _trt_logged(finding: Finding) -> Finding:
    return amended(finding, evidence=(*finding.evidence, "the TensorRT backend only logs this failure; the model then "
                                      "fails to deserialize (getPluginCreator could not find plugin ...)"))


def _kind(outcome: StepOutcome) -> FailureKind | None:
    return outcome.failure.kind if outcome.failure is not None else None


def _problem(problem: Failure) -> tuple[Emit, str, str]:
    """(emitter, what the file is, fix) for a file the linker model could open or map only as something else."""
    if problem.kind == FailureKind.GIT_LFS_POINTER:
        return not_loadable, "is a Git LFS pointer, not the library", LFS_HINT
    if problem.kind == FailureKind.DIRECTORY:
        return unusable_file, "is a directory, not a library file", "Rename or remove the directory."
    return unusable_file, "cannot be read: permission denied", UNREADABLE_HINT


def failure_finding(step: LoadStep, outcome: StepOutcome, ctx: Context, reader: ElfReader,
                    mismatches: list[Mismatch] | None = None, plan: LoadPlan | None = None,
                    backends: Mapping[str, tuple[str, ...]] | None = None) -> Finding:
    """The finding for one step the linker model predicts to fail, from its typed failure. `backends`: the
    container's backend directories and the names in each (FileFacts.backends)."""
    message = outcome.message
    if outcome.problem is not None:  # it exists: what it is, rather than "does not exist" or "not ELF"
        emit, reason, hint = _problem(outcome.problem)
        subject = _what(step) if outcome.problem.name == step.path else (
            f"{outcome.problem.name}, which {_what(step)} needs,")
        return emit(f"{subject} {reason}", predicted=message, hint=hint,
                    evidence=(f"checked: {ctx.source(outcome.problem.name)}",), **_about(step))
    if not ctx.exists(step.path):
        suggestion = ctx.suggest_mount(step.path) if step.path.startswith("/") else None
        hint = (f"{suggestion}: a file with the same path tail is in the checkout" if suggestion else "")
        return unusable_file(f"{_what(step)} does not exist in the container"
                             + (f"; with {suggestion} it would" if suggestion else ""), predicted=message,
                             evidence=(f"checked: {ctx.source(step.path)}",),  # the message names its container path
                             hint=hint, **_about(step))
    failure = outcome.failure
    if failure is not None and failure.kind == FailureKind.MISSING_VERSION:
        return version_not_defined(f"{_what(step)} needs", failure, message, _about(step))
    if outcome.unresolved:
        first = outcome.unresolved[0]
        found = framework_of(first, outcome.request, ctx, reader, backends or {})
        if found:
            framework, where, beside = found
            return framework_drift(f"{_what(step)} was built against another version of {framework}: "
                                   f"{_count(len(outcome.unresolved))} missing there, first {_shown(first)}",
                                   symbol=first.symbol.decode("utf-8", "replace"), version=first.version,
                                   predicted=message, evidence=_symbols(outcome.unresolved),
                                   hint=rebuild_against(step, framework, where, beside, ctx), **_about(step))
        cpython = [b for b in outcome.unresolved if CPYTHON.match(b.symbol)]
        if cpython:
            return _cpython(step, outcome, cpython)
        return undefined_at_load(f"{_what(step)}: {len(outcome.unresolved)} undefined symbol(s), first "
                                 f"{_shown(first)}", symbol=first.symbol.decode("utf-8", "replace"),
                                 version=first.version, predicted=message, evidence=_symbols(outcome.unresolved),
                                 **_about(step))
    missing = outcome.not_found
    kind = _kind(outcome)
    if missing is not None and (kind not in NOT_LOADABLE or kind == FailureKind.WRONG_CLASS):
        mismatch = _mismatch_not_found(missing, mismatches or [], message, _what(step), plan, _about(step)) \
            if missing.requested_by == step.path else None
        if mismatch is not None:
            return mismatch
        emit = not_loadable if kind == FailureKind.WRONG_CLASS else needed_not_found
        return emit(f"{_what(step)}: {missing.name} (needed by {missing.requested_by}) is not found",
                    predicted=message, evidence=search_trace(missing, plan), **_about(step))
    if kind in NOT_LOADABLE:
        return not_loadable(f"{_what(step)} cannot be loaded: {message}", predicted=message, **_about(step))
    if kind == FailureKind.LOOKUP_ASSERTION:
        return version_missing(f"{_what(step)} crashes ld.so: a versioned symbol's provider has no version "
                               "information", predicted=message, **_about(step))
    return undefined_at_load(f"{_what(step)} fails to load: {message}", predicted=message, **_about(step))


def _count(n: int) -> str:
    """ "1 of its symbols is", "2 of its symbols are"."""
    return f"{n} of its symbols {'is' if n == 1 else 'are'}"


def _cpython(step: LoadStep, outcome: StepOutcome, cpython: list[Binding]) -> Finding:
    """CO304 whose missing symbols are the Python C API's (named Py*/_Py*, which no library in the server
    defines: nothing it loads links libpython): a Python extension module, which only an interpreter loads."""
    first = cpython[0]
    referrers = sorted({b.referrer for b in cpython})
    own = referrers == [step.path]
    total = len(outcome.unresolved)
    whose = ("CPython's" if total == 1 else "all CPython's" if len(cpython) == total
             else f"{len(cpython)} of them CPython's")
    message = (f"{_what(step)}: {total} undefined symbol{'' if total == 1 else 's'}, {whose} (the Python C API, "
               f"which nothing in the server defines), first {_shown(first)}"
               + ("" if own else f", referenced by {', '.join(referrers)}"))
    hint = ("It is a Python extension module, not a framework op library: it must be loaded by a Python interpreter "
            "(imported from Python), which defines these symbols. Give the server the op library built without its "
            "Python bindings." if own else
            f"{', '.join(referrers)} {'is' if len(referrers) == 1 else 'are'} built for a Python interpreter, which "
            "defines these symbols: link the op library without its Python bindings, or preload the container's "
            "libpython ([host] preload in customops.toml).")
    return undefined_at_load(message, symbol=first.symbol.decode("utf-8", "replace"), version=first.version,
                             predicted=outcome.message, evidence=_symbols(outcome.unresolved), hint=hint,
                             **_about(step))


def _startup(outcome: StepOutcome, rules: RuleContext, mismatches: dict | None = None) -> list[Finding]:
    plan = rules.plan
    called = constructors.first_call(outcome)
    if called is not None:
        return _constructor_death(outcome, rules, called)
    missing = outcome.not_found
    preload = next((s for s in plan.preloads if missing and s.path == missing.requested_by), None)
    about = _about(preload) if preload else {}
    if missing is not None:
        mismatch = _mismatch_not_found(
            missing, (mismatches or {}).get(preload, []), outcome.message,
            f"the server cannot start: {missing.requested_by} (loaded through LD_PRELOAD)", plan, about) \
            if preload is not None else None
        if mismatch is not None:
            return [mismatch]
        return [needed_not_found(f"the server cannot start: {missing.name} (needed by {missing.requested_by}, "
                                 "loaded through LD_PRELOAD) is not found", predicted=outcome.message,
                                 evidence=search_trace(missing, plan), **about)]
    failure = outcome.failure
    if failure is not None and failure.kind == FailureKind.MISSING_VERSION:  # ld.so exits 1 before any model
        by = preload_bringing(failure.required_by or "", outcome, plan)
        subject = f"the server cannot start: {_what(by) if by else failure.required_by} needs"
        return [version_not_defined(subject, failure, outcome.message, _about(by) if by else {})]
    if outcome.unresolved:
        first = outcome.unresolved[0]
        return [undefined_at_load(f"the server cannot start: {_shown(first)} is defined nowhere",
                                  symbol=first.symbol.decode("utf-8", "replace"), predicted=outcome.message,
                                  evidence=_symbols(outcome.unresolved), **about)]
    return [undefined_at_load(f"the server cannot start: {outcome.message}", predicted=outcome.message, **about)]


def _constructor_death(outcome: StepOutcome, rules: RuleContext, called: ConstructorCall) -> list[Finding]:
    """A preload's constructor calls a function defined nowhere: ld.so's _dl_init makes that first call before
    main, so the server stops at start; the library's other such functions stay first-call failures. Where a
    framework library of the container owns the function's namespace, the library was built against another
    version of it (CO504's facts): the message says so, and the fix names the version to build against."""
    step = next((s for s in rules.plan.preloads if s.path == called.binding.referrer), None)
    symbol = called.binding
    where, hint, registers = constructors.built_against(rules, step, symbol)
    finding = undefined_at_load(
        f"the server cannot start: {constructors.constructor(called)} of {_what(step) if step else symbol.referrer}"
        f" calls {_shown(symbol)} as it loads, {where}", symbol=symbol.symbol.decode(
            "utf-8", "replace"), version=symbol.version, predicted=outcome.message,
        evidence=(constructors.path(called), *registers, constructors.why(called, _shown(symbol)),
                  *_symbols((symbol,))), **hint, **(_about(step) if step is not None else {}))
    return [finding, *(lazily_undefined(step, constructors.not_first(outcome, called)) if step else [])]


def _shown(binding: Binding) -> str:
    name = demangle(binding.symbol)
    return name + (f" (version {binding.version})" if binding.version else "")


def _symbols(bindings: tuple[Binding, ...]) -> tuple[str, ...]:
    lines = [f"undefined: {_shown(b)} (referenced by {b.referrer})" for b in bindings[:SHOWN]]
    if len(bindings) > SHOWN:
        lines.append(f"... and {len(bindings) - SHOWN} more")
    return tuple(lines)


def search_trace(search: Search, plan: LoadPlan | None = None) -> tuple[str, ...]:
    """Every path tried, with where the directory came from: an LD_LIBRARY_PATH entry says why launch sets
    it (the plan's reason), since it applies to every library of the server, not only to those it is for."""
    def search_list(attempt: SearchAttempt) -> str:
        if attempt.search_list == "LD_LIBRARY_PATH" and plan is not None:
            return f"{attempt.search_list}, {plan.library_path_reason(attempt.path)}"
        return attempt.search_list

    return tuple(f"tried {a.path} ({search_list(a)}: {a.text})" for a in search.attempts
                 if "/glibc-hwcaps/" not in a.path and "/tls/" not in a.path)


# The emitters: a finding of each of these codes is made by its function, whichever outcome decided it.
Emit = Callable[..., Finding]


@emits(Code.CO202)
def missing_entry_point(step: LoadStep, call: CallOutcome) -> Finding:
    """A backend library that does not export an entry point the core looks up with dlsym."""
    return Finding(
        Code.CO202, f"backend library {step.path} does not export {call.symbol} (C linkage, default visibility)",
        symbol=call.symbol,  # core/src/shared_library.cc GetEntrypoint, with dlerror()'s text
        predicted=f"unable to find required entrypoint '{call.symbol}' in shared library: {call.message}",
        **_about(step))


@emits(Code.CO301)
def unusable_file(message: str, **fields: Any) -> Finding:
    """A library that does not exist where the server opens it, is a directory, or cannot be read."""
    return Finding(Code.CO301, message, **fields)


@emits(Code.CO303)
def not_loadable(message: str, **fields: Any) -> Finding:
    """A file that is no ELF shared object of the container's class and machine (a Git LFS pointer, too)."""
    return Finding(Code.CO303, message, **fields)


@emits(Code.CO304)
def undefined_at_load(message: str, **fields: Any) -> Finding:
    """Symbols bound at load that nothing in the library's scope defines, or another failure of dlopen."""
    return Finding(Code.CO304, message, **fields)


@emits(Code.CO308)
def missing_register_custom_ops(step: LoadStep, call: CallOutcome) -> Finding:
    """An ONNX Runtime op library that does not export RegisterCustomOps, which the backend dlsym()s."""
    return Finding(
        Code.CO308, f"op library {step.path} of model '{step.model}' does not export RegisterCustomOps",
        symbol=call.symbol, predicted=f"Failed to get symbol RegisterCustomOps with error: {step.path}: "
                                      "undefined symbol: RegisterCustomOps", **_about(step))


@emits(Code.CO504)
def framework_drift(message: str, **fields: Any) -> Finding:
    """A library whose undefined symbols are of the container's framework library: built against another
    version of it (customops.rules.framework_drift)."""
    return Finding(Code.CO504, message, **fields)
