"""What the real frameworks do with the plan's op libraries (`check --probe`).

The libraries one registry will hold are probed as a group: every Torch op library, every TensorFlow op
library and every TensorRT plugin library of the server process (one registry each), and each ONNX model's
op libraries (one session). Each
library is probed alone, for the names it registers, and the group together, in load order, for what the
framework does when they meet. All loading happens in isolated child processes (customops.probe.frameworks); results
are cached by the files' identities and the interpreter's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from customops import cachedir
from customops.frameworks import DESCRIPTORS, ONNXRUNTIME, PROBE_ORDER, PYTORCH, TENSORFLOW, TENSORRT, probed_as
from customops.probe.frameworks import C_API_LIBRARY, onnxruntime_library, package_file, probe_group, tensorflow_ops
from customops.probe.needs import Needs
from customops.probe.results import PROBE_RESULT_SHAPE, ProbeResult, ProbeStatus
from customops.triton.plan import LoadPlan, LoadStep, Purpose

if TYPE_CHECKING:
    from customops.linker.target import LinkerTarget

TENSORFLOW_REGISTRY_SHAPE = {"ops": [str], "version": str, "libraries": [str]}
FRAMEWORK_OF_LOADER = {f.backend: f.probe for f in DESCRIPTORS if f.probe}  # a step's loader: the framework probed


@dataclass(frozen=True)
class ProbeSettings:
    python: str
    onnxruntime_library: str | None  # None: the one in `python`'s onnxruntime package
    timeout: float = 120
    cache_dir: Path | None = None  # None: no caching
    target: LinkerTarget | None = None  # the container's files, where TensorRT's own plugin library is found


@dataclass(frozen=True)
class BuiltinPlugins:
    """TensorRT's own plugin library of the container (libnvinfer_plugin.so.N), probed after the TensorRT
    group's libraries, in their process, as the server initializes it; or why it was not probed."""
    path: str  # its target path ("" when not probed)
    result: ProbeResult | None  # what its initLibNvInferPlugins registered (None when not probed)
    not_probed: str = ""


@dataclass(frozen=True)
class ProbedGroup:
    framework: str  # torch | tensorflow | onnxruntime | tensorrt (a recording stand-in for libnvinfer)
    model: str | None  # the ONNX model whose session the libraries share
    steps: tuple[LoadStep, ...]
    runtime: str | None  # the C-API library that loaded them (libonnxruntime.so, libtensorflow_cc.so.2), if one did
    alone: tuple[ProbeResult, ...]  # each library in its own process
    together: tuple[ProbeResult, ...]  # all of them, in load order, in one process
    # torch: the container's own libtorch (without Python) on each library, alone
    container: tuple[ProbeResult, ...] = ()
    passed_over: str = ""  # why the container's own framework library did not probe them, where it was tried
    builtin: BuiltinPlugins | None = None  # tensorrt: the container's built-in plugins
    glibc: str = ""  # the glibc the probes ran on (this machine's), as "2.36"
    # the libraries whose dependencies were looked up on this machine: the static model did not load them
    searched_here: tuple[str, ...] = ()

    def in_container(self, source: str) -> ProbeResult | None:
        """What the container's own framework did with the library, where that was probed besides."""
        return next((r for r in self.container if r.library == os.path.abspath(source)
                     and r.status is not ProbeStatus.UNAVAILABLE), None)

    @property
    def unavailable(self) -> str | None:
        """Why the framework could not be probed at all (not installed in the interpreter), if so."""
        return next((r.message for r in self.alone if r.status is ProbeStatus.UNAVAILABLE), None)

    def members(self) -> list[tuple[LoadStep, ProbeResult, ProbeResult]]:
        """(step, probed alone, probed together) for each library, in load order."""
        return list(zip(self.steps, self.alone, self.together, strict=True))

    @property
    def version(self) -> str:
        return next((r.framework_version for r in (*self.alone, *self.together) if r.framework_version), "")


