"""`customops launch`: check, then exec tritonserver with the environment and arguments the loaders need.

LD_PRELOAD: customops' entries (manifest [host], [tensorflow], [pytorch], [tensorrt] with load = "preload",
in that order, de-duplicated, absolute) come before the entries already in the environment, as Triton's
docs write it (`LD_PRELOAD=libcustom.so:${LD_PRELOAD}`); `--existing-preload first` puts them after.
LD_LIBRARY_PATH gets backends/pytorch or backends/tensorflow only when a preload needs them. TensorRT
plugins loaded through the backend become `--backend-config=tensorrt,plugins=...`, merged into the
user's own setting when there is one. Nothing else in the command line changes.

With a container root other than `/`, a model repository the container does not have (a relative path,
or an absolute one of this machine) is read from this machine and mounted where `customops check` mounts
its repository argument (customops.triton.mounts.default_mounts: /models), so that launch and check of the same
repository give the same findings.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from customops import ownership
from customops.app.inherited import Inherited
from customops.app.launch_cache import command_line, shell_text
from customops.app.server_command import host_repositories, settings
from customops.app.shown import shown
from customops.errors import CustomopsError, printable
from customops.frameworks import TENSORRT
from customops.triton.manifest import CONTROL, Manifest, find_manifest, load_manifest
from customops.triton.mounts import Mounts, container_of, default_mounts, resolve_host
from customops.triton.plan import Context, merge
from customops.triton.serverargs import DEFAULT_BACKEND_DIRECTORY, parse, with_plugins

if TYPE_CHECKING:  # the check's modules are heavy; what to start is assembled without them (environment_for)
    from customops.app.check import CheckResult
    from customops.codes import Severity
    from customops.elf.cache import ElfReader
    from customops.findings import Finding
    from customops.probe.groups import ProbeSettings
    from customops.triton.container import Container


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    environment: dict[str, str]  # the variables customops sets (the rest of the environment is inherited)
    added_args: list[str]  # server arguments customops added or changed
    check: CheckResult | None
    blocking: list[Finding]
    notes: list[str]  # launch's own; the check's are in check.notes (and in its report)

    def command_line(self) -> str:
        return command_line(self.argv, self.environment)

    def dependencies(self) -> list[str]:
        """What the decision depends on in the container (see customops.app.launch_cache)."""
        from customops.app.check import dependencies

        return [] if self.check is None else dependencies(self.check)

    def shown_notes(self, report_shown: bool) -> list[str]:
        """launch's own notes, then the check's, unless its report is shown: the report ends with them."""
        return [*self.notes, *(self.check.notes if self.check is not None and not report_shown else [])]

    def exports(self) -> str:
        """Lines that are safe to `eval` whatever the paths hold: every value single-quoted (a newline,
        `$(...)`, backticks and quotes stay data), and the comment lines printable, since a line break in
        a comment would end it and make the rest a command."""
        lines = [shell_text(f"export {k}={shlex.quote(v)}") for k, v in sorted(self.environment.items())]
        lines += [f"# and give tritonserver: {printable(shlex.quote(a))}" for a in self.added_args]
        return "\n".join(lines)


def prepare(server_argv: list[str], container_root: str = "/", manifest_path: str | None = None,
            fail_on: Severity | None = None, run_the_check: bool = True, existing_preload: str = "last",
            environ: dict[str, str] | None = None, mounts: tuple[tuple[str, str], ...] = (),
            probe: Callable[[Container], ProbeSettings] | None = None, reader: ElfReader | None = None,
            container: Container | None = None) -> Launch:
    """`probe`: the probe settings for the container, when the check should also probe (check --probe);
    `reader`: the run's ELF reader (its cache, or none with --no-cache); `container`: the one `container_root`
    holds, where it is read already (an image's, with its environment)."""
    from customops.app.check import run_check
    from customops.triton.container import from_root

    environ = dict(os.environ if environ is None else environ)
    args = parse(server_argv)
    server = settings(args)
    root = os.path.abspath(container_root)
    mounts = mounts_for(args.local_repositories, root, mounts)
    container = container or from_root(root, server.backend_directory, reader)
    manifest = _manifest(args.local_repositories, root, manifest_path, mounts)
    notes = [*ownership.warnings(), *([f"using the manifest {shown(manifest.path)}"] if manifest.path else [])]
    notes += server.notes
    check = None
    if run_the_check:
        check = run_check(list(host_repositories(args, root, mounts)), manifest, container, mounts,
                          server.model_config_name, set(server.models) if server.models is not None else None,
                          inherited=Inherited.of(environ, existing_preload), server_plugins=server.plugins,
                          probe=probe(container) if probe else None, reader=reader,
                          auto_complete=server.auto_complete, model_namespacing=server.model_namespacing)
    argv, environment, added = assemble(server_argv, root, manifest, mounts, environ, existing_preload)
    threshold = fail_on if fail_on is not None else manifest.fail_on
    blocking = [f for f in check.findings if f.level >= threshold] if check else []
    return Launch(argv, environment, added, check, blocking, notes)


def mounts_for(repositories: tuple[str, ...], root: str, explicit: Mounts) -> Mounts:
    """The explicit mounts, and the repositories of this machine mounted as `customops check` mounts them
    (see resolve_host: a repository the container root has, directly or through a mount, is not mounted)."""
    hosts = [resolve_host(root, r, explicit) for r in repositories]
    return default_mounts([h for h in hosts if h is not None], root, explicit)


def environment_for(server_argv: list[str], container_root: str, manifest_path: str | None,
                    existing_preload: str, mounts: tuple[tuple[str, str], ...],
                    environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """What prepare would start, without the check: (argv, the variables customops sets). Cheap (no container
    is read), so that a start on a cached verdict assembles it from the current inputs, exactly as a start
    that runs the check does."""
    root = os.path.abspath(container_root)
    repositories = parse(server_argv).local_repositories
    mounts = mounts_for(repositories, root, mounts)
    manifest = _manifest(repositories, root, manifest_path, mounts)
    argv, environment, _ = assemble(server_argv, root, manifest, mounts, dict(os.environ if environ is None
                                                                              else environ), existing_preload)
    return argv, environment


def _manifest(repositories: tuple[str, ...], root: str, manifest_path: str | None,
              mounts: tuple[tuple[str, str], ...]) -> Manifest:
    """--manifest, else the one in the server's repositories (as this machine sees them)."""
    host_repositories = [resolve_host(root, r, mounts) for r in repositories]
    return load_manifest(manifest_path or find_manifest([r for r in host_repositories if r and os.path.isdir(r)]))


def assemble(server_argv: list[str], root: str, manifest: Manifest, mounts: tuple[tuple[str, str], ...],
             environ: dict[str, str], existing_preload: str) -> tuple[list[str], dict[str, str], list[str]]:
    """(argv, the variables customops sets, the arguments it added), from the manifest's process-wide loaders
    (the preloads, LD_LIBRARY_PATH and TensorRT plugins the check's plan has too), the server's arguments and
    the current environment."""
    from customops.triton.container import layout_only
    from customops.triton.loaders import process_wide

    args = parse(server_argv)
    ctx = Context(layout_only(root, args.backend_directory or DEFAULT_BACKEND_DIRECTORY), manifest, mounts)
    plan = merge(process_wide(ctx))
    ours = [s.path for s in plan.preloads]
    for path in ours:
        if " " in path or ":" in path or not path.startswith("/") or CONTROL.search(path):
            raise CustomopsError(f"CO307 LD_PRELOAD entry '{printable(path)}' is unusable (relative, or contains "
                                 "a space or a colon, which ld.so treats as separators, or a control character, which "
                                 "customops refuses in the paths it exports)")
    environment: dict[str, str] = {}
    inherited = Inherited.of(environ, existing_preload)  # as the check models it
    if ours:
        merged = (inherited.preload_with(":".join(ours)) or "").replace(" ", ":").split(":")
        environment["LD_PRELOAD"] = ":".join(dict.fromkeys(p for p in merged if p))
    if plan.library_path:  # the inherited value kept as it is: an empty entry in it is the working directory
        environment["LD_LIBRARY_PATH"] = inherited.library_path_with(plan.library_path) or ""
    plugins = _plugins(manifest, root, mounts)
    argv = with_plugins(args, plugins)
    return argv, environment, [a for a in argv if a not in server_argv]


def _plugins(manifest: Manifest, root: str, mounts: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    if manifest.load(TENSORRT) != "backend-config":
        return ()
    return tuple(container_of(root, p, mounts) for p in manifest.listed(TENSORRT))
