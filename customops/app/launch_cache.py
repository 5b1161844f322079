"""The launch verdict, cached: `customops launch` stands in front of every server start, and when nothing it
depends on has changed the check's answer cannot have changed either.

Only the verdict is cached: the notes and, when the check blocks the start, the failure report. What is
started (the argv and the variables customops sets) is never read from the cache: it is assembled afresh
from the current inputs on every start (customops.app.launch.environment_for, cheap), so a cache entry, whoever
wrote it, cannot make launch exec another program or change LD_PRELOAD. The verdict is stored under a key
made of the server's argv, the options, LD_PRELOAD/LD_LIBRARY_PATH, the mounts, the manifest, and the
identity (device, inode, size, mtime) of every file and directory in the repositories; it also records the
identities of what the check depended on in the container (every object it loaded, the ld.so.cache, the
server, and the search and backend directories: a directory's mtime changes when a file is added or
removed). Any difference is a miss; an entry is used only if customops.cachedir trusts it and it has exactly
VERDICT_SHAPE (customops.app.result_cache, the scheme check's report cache shares). This module imports
nothing heavy, so a hit costs an interpreter start and a few hundred stat calls.
"""

from __future__ import annotations

import json
import shlex

from customops import __version__
from customops.app import result_cache
from customops.cachedir import Text, default_cache_dir, file_key, tree_fingerprint
from customops.errors import LOG_COMMAND
from customops.triton.mounts import Mounts, resolve_host
from customops.triton.serverargs import parse

VERDICT_SHAPE = {"notes": [Text()], "report": (Text(lines=True), None),
                 "dependencies": result_cache.DEPENDENCIES_SHAPE}


def key_parts(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str]) -> list[str] | None:
    args = parse(server_argv)
    root = options["container_root"]
    parts = [__version__, json.dumps(server_argv), json.dumps(options, sort_keys=True), json.dumps(sorted(mounts)),
             environ.get("LD_PRELOAD", ""), environ.get("LD_LIBRARY_PATH", "")]
    try:
        for repository in args.local_repositories:  # a cloud repository is not read: its models are not checked
            host = resolve_host(root, repository, mounts)
            parts.append("missing" if host is None else tree_fingerprint(host))
        if options.get("manifest"):
            parts.append(file_key(options["manifest"]))
    except OSError:
        return None
    return parts


def cached(server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
           cache_dir: str | None = None) -> dict | None:
    """{"notes": [...], "report": text or None} of an earlier start with the same inputs, if nothing it
    depended on has changed since."""
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return None
    return result_cache.load(cache_dir or default_cache_dir(), "launch", parts, VERDICT_SHAPE)


def store(decision: dict, server_argv: list[str], options: dict, mounts: Mounts, environ: dict[str, str],
          dependencies: list[str], cache_dir: str | None = None) -> None:
    """Keep the verdict of `decision` (its notes and report; never its argv or environment)."""
    parts = key_parts(server_argv, options, mounts, environ)
    if parts is None:
        return
    result_cache.store(cache_dir or default_cache_dir(), "launch", parts,
                       {"notes": decision["notes"], "report": decision["report"]}, dependencies)


def command_line(argv: list[str], environment: dict[str, str]) -> str:
    """Copy-pasteable: a POSIX shell runs it as given, and it reproduces the launch: `env VAR=... PROGRAM ARGS`,
    env looking PROGRAM up in PATH as launch does (a shell alone would run its own builtin of that name: `eval`,
    `exec`). A program whose name holds `=` would be one more assignment to env, so it gets the shell's own
    assignment prefix instead, quoted (no builtin has such a name): `VAR=... 'bin=x/tritonserver' ARGS`."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(environment.items())]
    program, *args = argv or [""]
    if "=" in program:
        words = [*assignments, "'" + program.replace("'", "'\"'\"'") + "'", *map(shlex.quote, args)]
    else:  # `./-dir/x` for `-dir/x`, a relative path (serverargs refuses an option there), not an option to env
        words = ["env", *assignments, shlex.quote("./" + program if program.startswith("-") else program),
                 *map(shlex.quote, args)]
    return shell_text(" ".join(words))


def shell_text(text: str) -> str:
    """Shell text with no CI log command in it (customops.errors.LOG_COMMAND): `##[` only ever stands inside a
    single-quoted word here (shlex.quote quotes every word holding `#`), where `#''#[` is the same word."""
    return LOG_COMMAND.sub("#''#", text)
