"""check's machine-readable report, cached (CI runs the same check again and again), with the scheme of
customops.app.result_cache: the key is the request and the report format, the identity of every file in
the repositories and of the manifest and profile named or discovered; the entry records what the answer
depended on in the container. This module imports nothing heavy, so a hit costs little more than the
stat calls."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from customops import __version__
from customops.app import result_cache
from customops.app.request import CheckRequest
from customops.app.target import TRITON_HOME, discovered_profile
from customops.cachedir import Text, default_cache_dir, file_key, tree_fingerprint
from customops.triton.manifest import checkout_root, find_manifest

REPORT_SHAPE = {"report": Text(lines=True), "exit_code": frozenset({0, 1}), "summary": Text(),
                "dependencies": result_cache.DEPENDENCIES_SHAPE}


def report_key(request: CheckRequest, report_format: str, base: str = "") -> list[str] | None:
    """[cache directory, *key parts] of a report that may be cached (not the text report, which is for people
    and styled for their terminal: ReportRequest.cached); None when it is not cached (--no-cache; --probe,
    whose children's results are cached on their own) or a file of the key vanished while it was read.
    `report_format`: its format, and the option that changes it (`json with statistics`)."""
    if not request.use_cache or request.probe is not None:
        return None
    options: dict[str, Any] = {k: v for k, v in asdict(request).items() if k not in ("cache_dir", "use_cache")}
    options["models"] = None if request.models is None else sorted(request.models)
    options["format"] = report_format
    options["base"] = base  # the directory the report's paths are relative to
    repositories = list(request.repositories)
    parts = [__version__, "check", json.dumps(options, sort_keys=True, default=str), json.dumps(repositories),
             str(os.path.isdir(TRITON_HOME))]
    try:
        parts += [tree_fingerprint(r) for r in repositories]
        parts += [file_key(p) for p in (request.manifest, request.container.profile) if p]
        parts += [f"{p}={file_key(p)}" for p in _discovered(request)]
    except OSError:
        return None
    if request.container.release:  # the release table's facts: regenerated, they give another answer
        from customops.triton.releases import table_digest

        parts.append(table_digest())
    if request.container.image:  # the image the reference names now: another saved under it is another answer
        image = image_identity(request.container.image)
        if image is None:
            return None
        parts.append(image)
    return [str(request.cache_dir or ""), *parts]


def image_identity(text: str) -> str | None:
    from customops.errors import CustomopsError
    from customops.image.identity import identity
    from customops.image.reference import parse

    try:
        return identity(parse(text))
    except CustomopsError:
        return None  # the check says why, in one line


def _discovered(request: CheckRequest) -> list[str]:
    """The manifest and profile that discovery finds above the repositories (not named by an option): a change
    to one there is outside the repositories' fingerprint."""
    repositories = list(request.repositories)
    found = [None if request.manifest else find_manifest(repositories),
             discovered_profile(request.container, repositories)]
    return [p for p in found if p]


def cached_report(key: list[str]) -> dict[str, Any] | None:
    """{"report", "exit_code", "summary"} stored under `key`, if nothing it depended on has changed."""
    cache_dir, *parts = key
    return result_cache.load(cache_dir or default_cache_dir(), "check", parts, REPORT_SHAPE)


def store_report(key: list[str], report: str, exit_code: int, depends_on: list[str], summary: str) -> None:
    """`summary`: the text report's summary line, which a run whose reports all go to files writes to standard
    error."""
    cache_dir, *parts = key
    result_cache.store(cache_dir or default_cache_dir(), "check", parts,
                       {"report": report, "exit_code": exit_code, "summary": summary}, depends_on)


def cache_in_repository(cache_dir: str | os.PathLike[str], repositories: tuple[str, ...]) -> str | None:
    """The cache directory, when it lies inside one of the repositories checked or the git checkout that
    holds one: files a pull request commits there are checked out as the CI user's own, so the cache's
    ownership test would trust them (a skeleton under a trusted profile's key would change the verdict)."""
    real = os.path.realpath(cache_dir)
    for repository in repositories:
        base = os.path.realpath(checkout_root(repository))  # the checkout, or the repository without one
        if (real + "/").startswith(base.rstrip("/") + "/"):
            return str(cache_dir)
    return None


def effective_cache_dir(request: CheckRequest) -> Path | None:
    """Where this check may cache (parsed libraries, skeletons, reports): None with --no-cache."""
    return None if not request.use_cache else request.cache_dir or default_cache_dir()


def guarded(request: CheckRequest) -> tuple[CheckRequest, list[str]]:
    """The request with caching off when the cache directory lies inside a repository or its checkout (a pull
    request could commit entries there, owned by the CI user like its own), and the note that says so."""
    if not request.use_cache:
        return request, []
    inside = cache_in_repository(request.cache_dir or default_cache_dir(), request.repositories)
    if inside is None:
        return request, []
    return replace(request, use_cache=False), [f"cache directory {inside} is inside a model repository or its "
                                               "checkout: not used"]
