"""What one tritonserver process will load, in order, and the environment and arguments it needs.

Loaders (customops/triton/loaders/) turn models, the manifest and the container into LoadSteps; the plan
puts them in the server's real order: LD_PRELOAD entries at exec, then per model its backend
library (dlopen RTLD_NOW|RTLD_LOCAL, once per path) and the libraries the backend loads for it.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from customops import chroot, frameworks
from customops.memo import once
from customops.textenum import TextEnum
from customops.triton.serverargs import SERVER_CWD

if TYPE_CHECKING:  # launch's cached path builds a Context from the manifest alone (customops.app.launch)
    from customops.findings import Finding
    from customops.frameworks import Framework
    from customops.triton.container import Container
    from customops.triton.manifest import Manifest


class Purpose(TextEnum):
    """Why the server loads a library: what a step is, in findings and reports."""

    BACKEND_LIBRARY = "backend library"
    OP_LIBRARY = "op library"
    PLUGIN_LIBRARY = "plugin library"
    PRELOAD = "preload"
    EXTENSION_MODULE = "extension module"  # a native module the Python backend's stub imports


class LoadedBy(TextEnum):
    """Whose loading a step is: a framework backend's (its value is the descriptor's backend name, so that
    `LoadedBy(framework.backend)` is its member), any backend's own library, or the host's preloads."""

    TENSORFLOW = frameworks.TENSORFLOW.backend
    ONNXRUNTIME = frameworks.ONNXRUNTIME.backend
    PYTORCH = frameworks.PYTORCH.backend
    TENSORRT = frameworks.TENSORRT.backend
    PYTHON = frameworks.PYTHON.backend  # the Python backend's stub process, importing a model's modules
    BACKEND = "backend"
    HOST = "host"


@dataclass(frozen=True)
class Written:
    """Where a text makes the server load a library (customops.app.text_locations points findings there):
    `file`, a model's config.pbtxt or the manifest; `value`, the entry as written there (an
    op_library_filename, a manifest path), or the backend library's backend name or runtime; `key`, what it
    is written as: "op_library_filename", a manifest entry ("[pytorch] ops"), or the config field the backend
    library comes from ("runtime", "backend": else its platform); `nth`: the n-th entry of that value."""

    file: str
    value: str
    key: str
    nth: int = 0


@dataclass(frozen=True)
class LoadStep:
    path: str  # target path, as the server will open it
    host_path: str  # checkout/host path of the file, for findings and reports
    loader: LoadedBy
    purpose: Purpose
    preload: bool = False  # LD_PRELOAD (global scope at exec) instead of dlopen
    lazy: bool = False
    model: str | None = None
    entry_points: tuple[str, ...] = ()  # dlsym()ed after loading; missing = failure
    caller: str | None = None  # the object calling dlopen (its RUNPATH applies to a bare name)
    written: Written | None = field(default=None, compare=False)  # the text naming it; None: none does


@dataclass(frozen=True)
class LoaderResult:
    steps: tuple[LoadStep, ...] = ()
    library_path: tuple[str, ...] = ()  # LD_LIBRARY_PATH entries the server needs (prepended)
    library_path_for: str = ""  # why they are needed, for reports: "the PyTorch op libraries"
    server_args: tuple[str, ...] = ()  # e.g. --backend-config=tensorrt,plugins=...
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class LoadPlan:
    preloads: tuple[LoadStep, ...]
    dlopens: tuple[LoadStep, ...]
    library_path: tuple[str, ...]
    server_args: tuple[str, ...]
    findings: tuple[Finding, ...] = field(default=())
    library_path_for: tuple[tuple[str, str], ...] = field(default=())  # (LD_LIBRARY_PATH entry, why it is there)
    python_models: tuple[tuple[str, str], ...] = field(default=())  # (model, libtriton_python.so): a stub each
    unknown_backends: tuple[tuple[str, str], ...] = field(default=())  # (model, backend): its library not seen

    def library_path_reason(self, path: str) -> str:
        """Why launch puts the LD_LIBRARY_PATH entry a searched path lies in on LD_LIBRARY_PATH, for a search
        trace: "set for the PyTorch op libraries" ("set by customops launch" when its loader did not say)."""
        why = ", ".join(dict.fromkeys(w for d, w in self.library_path_for
                                      if w and path.startswith(d.rstrip("/") + "/")))
        return f"set for {why}" if why else "set by customops launch"

    @property
    def ld_preload(self) -> str:
        return ":".join(step.path for step in self.preloads)


def merge(results: list[LoaderResult]) -> LoadPlan:
    """Preloads in a deterministic order (host first, then each loader's, de-duplicated); dlopens in
    model order, each backend library once (Triton caches backends by library path)."""
    preloads: list[LoadStep] = []
    dlopens: list[LoadStep] = []
    seen_preload: set[str] = set()
    library_path: list[str] = []
    reasons: list[tuple[str, str]] = []
    args: list[str] = []
    findings: list[Finding] = []
    for result in results:
        for step in result.steps:
            if step.preload:
                if os.path.normpath(step.path) not in seen_preload:
                    seen_preload.add(os.path.normpath(step.path))
                    preloads.append(step)
            else:
                dlopens.append(step)
        library_path += [d for d in result.library_path if d not in library_path]
        reasons += [(d, result.library_path_for) for d in result.library_path
                    if (d, result.library_path_for) not in reasons]
        args += [a for a in result.server_args if a not in args]
        findings += result.findings
    return LoadPlan(tuple(preloads), tuple(dlopens), tuple(library_path), tuple(args), tuple(findings),
                    tuple(reasons))


@dataclass(frozen=True)
class Context:
    """What every loader reads: the container, the manifest, and where the repository is mounted."""

    container: Container
    manifest: Manifest
    mounts: tuple[tuple[str, str], ...] = ()  # (container directory, host directory)
    server_cwd: str = SERVER_CWD  # relative dlopen paths start here
    server_plugins: tuple[str, ...] = ()  # --backend-config=tensorrt,plugins=... already on the command line
    checkouts: tuple[str, ...] = ()  # the repositories as given on this machine
    cache_dir: str | None = None  # customops' cache (None: --no-cache), where execution environments are unpacked
    auto_complete: bool = True  # the server completes configs (no --disable-auto-complete-config)

    def suggest_mount(self, container_path: str) -> str | None:
        """For a container path that does not exist: the --mount under which a checkout file with the same
        tail would appear there (the longest tail wins), as `--mount HOST:CONTAINER`."""
        parts = container_path.strip("/").split("/")
        for cut in range(1, len(parts)):
            tail = "/".join(parts[cut:])
            for checkout in self.checkouts:
                for base in (checkout, os.path.dirname(checkout)):
                    if os.path.isfile(os.path.join(base, tail)):
                        return f"--mount {base}:/{'/'.join(parts[:cut])}"
        return None

    def container_path(self, host_path: str) -> str:
        """A checkout path as the server sees it (the longest mounted host prefix wins)."""
        host_path = os.path.abspath(host_path)
        for container_dir, host_dir in sorted(self.mounts, key=lambda m: -len(m[1])):
            if host_path == host_dir or host_path.startswith(host_dir.rstrip("/") + "/"):
                return container_dir.rstrip("/") + host_path[len(host_dir.rstrip("/")):]
        target = self.container.target
        if target is not None and not target.is_live and host_path.startswith(target.root.rstrip("/") + "/"):
            return host_path[len(target.root.rstrip("/")):]
        return host_path

    def exists(self, container_path: str) -> bool:
        return self.visible(container_path) is True

    def visible(self, container_path: str) -> bool | None:
        """Whether the path exists in the container; None when that is unknown: only the container's facts
        are known (a release or a facts-only profile) and the path lies outside every mounted directory
        of this machine, whose files are still visible."""
        target = self.container.target
        if target is not None:
            return target.host_path(container_path) is not None
        mounts = tuple(sorted(self.mounts, key=lambda m: -len(m[0])))
        if chroot.host_of_real(None, mounts, posixpath.normpath(container_path)) is None:
            return None
        return once(("visible", mounts, container_path), lambda: chroot.resolve(None, mounts, container_path)) \
            is not None

    def source(self, container_path: str) -> str:
        """The checkout or host path of a container path, for reports and for reading the file: resolved
        inside the container (chroot.resolve), so a symlink or `..` that leaves the container's view never
        names a file of this machine. A path missing there keeps its plain mapping, for the report, unless
        that names a file here (which the container cannot see): then the path under the root."""
        target = self.container.target
        root = target.root if target is not None else None
        mounts = tuple(sorted(self.mounts, key=lambda m: -len(m[0])))
        plain = chroot.host_of_real(root, mounts, posixpath.normpath(container_path)) or container_path
        found = chroot.resolve(root, mounts, container_path)
        if found is not None:
            return plain if plain == found[1] or _same_file(plain, found[1]) else found[1]
        if not os.path.lexists(plain):
            return plain
        return container_path if root in (None, "/") else root.rstrip("/") + posixpath.normpath(container_path)

    def absolute(self, path: str) -> str:
        """An op library path as dlopen will take it: relative paths start at the server's cwd."""
        if path.startswith("/") or "/" not in path:
            return path
        return os.path.normpath(os.path.join(self.server_cwd, path))


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def preloaded(ctx: Context, framework: Framework) -> LoaderResult:
    """The op libraries the framework's manifest entry lists ("[pytorch] ops"), preloaded into the server
    (LD_PRELOAD), with its backend directory on LD_LIBRARY_PATH so that their framework dependencies resolve
    (the entry's `why` says so in search traces)."""
    paths = ctx.manifest.listed(framework)
    if not paths or framework.manifest is None:
        return LoaderResult()
    steps = tuple(manifest_preload(ctx, p, LoadedBy(framework.backend), framework.manifest.entry) for p in paths)
    return LoaderResult(steps=steps, library_path=(f"{ctx.container.backend_dir}/{framework.backend}",),
                        library_path_for=framework.manifest.why)


def manifest_preload(ctx: Context, path: str, loader: LoadedBy, key: str) -> LoadStep:
    """The preload step of a manifest entry (`path` as the manifest resolved it). Its file is the one the
    container resolves the entry's container path to, where that is another file than `path`: an absolute entry
    names a path inside the container (`/opt/ops/libmyops.so` of the image), whose file is under the root."""
    container_path = ctx.container_path(path)
    target = ctx.container.target
    found = target.host_path(container_path) if target is not None else None
    source = path if found is None or _same_file(path, found) else ctx.source(container_path)
    return LoadStep(container_path, source, loader, Purpose.PRELOAD, preload=True, written=in_manifest(ctx, key, path))


def in_manifest(ctx: Context, key: str, path: str) -> Written | None:
    """Where the manifest's `key` entry ("[host] preload") lists `path` (as it resolved it)."""
    manifest = ctx.manifest
    return None if manifest.path is None else Written(manifest.path, manifest.as_written(key, path), key)
