"""What one run of a loader script reports about each of its libraries (customops/probe/child_load.py's
protocol), shared by the framework probes (customops.probe.frameworks, .batch) and TensorRT's stand-in
(customops.probe.tensorrt_standin)."""

from __future__ import annotations

import signal
from typing import Any

from customops.errors import printable
from customops.probe import sandbox
from customops.probe.results import ProbeResult, ProbeStatus


class Reported:
    """What one run of the loader script says about each of its libraries."""

    def __init__(self, run: sandbox.Run, timeout: float) -> None:
        self.run = run
        self.timeout = timeout
        self.version = printable(tagged(run.messages, "VERSION") or "")
        self.builtin = tuple(printable(tagged(run.messages, "BUILTIN") or "").split())

    def result(self, library: str, status: ProbeStatus, message: str, signum: int | None = None,
               **found: Any) -> ProbeResult:
        return ProbeResult(library, status, printable(message), signum, self.run.output, self.run.files,
                           framework_version=self.version, containment=self.run.containment, **found)

    def each(self, paths: tuple[str, ...]) -> tuple[ProbeResult, ...]:
        """A result per library, in order: the loader reports each one, and stops at the first failure."""
        results: list[ProbeResult] = []
        registered: list[str] = []
        for tag, *fields in self.run.messages:
            if len(results) == len(paths):
                break
            current = paths[len(results)]
            if tag == "REGISTERED" and len(fields) == 2 and fields[0] == current:
                registered.append(printable(fields[1]))
            elif tag == "LOADED" and fields == [current]:
                results.append(self.result(current, ProbeStatus.LOADED, "", registered=tuple(sorted(set(registered))),
                                           builtin_namespaces=self.builtin))
                registered = []
            elif tag == "FAILED" and len(fields) == 1:
                results.append(self.result(current, ProbeStatus.FAILED, fields[0]))
                break
        loaded_last = not results or results[-1].status is ProbeStatus.LOADED
        if len(results) < len(paths) and loaded_last:
            results.append(self.ended(paths[len(results)], after_loaded=False))
        elif results and loaded_last and not self.run.finished:
            results[-1] = self.ended(paths[-1], after_loaded=True)
        not_loaded = "an earlier library failed"
        return (*results, *(self.result(p, ProbeStatus.NOT_LOADED, not_loaded) for p in paths[len(results):]))

    def ended(self, library: str, after_loaded: bool) -> ProbeResult:
        """The library that was loading (or was reported loaded last) when the loader ended without finishing."""
        then = "was reported loaded, then " if after_loaded else ""
        if self.run.timed_out:
            return self.result(library, ProbeStatus.TIMED_OUT,
                               f"{then}still running after {self.timeout:g} s" if after_loaded
                               else f"still loading after {self.timeout:g} s")
        status = self.run.exit_status
        while_loading = "" if after_loaded else " while loading"
        if status is not None and status < 0:
            reason = next((line.strip() for line in self.run.output.splitlines() if "what():" in line), "")
            return self.result(library, ProbeStatus.CRASHED, f"{then}killed by {_signal_name(-status)}{while_loading}"
                               + (f": {reason}" if reason else ""), -status)
        how = f"exited with status {status}" if status is not None else "ended without a status"
        return self.result(library, ProbeStatus.CRASHED, f"{then}{how}{while_loading}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tagged(messages: tuple[tuple[str, ...], ...], tag: str) -> str | None:
    """The value of the first message the loader emitted with `tag`, if any."""
    return next((m[1] for m in messages if len(m) == 2 and m[0] == tag), None)
