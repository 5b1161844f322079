"""CO302, CO304, CO306, CO311 of the Python backend's stub processes: will each model's stub start with the
environment the backend gives it, is its Python the environment's, and will the extension modules the model's code
imports load in it? What the user sees of a stub that cannot start is the core's `Stub process '<instance>' is not
healthy.` after ten seconds; ld.so's own message goes to the server's stderr, and is the one predicted here."""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Any

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding, amended
from customops.linker.types import CallStatus, FailureKind, StepOutcome, StepStatus
from customops.rules import loading
from customops.rules.context import RuleContext
from customops.rules.needed import needed_not_found
from customops.rules.version_nodes import version_not_defined
from customops.triton.plan import Context
from customops.triton.python_modules import version_of
from customops.triton.python_stub import StubProcess, StubRun
from customops.triton.releases import gcc_defining

NEEDS_PREDICTION = True
LIBSTDCXX = "libstdc++.so.6"
DEATHS = (StepStatus.FATAL, StepStatus.CRASH)
ASSUMED = "the server starts (what stops it is reported on its own)"


def check(rules: RuleContext) -> list[Finding]:
    """Each stub's findings. A stub is started by a running server: where the server itself dies at start, they are
    found assuming it starts, and a stub dying of what kills the server (a preload both inherit) is not said again."""
    server = rules.prediction.startup if rules.prediction is not None else None
    dead = server if server is not None and server.status in DEATHS else None
    findings: list[Finding] = []
    for run in rules.stubs:
        startup = run.prediction.startup
        if dead is not None and startup is not None and startup.message == dead.message:
            continue
        found = _stub(run, startup, rules)
        findings += [amended(f, assumes=ASSUMED) for f in found] if dead is not None else found
    return findings


def _stub(run: StubRun, startup: StepOutcome | None, rules: RuleContext) -> list[Finding]:
    stub = run.stub
    mismatch = _python_mismatch(run)
    if startup is not None and startup.status in DEATHS:
        missing = startup.not_found
        if mismatch is not None and missing is not None and missing.name == run.libpython:
            return [amended(mismatch, predicted=startup.message)]
        return [_startup(run, startup)]
    if mismatch is not None:
        return [mismatch]
    findings: list[Finding] = []
    chains = dict(run.chains)
    ctx = _seen_by(rules.triton, stub)
    for step, outcome in run.outcomes:
        if step.path in run.optional:  # its ImportError is the code's to handle (a note says it fails)
            continue
        about = {"evidence": (f"imported by {' -> '.join(chains.get(step.path, ()))}",)}
        if outcome.status in (StepStatus.FAILED, StepStatus.CRASH):
            found = loading.failure_finding(step, outcome, ctx, rules.reader)
            findings.append(amended(found, predicted=f"ImportError: {outcome.message}",
                                    evidence=(*about["evidence"], *found.evidence)))
            continue
        for call in outcome.calls:
            if call.status is not CallStatus.OK:
                findings.append(loading.undefined_at_load(
                    f"extension module {step.path} of model '{stub.model}' does not define {call.symbol}: "
                    "it is not a module of this name", symbol=call.symbol, model=stub.model, library=step.path,
                    file=step.host_path, predicted=f"ImportError: dynamic module does not define module export "
                                                   f"function ({call.symbol})", **about))
        findings += loading.lazily_undefined(step, outcome.lazy_failures, process=f"the stub of '{stub.model}'")
    return findings


def _seen_by(ctx: Context, stub: StubProcess) -> Context:
    """The container as the stub sees it: with its execution environment unpacked where the backend unpacks it."""
    target = ctx.container.target
    if target is None or not stub.mounts:
        return ctx
    return replace(ctx, container=replace(ctx.container, target=target.with_mounts((*target.mounts, *stub.mounts))))


def _startup(run: StubRun, startup: StepOutcome) -> Finding:
    """The stub cannot start: what ld.so says, as for the server's own start, with the stub as the program."""
    stub = run.stub
    subject = f"the stub process of model '{stub.model}' cannot start"
    about: dict[str, Any] = {"model": stub.model, "library": stub.program, "file": stub.config,
                             "evidence": (_unhealthy(stub),)}
    missing = startup.not_found
    if missing is not None:
        return needed_not_found(f"{subject}: {missing.name} (needed by {missing.requested_by}) is not found",
                                predicted=startup.message, **{**about, "evidence": (
                                    *loading.search_trace(missing), _unhealthy(stub))})
    failure = startup.failure
    if failure is not None and failure.kind == FailureKind.MISSING_VERSION:
        finding = version_not_defined(f"{subject}: {failure.required_by or stub.program} needs", failure,
                                      startup.message, {k: v for k, v in about.items() if k != "evidence"})
        return amended(finding, evidence=(_unhealthy(stub),), hint=_newer_libstdcxx(stub, failure.name,
                                                                                     failure.version or ""))
    return loading.undefined_at_load(f"{subject}: {startup.message}", predicted=startup.message, **about)


def _unhealthy(stub: StubProcess) -> str:
    return f"the message above is on the server's stderr; after 10 s Triton reports: {stub.unhealthy}"


def _newer_libstdcxx(stub: StubProcess, provider: str, version: str) -> str:
    """The fix where the environment's own libstdc++ lacks the node: it comes first on the stub's library path."""
    env = stub.environment
    if env is None or posixpath.basename(provider) != LIBSTDCXX or not provider.startswith(env.directory + "/"):
        return ""
    gcc = gcc_defining(version)
    wanted = f"'libstdcxx-ng>={gcc.split('.')[0]}'" if gcc else "libstdcxx-ng"
    return (f"The environment's {env.lib}/{LIBSTDCXX} comes first on the stub's LD_LIBRARY_PATH and is older than "
            f"the stub's: in the environment, `conda install -c conda-forge {wanted}` (GCC {gcc or 'newer'}'s "
            f"libstdc++ defines {version}) and pack it again; or delete {LIBSTDCXX}* from its lib/ so that the "
            "container's is used.")


def _python_mismatch(run: StubRun) -> Finding | None:
    stub = run.stub
    wanted = version_of(run.libpython or "")
    has = run.environment_python
    if stub.environment is None or wanted is None or has is None or has == wanted:
        return None
    return python_mismatch(
        f"model '{stub.model}': the stub {stub.program} runs Python {wanted} (it links {run.libpython}), and the "
        f"execution environment {stub.environment.path} is made for Python {has}", model=stub.model,
        library=stub.program, file=stub.config, predicted=None,
        evidence=(f"the stub's interpreter looks for lib/python{wanted}; the environment has lib/python{has}",),
        hint=f"Build the environment with Python {wanted} (conda create -n env python={wanted}, then conda-pack), "
             f"or put a stub built for Python {has} in the model's directory.")


@emits(Code.CO311)
def python_mismatch(message: str, **fields: Any) -> Finding:
    """A stub linked against one Python and an execution environment made for another."""
    return Finding(Code.CO311, message, **fields)
