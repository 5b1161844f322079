"""CO307 and CO601: LD_PRELOAD entries ld.so will misread, and libraries others could replace."""

from __future__ import annotations

import os
import stat

from customops.findings import Finding
from customops.plan import Context, LoadPlan
from customops.scanners.linker import Prediction


def check(plan: LoadPlan, prediction: Prediction | None, ctx: Context) -> list[Finding]:
    findings = []
    for step in plan.preloads:
        problem = None
        if " " in step.path or ":" in step.path:
            problem = "contains a space or a colon, which ld.so treats as separators"
        elif not step.path.startswith("/"):
            problem = "is relative: ld.so resolves it against whatever directory the server starts in"
        if problem:
            findings.append(Finding("CO307", f"LD_PRELOAD entry {step.path!r} {problem}", model=step.model,
                                    library=step.path, file=step.source))
    for step in (*plan.preloads, *plan.dlopens):
        host = step.source
        for path in (host, os.path.dirname(host)):
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue
            if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (stat.S_ISDIR(mode) and mode & stat.S_ISVTX):
                findings.append(Finding("CO601", f"{path} is writable by {'others' if mode & stat.S_IWOTH else 'group'}"
                                                 f" ({stat.filemode(mode)}); whoever can write it runs code in the "
                                                 "server", model=step.model, library=step.path, file=step.source))
    return findings
