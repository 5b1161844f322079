"""`customops check` as the command line asks it (a CheckRequest): the manifest with the options over it,
the container chosen, the check run, and the verdict (the exit status at the severity that fails)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from customops import ownership, progress
from customops.app.check import CheckResult, default_mounts, dependencies, run_check
from customops.app.inherited import NOTHING_INHERITED, Inherited
from customops.app.probing import probe_settings
from customops.app.report_cache import effective_cache_dir
from customops.app.request import CheckRequest
from customops.app.server_command import ServerSettings, applied, settings
from customops.app.shown import shown
from customops.app.suppressions import with_options
from customops.app.target import profile_for, read_container, root_warnings
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.errors import CustomopsError, InputError
from customops.memo import once
from customops.triton.container import Container
from customops.triton.manifest import find_manifest, load_manifest
from customops.triton.mounts import parse_mount
from customops.triton.repository import check_repository
from customops.triton.serverargs import parse


@dataclass(frozen=True)
class CheckRun:
    result: CheckResult
    fail_on: Severity
    exit_code: int  # 1 when a finding is at or above fail_on
    dependencies: list[str]  # what the answer depends on outside the repositories (for caching the report)
    seconds: float = 0.0  # how long the check took (JUnit's time)


def check_repositories(request: CheckRequest, notes: list[str] | None = None) -> CheckRun:
    """The check; `notes` come first among the result's notes (the command's own, e.g. on its cache)."""
    started = time.monotonic()
    repositories = list(request.repositories)
    for repository in repositories:  # before looking for a container: the more precise mistake first
        check_repository(repository)
    reader = once(("elf reader", request.cache_dir, request.use_cache),  # the matrix: each file parsed once
                  lambda: ElfReader(request.cache_dir, use_cache=request.use_cache))
    manifest = with_options(load_manifest(request.manifest or find_manifest(repositories)), request.select,
                            request.ignore)
    profile, profile_notes = profile_for(request.container, manifest, repositories)
    notes = [*(notes or []), *root_warnings(request.container), *ownership.warnings(), *profile_notes]
    if manifest.path:
        notes.append(f"using the manifest {shown(manifest.path)}")
    cache_dir = effective_cache_dir(request)
    with progress.shown("checking"):
        progress.stage("reading the container")
        container = read_container(request.container, profile, reader, cache_dir)
        fail_on = request.fail_on if request.fail_on is not None else manifest.fail_on
        mounts = default_mounts(repositories, container, tuple(parse_mount(m) for m in request.mounts))
        probe = None if request.probe is None else probe_settings(container, request.probe.python,
                                                                    request.probe.onnxruntime, cache_dir)
        if request.server_plugins is None:  # no server command line after --: the one the profile recorded
            request = applied(request, recorded_settings(container, profile), recorded=True)
        inherited = Inherited.of(dict(container.environment), "last") if container.environment else NOTHING_INHERITED
        result = run_check(repositories, manifest, container, mounts, request.model_config_name,
                           set(request.models) if request.models is not None else None, reader, probe=probe,
                           inherited=inherited,
                           server_plugins=request.server_plugins or (),
                           auto_complete=request.auto_complete, model_namespacing=request.model_namespacing,
                           cache_dir=None if cache_dir is None else os.fspath(cache_dir))
    result.notes[:0] = [*notes, *container.notes, *request.server_notes]
    result.manifest = manifest.path
    result.profile = os.path.abspath(profile) if profile else None
    exit_code = 1 if any(f.level >= fail_on for f in result.findings) else 0
    return CheckRun(result, fail_on, exit_code, [*dependencies(result), *([profile] if profile else [])],
                    time.monotonic() - started)


def recorded_settings(container: Container, profile: str | None) -> ServerSettings:
    """The settings of the server command line a profile recorded (`profile create -- ARGS`; none: the defaults),
    read as launch reads the line it starts; one the server would refuse is bad input in the profile."""
    try:
        return settings(parse(["tritonserver", *container.server_args]))
    except CustomopsError as exc:
        raise InputError(profile or container.image or "the profile",
                         f"its recorded server command line: {exc}") from None
