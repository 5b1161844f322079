"""customops check: will these custom-operation libraries load in this Triton container, and will they collide?"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from customops.errors import CustomopsError

FORMATS = ("text", "json", "sarif", "junit", "github")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="check a model repository's custom libraries against a Triton container",
                       description=__doc__)
    p.add_argument("repositories", nargs="*", metavar="MODEL_REPOSITORY")
    p.add_argument("--model-repository", "--model-store", action="append", default=[], dest="more_repositories",
                   metavar="DIR", help="another model repository (as tritonserver takes it; repeatable)")
    p.add_argument("--manifest", metavar="FILE", help="customops.toml (default: the repository's own, if any)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--container-root", metavar="DIR", help="the container's unpacked filesystem (default: / "
                                                               "when /opt/tritonserver exists)")
    where.add_argument("--profile", metavar="FILE", help="a profile written by `customops profile create`")
    where.add_argument("--triton-release", metavar="YY.MM", help="only the built-in facts of a release")
    p.add_argument("--backend-directory", default="/opt/tritonserver/backends", metavar="DIR")
    p.add_argument("--mount", action="append", default=[], metavar="HOST_DIR:CONTAINER_DIR",
                   help="where a checkout directory appears in the container, as docker -v (repeatable)")
    p.add_argument("--model-config-name", metavar="NAME", help="read configs/NAME.pbtxt where present")
    p.add_argument("--load-model", action="append", metavar="NAME", help="check only these models (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--output", metavar="FILE", help="write the report here instead of standard output")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), help="default: the manifest's, else error")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--cache-dir", type=Path)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from customops.check import default_mounts, run_check
    from customops.codes import Severity
    from customops.container import from_release, from_root, read_profile
    from customops.manifest import find_manifest, load_manifest
    from customops.mounts import parse_mount
    from customops.report import check as report
    from customops.scanners.elfcache import ElfReader

    repositories = [os.path.abspath(r) for r in (*args.repositories, *args.more_repositories)]
    if not repositories:
        raise CustomopsError("no model repository given")
    reader = ElfReader(args.cache_dir, use_cache=not args.no_cache)
    manifest = load_manifest(args.manifest or find_manifest(repositories))
    notes = []
    profile = args.profile
    if not (profile or args.container_root or args.triton_release) and not os.path.isdir("/opt/tritonserver"):
        profile = beside_repository(manifest, repositories)
        if profile:
            notes.append(f"using the profile {profile} (no container root given and no /opt/tritonserver here)")
    if profile:
        container = read_profile(profile, str(args.cache_dir) if args.cache_dir else None)
    elif args.triton_release:
        container = from_release(args.triton_release)
    else:
        container = from_root(args.container_root or "/", args.backend_directory, reader)
    fail_on = Severity.parse(args.fail_on) if args.fail_on else manifest.fail_on
    mounts = default_mounts(repositories, container, tuple(parse_mount(m) for m in args.mount))
    result = run_check(repositories, manifest, container, mounts, args.model_config_name,
                       set(args.load_model) if args.load_model else None, reader)
    result.notes[:0] = notes
    if container.target is not None and container.target.is_live and not os.path.isdir("/opt/tritonserver"):
        result.notes.append("checked against this machine (no /opt/tritonserver here): pass --container-root, "
                            "--profile or --triton-release to check against a Triton container")
    exit_code = 1 if any(f.level >= fail_on for f in result.findings) else 0
    base = repositories[0]
    rendered = {
        "json": lambda: report.to_json(result, fail_on, exit_code, base),
        "sarif": lambda: report.to_sarif(result, base),
        "junit": lambda: report.to_junit(result, fail_on, base),
        "github": lambda: report.to_github(result, base),
    }
    if args.format == "text":
        if args.output:
            from rich.console import Console

            with open(args.output, "w") as f:
                report.render_text(result, fail_on, exit_code, base, Console(file=f, soft_wrap=True))
        else:
            report.render_text(result, fail_on, exit_code, base)
    else:
        text = rendered[args.format]()
        if args.output:
            with open(args.output, "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")
        else:
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return exit_code


def beside_repository(manifest, repositories: list[str]) -> str | None:  # type: ignore[no-untyped-def]
    """The manifest's [check] profile, else customops-profile.json next to the manifest or the repository."""
    if manifest.profile:
        return manifest.profile
    for directory in ([manifest.directory] if manifest.directory else []) + repositories:
        candidate = os.path.join(directory, "customops-profile.json")
        if os.path.isfile(candidate):
            return candidate
    return None