def groups(plan: LoadPlan) -> list[tuple[str, str | None, tuple[LoadStep, ...]]]:
    """(framework, model, steps in load order) for every registry the plan's op libraries meet in."""
    process: dict[str, list[LoadStep]] = {f.probe: [] for f in PROBE_ORDER if not f.probe_per_model}
    sessions: dict[tuple[str, str], list[LoadStep]] = {}  # (framework, model): one registry per model's session
    for step in (*plan.preloads, *plan.dlopens):
        framework = FRAMEWORK_OF_LOADER.get(step.loader)
        if framework is None or step.purpose is Purpose.BACKEND_LIBRARY or not os.path.isfile(step.host_path):
            continue
        if framework not in process:
            sessions.setdefault((framework, step.model or ""), []).append(step)  # the same file twice conflicts there
        elif step.path not in {s.path for s in process[framework]}:  # dlopen of a loaded path: same handle
            process[framework].append(step)
    found: list[tuple[str, str | None, tuple[LoadStep, ...]]] = [
        (framework, None, tuple(steps)) for framework, steps in process.items() if steps]
    found += [(framework, model, tuple(steps)) for (framework, model), steps in sessions.items()]
    return found


def probe_plan(plan: LoadPlan, settings: ProbeSettings, needs: Needs | None = None) -> list[ProbedGroup]:
    """Each group of the plan's op libraries, probed. `needs`: the container's files each library and each
    framework library needs (customops/probe/needs.py; None: each is looked up on this machine)."""
    from customops import progress

    needs = needs or {}
    probed = []
    for framework, model, steps in groups(plan):
        progress.stage(f"probing the {framework} op libraries" + (f" of {model}" if model else ""))
        sources = tuple(s.host_path for s in steps)
        if framework == TENSORRT.probe:
            probed.append(_tensorrt_group(steps, settings, plan))
            continue
        group, passed_over = None, ""
        for runtime in runtimes(plan, settings, framework):
            # What the answer depends on: the op libraries, and the framework (its C-API library or package).
            identity = runtime or package_file(settings.python, framework)
            batches = [(source,) for source in sources] + ([sources] if len(sources) > 1 else [])
            *each, last = cached_batches(settings, framework, runtime, identity, batches, needs)
            alone = tuple(r[0] for r in each) if len(sources) > 1 else last
            together = last
            group = ProbedGroup(framework, model, steps, runtime, alone, together, passed_over=passed_over)
            if not group.unavailable:
                break  # else the next candidate: the container's library may not load on this machine
            if runtime is not None and runtime == container_library(plan, framework):
                passed_over = f"the container's {os.path.basename(runtime)} did not load here: {group.unavailable}"
        assert group is not None
        if framework == PYTORCH.probe and (libtorch := container_library(plan, framework)) is not None:
            # every library again with the container's own libtorch: the verdict on loading in the container
            own = tuple(r[0] for r in cached_batches(settings, framework, libtorch, libtorch,
                                                     [(source,) for source in sources], needs))
            why = next((r.message for r in own if r.status is ProbeStatus.UNAVAILABLE), "")
            group = replace(group, container=own, passed_over=group.passed_over or (
                f"the container's {os.path.basename(libtorch)} did not load here: {why}" if why else ""))
        probed.append(replace(group, glibc=this_glibc(), searched_here=tuple(
            os.path.abspath(s) for s in sources if os.path.abspath(s) not in needs)))
    return probed


