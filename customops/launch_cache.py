"""The launch decision, cached: `customops launch` stands in front of every server start, and when nothing it
depends on has changed the check's answer cannot have changed either.

The decision (final argv, environment, notes, the failure report if the check blocks) is stored under a key
made of the server's argv, the options, LD_PRELOAD/LD_LIBRARY_PATH, the manifest, and the identity (device,
inode, size, mtime) of every file and directory in the repositories. It also records the identities of what
the check depended on in the container: every object it loaded, the ld.so.cache, the server, and the search
and backend directories (a directory's mtime changes when a file is added or removed). Any difference is a
miss. This module imports nothing heavy, so a hit costs an interpreter start and a few hundred stat calls.
"""

from __future__ import annotations

import json
import shlex

from customops import __version__
from customops.cachedir import default_cache_dir, file_key, load_result, result_path, store_result, tree_fingerprint
from customops.mounts import Mounts, host_of
from customops.serverargs import parse


def key_parts(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str]) -> list[str] | None:
    args = parse(server_argv)
    root = options["container_root"]
    parts = [__version__, json.dumps(server_argv), json.dumps(options, sort_keys=True), json.dumps(sorted(mounts)),
             environ.get("LD_PRELOAD", ""), environ.get("LD_LIBRARY_PATH", "")]
    try:
        for repository in args.repositories:
            host = host_of(root, repository, mounts)
            parts.append(tree_fingerprint(host))
        if options.get("manifest"):
            parts.append(file_key(options["manifest"]))
    except OSError:
        return None
    return parts


def cached(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
           cache_dir: str | None = None) -> dict | None:
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return None
    decision = load_result(result_path(_cache(cache_dir), "launch", *parts))
    if not isinstance(decision, dict):
        return None
    for path, key in decision.get("dependencies", {}).items():
        try:
            if file_key(path) != key:
                return None
        except OSError:
            return None
    return decision


def store(decision: dict, server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
          dependencies: list[str], cache_dir: str | None = None) -> None:
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return
    keys = {}
    for path in dependencies:
        try:
            keys[path] = file_key(path)
        except OSError:
            return  # something it depends on vanished meanwhile: do not cache
    store_result(result_path(_cache(cache_dir), "launch", *parts), {**decision, "dependencies": keys})


def _cache(cache_dir: str | None):  # type: ignore[no-untyped-def]
    from pathlib import Path

    return Path(cache_dir) if cache_dir else default_cache_dir()


def command_line(argv: list[str], environment: dict[str, str]) -> str:
    """Copy-pasteable: `env VAR=... tritonserver ...` reproduces the launch."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(environment.items())]
    words = [*map(shlex.quote, argv)]
    return " ".join(["env", *assignments, *words]) if assignments else " ".join(words)
