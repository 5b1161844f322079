"""Whether `customops launch` starts the server, and what it starts. The check's verdict (its notes and
failure report) is cached while nothing it depends on changes (customops.app.launch_cache); what is started,
the argv and the variables customops sets, is assembled from the current inputs every time."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from customops.app import launch_cache
from customops.app.launch import Launch, environment_for, mounts_for, prepare
from customops.triton.mounts import Mounts, parse_mount
from customops.triton.serverargs import parse

if TYPE_CHECKING:
    from customops.app.request import ProbeOptions
    from customops.codes import Severity


@dataclass(frozen=True)
class LaunchRequest:
    server_argv: tuple[str, ...]
    container_root: str = "/"
    manifest: str | None = None  # --manifest (default: the repository's own)
    fail_on: Severity | None = None  # None: the manifest's
    check: bool = True  # False: only assemble the environment (--no-check)
    existing_preload: str = "last"  # where the environment's own LD_PRELOAD entries go: "first" or "last"
    mounts: tuple[str, ...] = ()  # --mount HOST_DIR:CONTAINER_DIR, as given (parsed after the server's argv)
    use_cache: bool = True
    probe: ProbeOptions | None = None


@dataclass(frozen=True)
class Decision:
    argv: list[str]
    environment: dict[str, str]  # the variables customops sets (the rest is inherited)
    notes: list[str]
    report: str | None  # the check's failure report: the server is not started (unless --warn-only)


FailureReport = Callable[[Launch], str | None]  # the check's text report when it blocks (a renderer's job)


def decide(request: LaunchRequest, failure_report: FailureReport) -> Decision:
    """The decision, from the cache when an earlier start had the same inputs, else from a check (stored for
    the next start, unless --no-cache or --probe)."""
    argv = list(request.server_argv)
    root = os.path.abspath(request.container_root)
    # the mounts check would add too: part of the cache key, with the directory of this machine each names
    mounts = mounts_for(parse(argv).local_repositories, root, tuple(parse_mount(m) for m in request.mounts))
    options = {"container_root": root, "manifest": request.manifest,
               "fail_on": None if request.fail_on is None else str(request.fail_on), "check": request.check,
               "existing_preload": request.existing_preload}
    cache = request.use_cache and request.probe is None
    verdict = launch_cache.cached(argv, options, mounts, dict(os.environ)) if cache else None
    if verdict is not None:  # a cached verdict never says what to start: the current inputs do
        command, environment = environment_for(argv, request.container_root, request.manifest,
                                                request.existing_preload, mounts)
        return Decision(command, environment, verdict["notes"], verdict["report"])
    from customops import progress  # its thread is for a check: a cached start shows nothing

    with progress.shown("checking before the launch"):
        launch = _prepare(request, argv, mounts)
        report = failure_report(launch)
        decision = Decision(launch.argv, launch.environment, launch.shown_notes(report is not None), report)
        if cache:
            launch_cache.store({"notes": decision.notes, "report": decision.report}, argv, options, mounts,
                               dict(os.environ), launch.dependencies())
    return decision


def _prepare(request: LaunchRequest, argv: list[str], mounts: Mounts) -> Launch:
    from functools import partial

    from customops.app.probing import probe_settings
    from customops.cachedir import default_cache_dir
    from customops.elf.cache import ElfReader

    probe = None if request.probe is None else partial(
        probe_settings, python=request.probe.python, onnxruntime=request.probe.onnxruntime,
        cache_dir=default_cache_dir() if request.use_cache else None)
    return prepare(argv, request.container_root, request.manifest, request.fail_on, run_the_check=request.check,
                   existing_preload=request.existing_preload, mounts=mounts, probe=probe,
                   reader=ElfReader(use_cache=request.use_cache))