def this_glibc() -> str:
    """The glibc this machine's programs run on ("2.36"), which the probes' processes have; "" when unknown."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""
    return found.split()[-1] if found.startswith("glibc ") else ""


def _tensorrt_group(steps: tuple[LoadStep, ...], settings: ProbeSettings, plan: LoadPlan) -> ProbedGroup:
    """TensorRT's plugin libraries, each alone and all in load order, against customops' recording stand-in for
    the libnvinfer they need (customops.probe.tensorrt_standin): there is no TensorRT to probe with here. The
    container's own libnvinfer_plugin.so.N is initialized after them in the group's process: Triton's TensorRT
    backend calls initLibNvInferPlugins only after loading the plugins= libraries (TRITONBACKEND_Initialize,
    tensorrt_backend/src/tensorrt.cc, lines 134-153 then 181-189, at commit e2ef6d79), so a library that
    registers a built-in's (namespace, name, version) wins over TensorRT's own."""
    from customops.probe.tensorrt_standin import SOURCE

    sources = tuple(s.host_path for s in steps)
    framework = TENSORRT.probe
    own = tensorrt_library(plan, settings, sources, TENSORRT.c_api)  # its registry answers, where it loads here
    registry = own[1] if isinstance(own, tuple) else None
    identity = registry or str(SOURCE)
    alone = tuple(cached_results(settings, framework, None, identity, (source,), registry)[0] for source in sources)
    found = tensorrt_library(plan, settings, sources, TENSORRT.own_plugins)
    if isinstance(found, str):
        together = cached_results(settings, framework, None, identity, sources, registry) if len(sources) > 1 \
            else alone
        return ProbedGroup(framework, None, steps, None, alone, together, builtin=BuiltinPlugins("", None, found))
    *probed, builtin = cached_results(settings, framework, found[1], identity, sources, registry)
    return ProbedGroup(framework, None, steps, None, alone, tuple(probed),
                       builtin=BuiltinPlugins(found[0], builtin))


def tensorrt_library(plan: LoadPlan, settings: ProbeSettings, sources: tuple[str, ...],
                     stem: str) -> tuple[str, str] | str:
    """(target path, host path) of the container's `stem`.so.N (libnvinfer_plugin, libnvinfer), N the major the
    libraries need,
    found as the server's loader finds it (libtriton_tensorrt.so needs it: that library's RUNPATH, the plan's
    LD_LIBRARY_PATH, the container's ld.so.cache and library directories); or why there is none."""
    from customops.elf.cache import ElfReader
    from customops.errors import ElfError
    from customops.linker.linkmap import LinkMap
    from customops.linker.search import LibrarySearch, LoadFailed
    from customops.linker.types import Environment
    from customops.probe.tensorrt_standin import needed_major
    from customops.triton.container import SERVER

    target, reader = settings.target, ElfReader(use_cache=False)
    major = next((m for m in (needed_major(s, reader) for s in sources) if m is not None), None)
    if target is None or major is None:
        return "no container root to find it in" if target is None else "the plugin libraries need no libnvinfer"
    name = f"{stem}.so.{major}"
    backend = next((s for s in plan.dlopens if s.purpose is Purpose.BACKEND_LIBRARY
                    and os.path.basename(s.host_path) == TENSORRT.backend_library), None)
    loader = (backend.path, backend.host_path) if backend else (SERVER, target.host_path(SERVER))
    if loader[1] is None:
        return f"neither the TensorRT backend nor {SERVER} is in the container to find {name} from"
    try:
        info = reader.read(loader[1])
        search = LibrarySearch(target, Environment(library_path=":".join(plan.library_path) or None), SERVER)
        search.machine = (info.machine_code, info.elf_class)
        path = search.find(name, LinkMap(loader[0], loader[1], info, None, os.path.dirname(loader[0]), 0))[1]
    except (OSError, ValueError, LoadFailed, ElfError) as exc:
        return f"{name} could not be looked up: {exc}"
    host = target.host_path(path) if path else None
    return (path, host) if path and host else f"the container has no {name} where {loader[0]} finds its libraries"


def runtimes(plan: LoadPlan, settings: ProbeSettings, framework: str) -> list[str | None]:
    """The frameworks to probe with, best first: the container's own (the C-API library beside the backend
    the plan loads: libonnxruntime.so, libtensorflow_cc.so.2), then `settings.python`'s (None: its package;
    ONNX Runtime: the library in it). --probe-onnxruntime, when given, is the only ONNX Runtime. Torch is
    probed with `python`'s package, which lists what each library registers (the container's libtorch only
    gives a second verdict on the libraries that failed: ProbedGroup.container)."""
    if framework == PYTORCH.probe:
        return [None]
    if framework == ONNXRUNTIME.probe and settings.onnxruntime_library is not None:
        return [settings.onnxruntime_library]
    found: list[str | None] = [library for library in (container_library(plan, framework),) if library]
    if framework == ONNXRUNTIME.probe:
        found.append(onnxruntime_library(settings.python) or None)
    elif framework == TENSORFLOW.probe:
        found.append(None)
    return found or [None]


