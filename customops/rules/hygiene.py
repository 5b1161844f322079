"""CO307, CO601-CO603: LD_PRELOAD entries ld.so will misread or that reach processes that do not need them,
libraries others could replace, and libraries from outside the repository and the image."""

from __future__ import annotations

import os
import stat

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.rules.context import RuleContext
from customops.triton.manifest import CONTROL

NEEDS_PREDICTION = False


def check(ctx: RuleContext) -> list[Finding]:
    return unusable_preloads(ctx) + preload_reaches_stubs(ctx) + from_elsewhere(ctx) + writable(ctx)


@emits(Code.CO307)
def unusable_preloads(ctx: RuleContext) -> list[Finding]:
    """LD_PRELOAD entries ld.so splits, resolves against the working directory, or ignores (secure execution)."""
    findings = []
    secure = ctx.files.setuid_server
    for step in ctx.plan.preloads:
        problem = None
        if " " in step.path or ":" in step.path:
            problem = "contains a space or a colon, which ld.so treats as separators"
        elif CONTROL.search(step.path):
            problem = "contains a control character, which customops refuses in the paths it exports (launch, env)"
        elif not step.path.startswith("/"):
            problem = "is relative: ld.so resolves it against whatever directory the server starts in"
        elif secure:
            problem = ("names a path, which ld.so ignores for a set-user-ID server (secure execution loads only "
                       "set-user-ID libraries from the standard directories, by name)")
        if problem:
            findings.append(Finding(Code.CO307, f"LD_PRELOAD entry {step.path!r} {problem}", model=step.model,
                                    library=step.path, file=step.host_path))
    return findings


@emits(Code.CO602)
def preload_reaches_stubs(ctx: RuleContext) -> list[Finding]:
    """LD_PRELOAD while the server starts Python backend stubs, which inherit it."""
    plan = ctx.plan
    if not plan.preloads:
        return []
    python_models = [name for name, _ in plan.python_models]  # the Python backend's and the Python-based backends'
    if not python_models:
        return []
    count = f"{len(plan.preloads)} librar{'y' if len(plan.preloads) == 1 else 'ies'}"
    return [Finding(
        Code.CO602, f"LD_PRELOAD ({count}) is inherited by the Python backend stubs of "
                    f"{', '.join(sorted(python_models))}",
        evidence=tuple(f"preloaded: {s.path}" for s in plan.preloads), library=plan.preloads[0].path,
        file=plan.preloads[0].host_path)]


@emits(Code.CO601)
def writable(ctx: RuleContext) -> list[Finding]:
    """Loaded libraries, and their directories, writable by group or others (the modes read before the rules
    ran); a sticky directory is not."""
    findings = []
    for step in ctx.steps:
        host = step.host_path
        for path in (host, os.path.dirname(host)):
            mode = ctx.files.modes.get(path)
            if mode is None:
                continue
            if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (stat.S_ISDIR(mode) and mode & stat.S_ISVTX):
                who = "others" if mode & stat.S_IWOTH else "group"
                findings.append(Finding(Code.CO601, f"{path} is writable by {who} ({stat.filemode(mode)}); whoever "
                                                    "can write it runs code in the server", model=step.model,
                                        library=step.path, file=step.host_path))
    return findings


@emits(Code.CO603)
def from_elsewhere(ctx: RuleContext) -> list[Finding]:
    """Libraries neither in a checkout, in a mounted directory, nor in the container's library directories."""
    triton = ctx.triton
    target = triton.container.target
    if target is None:
        return []
    trusted = tuple(d.rstrip("/") + "/" for d in (*target.system_dirs, "/opt/tritonserver", "/usr/local"))
    checkouts = tuple(c.rstrip("/") + "/" for c in triton.checkouts)
    findings = []
    for step in ctx.steps:
        source = os.path.abspath(step.host_path)
        if step.path.startswith(trusted) or source.startswith(checkouts) or any(
                step.path.startswith(c.rstrip("/") + "/") for c, _h in triton.mounts):
            continue
        findings.append(Finding(Code.CO603, f"{step.path} is loaded from outside the model repository and the "
                                            "container's library directories", model=step.model, library=step.path,
                                file=step.host_path))
    return findings
