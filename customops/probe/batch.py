"""Several groups of op libraries probed in one sandbox, the framework imported once.

A `check --probe` of N Torch or TensorFlow op libraries loads each one alone and all of them together: N + 1
loads, each of which used to start an interpreter and import the framework (seconds) to load a library
(milliseconds). The loader script (customops/probe/child_forks.py) imports the framework once in the sandbox and
forks a fresh process per group, so each group still loads in a process of its own, as before; this module
turns what it reports into one result per library per group, exactly as customops.probe.frameworks.probe_group
reports a group it probes alone (tests/test_probe_batch.py holds the two equal). Where the loader cannot keep
groups apart, or a library kills or stops it, the groups it did not end are probed the reference way.
"""

from __future__ import annotations

import json
import os
import sys

from customops.errors import printable
from customops.frameworks import TENSORRT
from customops.probe import sandbox
from customops.probe.frameworks import (
    LOADER,
    needed_files,
    needs_args,
    probe_group,
    runtime_files,
    settled_runtime,
    unavailable,
)
from customops.probe.needs import Needs
from customops.probe.reported import Reported
from customops.probe.results import ProbeResult, ProbeStatus

Results = tuple[ProbeResult, ...]


def probe_groups(groups: tuple[tuple[str, ...], ...], python: str | None = None, timeout: float = 60,
                 memory_mb: int = 4096, framework: str = "none", runtime: str | None = None,
                 needs: Needs | None = None) -> tuple[Results, ...]:
    """probe_group's results for each group, from one sandbox that imports the framework once. TensorRT's probe
    (against customops' stand-in, which imports nothing) and a single group go through probe_group."""
    if len(groups) < 2 or framework == TENSORRT.probe:
        return tuple(probe_group(group, python, timeout, memory_mb, framework, runtime, needs) for group in groups)
    paths = tuple(tuple(os.path.abspath(lib) for lib in group) for group in groups)
    python = python or sys.executable
    runtime, missing = settled_runtime(framework, runtime, python)
    if missing is not None:
        return tuple(tuple(ProbeResult(p, ProbeStatus.UNAVAILABLE, missing, None, "", ()) for p in group)
                     for group in paths)
    files = tuple(dict.fromkeys(p for group in paths for p in group))
    joined = [word for index, group in enumerate(paths) for word in (*(["--"] if index else []), *group)]
    given = needs_args(needs, (*files, *((runtime,) if runtime else ())))
    run = sandbox.run(python, LOADER, [framework, runtime or "", *given, "--groups", f"{timeout:g}", *joined],
                      timeout * (len(groups) + 1), memory_mb,
                      ((*files, *runtime_files(runtime)) if runtime else files) + needed_files(needs, given))
    every = unavailable(run, timeout, files, python, runtime or framework)
    if every is not None:
        by_path = {r.library: r for r in every}
        return tuple(tuple(by_path[p] for p in group) for group in paths)
    # a group the loader did not end (it stopped batching, or a library killed or stopped it) is probed again,
    # in a sandbox of its own
    return tuple(Reported(each, timeout).each(group) if each is not None else
                 probe_group(group, python, timeout, memory_mb, framework, runtime, needs)
                 for each, group in zip(split(run, len(paths)), paths, strict=True))


def split(run: sandbox.Run, groups: int) -> list[sandbox.Run | None]:
    """One Run per group, as if each had been its own sandbox: the loader's messages from before the groups (the
    framework's version), the group's lines, its status, output and files; None for a group it did not end. Only
    the loader writes to the result channel once the groups begin (a group's process has closed it)."""
    first = next((i for i, m in enumerate(run.messages) if m[0] in ("G", "ENDED", "UNBATCHED")), len(run.messages))
    common = run.messages[:first]
    ended = {m[1]: m[2:] for m in run.messages[first:] if m[0] == "ENDED" and len(m) == 6}
    runs: list[sandbox.Run | None] = []
    for index in range(groups):
        if str(index) not in ended:
            runs.append(None)
            continue
        status, output, finished, files = ended[str(index)]
        lines = tuple(m[2:] for m in run.messages[first:] if m[0] == "G" and len(m) > 2 and m[1] == str(index))
        code = int(status) if status.lstrip("-").isdigit() else None
        runs.append(sandbox.Run((*common, *lines, *((("END",),) if finished else ())), code, status == "timeout",
                                output, _names(files), run.containment))
    return runs


def _names(listing: str) -> tuple[str, ...]:
    """The files a group left, as the loader listed them (JSON), printable."""
    try:
        names = json.loads(listing)
    except (ValueError, RecursionError):
        return ()
    return tuple(printable(n) for n in names if isinstance(n, str)) if isinstance(names, list) else ()