def framework_libraries(plan: LoadPlan) -> tuple[str, ...]:
    """The container's C-API library of each framework the plan's backends load (host paths)."""
    return tuple(found for f in PROBE_ORDER if f.probe and (found := container_library(plan, f.probe)))


def container_library(plan: LoadPlan, framework: str) -> str | None:
    """The container's C-API library of `framework` (a host path), beside the backend library the plan loads."""
    described = probed_as(framework)
    if described is None or framework not in C_API_LIBRARY:
        return None
    stem = f"{C_API_LIBRARY[framework]}.so"
    for step in (*plan.preloads, *plan.dlopens):
        if step.purpose is Purpose.BACKEND_LIBRARY and os.path.basename(step.host_path) == described.backend_library:
            folder = os.path.dirname(step.host_path)
            paths = [os.path.join(folder, name) for name in sorted(os.listdir(folder))] if os.path.isdir(folder) else []
            found = [p for p in paths if os.path.basename(p).startswith(stem) and os.path.isfile(p)
                     and not os.path.islink(p)]  # a file of the container's, not where a link points on this host
            if found:
                return found[0]
    return None


def cache_key(settings: ProbeSettings, kind: str, identity: str | None, sources: tuple[str, ...],
              needed: tuple[str, ...] = ()) -> list[str] | None:
    """What a probe's result is kept under: the interpreter, the framework file, the libraries and the container's
    files they were handed (`needed`), each with its identity (None: no cache dir, or a file vanished)."""
    if settings.cache_dir is None or identity is None:
        return None
    try:
        identities = [cachedir.file_key(p) for p in (settings.python, identity, *sources, *needed)]
    except OSError:
        return None
    return [kind, settings.python, identity, *sources, *(["--needs", *needed] if needed else []), *identities]


def handed(needs: Needs, libraries: tuple[str | None, ...]) -> tuple[str, ...]:
    """The container's files the loader script is handed for these libraries, in order, once each."""
    return tuple(dict.fromkeys(path for library in libraries if library
                               for _, path in needs.get(os.path.abspath(library), ())))


def cached_batches(settings: ProbeSettings, framework: str, runtime: str | None, identity: str | None,
                   batches: list[tuple[str, ...]], needs: Needs | None = None) -> list[tuple[ProbeResult, ...]]:
    """cached_results for each batch of libraries: what the cache lacks is probed in one sandbox, the framework
    imported once (customops.probe.batch), then stored."""
    from customops.probe.batch import probe_groups

    needs = needs or {}
    keys = [cache_key(settings, framework, identity, batch, handed(needs, (runtime, *batch))) for batch in batches]
    found: list[tuple[ProbeResult, ...] | None] = [_cached(settings, key, batch) for key, batch in zip(keys, batches,
                                                                                                       strict=True)]
    missing = [i for i, hit in enumerate(found) if hit is None]
    probed = probe_groups(tuple(batches[i] for i in missing), settings.python, settings.timeout, framework=framework,
                          runtime=runtime, needs=needs) if missing else ()
    for i, results in zip(missing, probed, strict=True):
        _store(settings, keys[i], results)
        found[i] = results
    return [results for results in found if results is not None]


def _cached(settings: ProbeSettings, key: list[str] | None,
            libraries: tuple[str, ...]) -> tuple[ProbeResult, ...] | None:
    """What the cache holds for exactly these libraries (a cache entry is untrusted input), or None."""
    hit = cachedir.load_result(settings.cache_dir, "probes", key, [PROBE_RESULT_SHAPE]) if key is not None else None
    if hit is not None and [r["library"] for r in hit] == [os.path.abspath(s) for s in libraries]:
        return tuple(ProbeResult.from_json(r) for r in hit)
    return None


def _store(settings: ProbeSettings, key: list[str] | None, results: tuple[ProbeResult, ...]) -> None:
    """Keep results that are a verdict on the libraries (not a timeout, not a framework that could not run)."""
    if key is not None and all(r.status not in (ProbeStatus.TIMED_OUT, ProbeStatus.UNAVAILABLE) for r in results):
        cachedir.store_result(settings.cache_dir, "probes", key, [{**r.to_json(), "output": r.output[-4000:]}
                                                                  for r in results])


def cached_results(settings: ProbeSettings, framework: str, runtime: str | None, identity: str | None,
                   sources: tuple[str, ...], registry: str | None = None) -> tuple[ProbeResult, ...]:
    """The results of probing `sources` together: from the cache when an entry of exactly the right shape
    is there for these very libraries (a cache entry is untrusted input), else from a probe, then stored.
    TensorRT: `runtime` is the container's libnvinfer_plugin, `registry` its libnvinfer (also `identity`)."""
    builtin = (runtime,) if framework == TENSORRT.probe and runtime else ()  # TensorRT's own plugin library, last
    kind = framework
    if framework == TENSORRT.probe:  # the results depend on customops' stand-in and how it is built
        from customops.probe.tensorrt_standin import recipe_digest

        kind = f"{framework}-{recipe_digest()}"
    key = cache_key(settings, kind, identity, (*sources, *builtin))
    hit = _cached(settings, key, (*sources, *builtin))
    if hit is not None:
        return hit
    if framework == TENSORRT.probe:  # the stand-in is built into the check's cache directory, or none
        from customops.probe.tensorrt_standin import probe_plugins

        results = tuple(p.result for p in probe_plugins(sources, settings.python, settings.timeout,
                                                        cache_dir=settings.cache_dir,
                                                        use_cache=settings.cache_dir is not None, builtin=runtime,
                                                        registry=registry))
    else:
        results = probe_group(sources, settings.python, settings.timeout, framework=framework, runtime=runtime)
    _store(settings, key, results)
    return results


def containment_notes(groups: list[ProbedGroup]) -> list[str]:
    """What the probed libraries could and could not do on this machine (once per distinct containment)."""
    return sorted({r.containment for g in groups for r in (*g.alone, *g.together) if r.containment})


@dataclass(frozen=True)
class TensorflowRegistry:
    """Every op TensorFlow knows in the server process, after the plan's TensorFlow op libraries."""
    ops: frozenset[str]
    version: str
    libraries: tuple[str, ...]


def tensorflow_registry(plan: LoadPlan, settings: ProbeSettings) -> TensorflowRegistry | str:
    """The registry, or why it could not be probed."""
    framework = TENSORFLOW.probe
    steps = next((steps for name, _, steps in groups(plan) if name == framework), ())
    sources = tuple(s.host_path for s in steps)
    found: tuple[frozenset[str], str] | str = f"{settings.python} has no {framework} package"
    for runtime in runtimes(plan, settings, framework):  # the container's libtensorflow_cc.so.2, then python's
        identity = runtime or package_file(settings.python, framework)
        if identity is None:
            continue
        key = cache_key(settings, f"{framework}-ops", identity, sources)
        hit = cachedir.load_result(settings.cache_dir, "probes", key, TENSORFLOW_REGISTRY_SHAPE) if key else None
        if hit is not None:
            return TensorflowRegistry(frozenset(hit["ops"]), hit["version"], tuple(hit["libraries"]))
        found = (tensorflow_ops(sources, settings.python, settings.timeout, runtime=runtime) if runtime
                 else tensorflow_ops(sources, settings.python, settings.timeout))
        if not isinstance(found, str):
            break
    if isinstance(found, str):
        return found
    registry = TensorflowRegistry(found[0], found[1], tuple(s.path for s in steps))
    if key is not None:
        cachedir.store_result(settings.cache_dir, "probes", key, {"ops": sorted(registry.ops),
                                                                  "version": registry.version,
                                                                  "libraries": list(registry.libraries)})
    return registry
