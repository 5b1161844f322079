"""Which TensorRT plugin creators a library registers, learnt without TensorRT and without a GPU.

Triton's TensorRT backend dlopen()s plugin libraries (--backend-config=tensorrt,plugins=..., LD_PRELOAD)
whose static initializers register plugin creators in TensorRT's global registry, which refuses a creator
whose identity is already filed: the first registration wins, unless a creator registered outside its own
namespace takes another's place (customops.probe.tensorrt_registrations). TensorRT's libraries cannot be
installed everywhere customops runs, so the probe loads each library, in the isolated child
(customops/probe/sandbox.py, the script customops/probe/child_tensorrt.py), against a recording stand-in
for libnvinfer.so.N compiled from customops/data/tensorrt_standin/standin.cpp: N is the major the library
itself needs (its DT_NEEDED), because a stand-in of another layout records nothing, silently.

The stand-in is libnvinfer.so.N (the registry, the logger, the entry points) and a library of stubs it
needs, one per other name the plugin libraries leave undefined and nothing in their load scope defines
(customops.probe.tensorrt_scope), so that the load succeeds as it would against the real library. The
stubs also come after the C++ runtime in the stand-in's own scope (where the runtime, loaded by the
stand-in, looks up its own names), so they only ever stand in for names nothing else defines. Files a
plugin library needs that this machine lacks (TensorRT's other libraries, CUDA's; the Triton container
has them) get placeholders: libraries of that SONAME with the symbol versions and versioned names the
plugin asks of them, opened before it. Every
stub returns 0 (or is zeros): a static initializer that needs real work from one may crash, which is
reported as a crash. All is built with the machine's C++ compiler into customops' cache, keyed by what
the files are built from.

Names are reported as "namespace::name/version" and what became of each registration
(customops.probe.tensorrt_registrations).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from customops import __version__, cachedir, cleanup
from customops.elf.cache import ElfReader
from customops.elf.constants import STB_GLOBAL, STT_FUNC, STT_NOTYPE, STT_OBJECT
from customops.elf.records import ElfInfo
from customops.errors import ElfError
from customops.frameworks import TENSORRT
from customops.probe import sandbox
from customops.probe.reported import Reported
from customops.probe.results import ProbeResult, ProbeStatus
from customops.probe.tensorrt_registrations import Fate, Registration
from customops.probe.tensorrt_scope import NEEDED, defined_in_scope
from customops.probe.tensorrt_scope import missing as missing_here

SOURCE = Path(__file__).resolve().parent.parent / "data" / "tensorrt_standin" / "standin.cpp"
CHILD = Path(__file__).with_name("child_tensorrt.py").read_text()  # run in the sandbox, never imported
COMPILERS = ("c++", "g++", "clang++")  # the first one on PATH builds the stand-in
STUBS = "libcustomops_standin_stubs.so"
WRITABLE_NAME = re.compile(r"[A-Za-z_.$][A-Za-z0-9_.$]*")  # a symbol or version name the sources can carry as is
OBJECT_LIMIT = 1 << 20  # bytes of zeros a stub object may have
MAX_STUBS, MAX_PLACEHOLDERS = 50_000, 64  # what one stand-in build may hold (a hostile library cannot ask more)
# The C++ runtime the stand-in is linked with, needed before the stubs: a library the stand-in loads first
# looks its own names up in the stand-in's scope, where the stubs must not come before it (see _build)
RUNTIME = ("-lstdc++", "-lm", "-lgcc_s", "-lc")


class PluginOutcome(str, Enum):
    """What the probe learnt about one plugin library."""

    REGISTERED = "registered"  # it loaded and registered at least one creator
    REGISTERED_NOTHING = "registered nothing"  # it loaded and registered no creator (not a pass: see the module doc)
    NOT_LOADED = "not loaded"  # it failed, crashed or timed out, or an earlier library did (the result says how)
    UNSUPPORTED = "unsupported"  # it needs a libnvinfer major the stand-in has no layout for
    UNAVAILABLE = "unavailable"  # the stand-in could not be built, or the sandbox could not run

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class PluginProbe:
    result: ProbeResult  # as every probe reports (registered: the names, see the module doc)
    outcome: PluginOutcome
    major: int | None  # the libnvinfer major the library needs, None when it needs none

    @property
    def registrations(self) -> tuple[Registration, ...]:
        return tuple(Registration.parse(name) for name in self.result.registered)


def supported_majors() -> tuple[int, ...]:
    """The majors the stand-in's source has a layout for (its `CUSTOMOPS_MAJOR == N` tests)."""
    return tuple(sorted({int(n) for n in re.findall(r"CUSTOMOPS_MAJOR == (\d+)", SOURCE.read_text())}))


def needed_major(path: str, reader: ElfReader) -> int | None:
    """The N of the libnvinfer.so.N the library needs itself (DT_NEEDED), None when none or unreadable."""
    with contextlib.suppress(OSError, ElfError, ValueError):
        for name in reader.read(path).needed:
            if found := NEEDED.fullmatch(name):
                return int(found.group(1))
    return None


def probe_plugins(libraries: tuple[str, ...], python: str | None = None, timeout: float = 60, memory_mb: int = 4096,
                  cache_dir: Path | str | None = None, use_cache: bool = True,
                  builtin: str | None = None, registry: str | None = None) -> tuple[PluginProbe, ...]:
    """Load `libraries` in order into one isolated process against the stand-in of the libnvinfer major they
    need, and report on each: what it registered (the names, in PluginProbe.result.registered) and how.
    `cache_dir`: where the built stand-in is kept (default: customops' cache directory; none without
    `use_cache`, as check --no-cache). `builtin`: TensorRT's own libnvinfer_plugin.so.N, whose
    initLibNvInferPlugins is called after the libraries, as Triton's TensorRT backend does: one more result,
    the last, holds its built-in creators. `registry`: TensorRT's own libnvinfer.so.N (a container's), whose
    registry answers the registrations where it loads on this machine (the results' framework_version says)."""
    paths = tuple(os.path.abspath(lib) for lib in (*libraries, *([builtin] if builtin else [])))
    if not SOURCE.is_file():  # an installation without its package data
        return tuple(_unavailable(p, None, f"customops' TensorRT stand-in source {SOURCE} is missing") for p in paths)
    reader = ElfReader(use_cache=False)
    majors = tuple(needed_major(p, reader) for p in paths)
    supported = supported_majors()
    unsupported = next(((p, m) for p, m in zip(paths, majors, strict=True) if m is not None and m not in supported),
                       None)
    if unsupported is not None:
        return _unsupported(paths, majors, unsupported, supported)
    plan = _plan(paths, majors, next((m for m in majors if m is not None), supported[-1]), reader)
    if len(plan.stubs) > MAX_STUBS or len(plan.placeholders) > MAX_PLACEHOLDERS:  # a bounded build, whatever the input
        why = (f"the libraries need {len(plan.stubs)} stubs and {len(plan.placeholders)} placeholders, more than the "
               f"stand-in builds ({MAX_STUBS} and {MAX_PLACEHOLDERS})")
        return tuple(_unavailable(p, m, why) for p, m in zip(paths, majors, strict=True))
    with _StandIn(plan, cache_dir, use_cache) as built:
        if isinstance(built.error, str):
            return tuple(_unavailable(p, m, built.error) for p, m in zip(paths, majors, strict=True))
        users = paths[:-1] if builtin else paths
        unanswered, transient = _unanswered(registry, built, python or sys.executable, timeout, memory_mb) \
            if registry else (None, False)
        if transient:  # not a verdict on the file: no result (nothing is cached), rather than the stand-in's
            return tuple(_unavailable(p, m, unanswered or "") for p, m in zip(paths, majors, strict=True))
        if unanswered is not None:
            registry = None
        arguments = [built.library, str(len(built.placeholders)), *built.placeholders, paths[-1] if builtin else "",
                     registry or "", *users]
        readable = (*paths, *built.paths(), *([registry] if registry else []))
        run = sandbox.run(python or sys.executable, CHILD, arguments, timeout, memory_mb, readable)
    if run.error is not None:
        return tuple(_unavailable(p, m, f"the probe's sandbox failed: {run.error}")
                     for p, m in zip(paths, majors, strict=True))
    results = Reported(run, timeout).each(paths)
    if unanswered is not None:
        results = tuple(replace(r, framework_version=f"{r.framework_version} ({unanswered})") for r in results)
    return tuple(_judged(r, m, plan.note()) for r, m in zip(results, majors, strict=True))


def _unanswered(registry: str, built: _StandIn, python: str, timeout: float, memory_mb: int) -> tuple[str | None, bool]:
    """Why TensorRT's own registry in `registry` cannot answer, and whether that may pass (a timeout, a sandbox
    that failed): a preflight run of the loader hands it over and asks it one question, with no plugin library;
    a file of another layout (or no TensorRT at all) crashes there, not in the run that probes. None when it
    answers, or does not load (the probing run says so)."""
    run = sandbox.run(python, CHILD, [built.library, "0", "", registry], timeout, memory_mb, (*built.paths(), registry))
    if run.error is None and run.finished:
        return None, False
    why = run.error or Reported(run, timeout).ended(registry, after_loaded=False).message
    return f"TensorRT's own {registry} did not answer here: {why}", run.error is not None or run.timed_out


def probe_group(libraries: tuple[str, ...], python: str | None = None, timeout: float = 60,
                memory_mb: int = 4096) -> tuple[ProbeResult, ...]:
    """probe_plugins' results, as customops.probe.frameworks.probe_group gives them for framework "tensorrt"."""
    return tuple(p.result for p in probe_plugins(libraries, python, timeout, memory_mb, cachedir.default_cache_dir()))


def _judged(result: ProbeResult, major: int | None, note: str) -> PluginProbe:
    if result.status is not ProbeStatus.LOADED:
        return PluginProbe(result, PluginOutcome.NOT_LOADED, major)
    offered = [Registration.parse(name) for name in result.registered]
    if any(r.fate is not Fate.ENTRY_POINT for r in offered):
        return PluginProbe(replace(result, message=note), PluginOutcome.REGISTERED, major)
    nothing = "loaded, but registered no TensorRT plugin creator"
    if offered:
        nothing += (f": only its getCreators/getPluginCreators returns its {len(offered)} creator(s), which "
                    "TensorRT registers from IPluginRegistry::loadLibrary alone, and Triton dlopen()s plugin libraries")
    return PluginProbe(replace(result, message=f"{nothing} ({note})" if note else nothing),
                       PluginOutcome.REGISTERED_NOTHING, major)


def _unavailable(path: str, major: int | None, message: str) -> PluginProbe:
    return PluginProbe(ProbeResult(path, ProbeStatus.UNAVAILABLE, message, None, "", ()), PluginOutcome.UNAVAILABLE,
                       major)


def _unsupported(paths: tuple[str, ...], majors: tuple[int | None, ...], culprit: tuple[str, int],
                 supported: tuple[int, ...]) -> tuple[PluginProbe, ...]:
    """Every library of the group, unprobed: one needs a major whose layout the stand-in does not have. Not
    UNAVAILABLE (the probe could not run at all): the culprit FAILED to be probed, the rest were NOT_LOADED."""
    known = ", ".join(str(m) for m in supported)
    why = f"needs libnvinfer.so.{culprit[1]}, and customops' TensorRT stand-in has layouts for majors {known} only"
    return tuple(PluginProbe(ProbeResult(p, ProbeStatus.FAILED, why, None, "", ()) if p == culprit[0] else
                             ProbeResult(p, ProbeStatus.NOT_LOADED, f"not probed: {culprit[0]} {why}", None, "", ()),
                             PluginOutcome.UNSUPPORTED, m) for p, m in zip(paths, majors, strict=True))


# -- what the stand-in holds ---------------------------------------------------------------------------------
@dataclass
class _Plan:
    """The stand-in of one group: stubs beside libnvinfer.so.`major` (name -> bytes of an object, 0 for a
    function), and a placeholder for each file the libraries need that this machine lacks (the Triton
    container has them: TensorRT's other libraries, CUDA's), defining the versions and versioned names the
    libraries ask of it (file -> version -> name -> size)."""

    major: int
    stubs: dict[str, int] = field(default_factory=dict)
    placeholders: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    def note(self) -> str:
        """What a library that loaded loaded with, beside the stand-in."""
        files = ", ".join(sorted(self.placeholders))
        return f"loaded with placeholders for {files}, which this machine lacks" if files else ""


def _plan(paths: tuple[str, ...], majors: tuple[int | None, ...], major: int, reader: ElfReader) -> _Plan:
    """The stubs (a library's unversioned undefined names, when it needs libnvinfer.so.`major`: a versioned
    reference names another file) and the placeholders (what a library asks of files it cannot find)."""
    plan = _Plan(major)
    for path, needs in zip(paths, majors, strict=True):
        with contextlib.suppress(OSError, ElfError, ValueError):
            info = reader.read(path)
            missing = missing_here(path, info)
            for lacking in missing:
                plan.placeholders.setdefault(lacking, {})
            for need in info.version_needs:
                if need.file in missing:
                    versions = plan.placeholders.setdefault(need.file, {})
                    for version in need.versions:
                        if WRITABLE_NAME.fullmatch(version.name):
                            versions.setdefault(version.name, {})
            undefined = _undefined(info)
            unversioned = [name for name, _, owner, _ in undefined if owner is None] if needs == major else []
            defined = defined_in_scope(path, info, reader, unversioned)  # no stub shadows a real definition
            for name, size, owner, version_name in undefined:
                if owner is None and needs == major:
                    if name not in defined:
                        plan.stubs[name] = size
                elif owner in missing and version_name in plan.placeholders[owner]:
                    plan.placeholders[owner][version_name][name] = size
    return plan


def _undefined(info: ElfInfo) -> list[tuple[str, int, str | None, str]]:
    """The library's undefined global references: (name, bytes of an object or 0, the file and version a
    versioned reference names, else None and "")."""
    table = info.symbols
    slots = info.version_slots
    st_info, _, _, _, st_size, versym = table.fields
    found = []
    undefined = [int(i) for i in table.undefined_mask.nonzero()[0]]
    for index, raw in zip(undefined, table.names(undefined), strict=True):
        kind, bind = st_info[index] & 0xF, st_info[index] >> 4
        slot = slots.get(versym[index] & 0x7FFF) if versym is not None else None
        name = bytes(raw).decode("ascii", "replace")
        if bind == STB_GLOBAL and kind in (STT_FUNC, STT_NOTYPE, STT_OBJECT) and WRITABLE_NAME.fullmatch(name):
            size = min(max(st_size[index], 8), OBJECT_LIMIT) if kind == STT_OBJECT else 0
            found.append((name, size, slot.filename if slot else None, slot.name if slot else ""))
    return found


def _definitions(names: dict[str, int], skip: frozenset[str] = frozenset()) -> str:
    """C++ defining each name as a function returning 0, or an object of zeros of its size."""
    lines = ['extern "C" {']
    for i, (name, size) in enumerate(sorted(names.items())):
        if name in skip:
            continue
        if size:
            lines.append(f'__attribute__((aligned(16))) char customops_object_{i}[{size}] __asm__("{name}") = {{}};')
        else:
            lines += [f'long customops_stub_{i}() __asm__("{name}");', f"long customops_stub_{i}() {{ return 0; }}"]
    return "\n".join([*lines, "}", ""])


def _version_script(versions: dict[str, dict[str, int]]) -> str:
    return "".join(f"{v} {{ {'global: ' if names else ''}{''.join(f'{n}; ' for n in sorted(names))}}};\n"
                   for v, names in sorted(versions.items()))


# -- building ------------------------------------------------------------------------------------------------
class _StandIn:
    """The stand-in's files for one plan: from the cache, or built (into the cache, or into a temporary
    directory removed on exit when the cache cannot be used). `error`: why there are none."""

    def __init__(self, plan: _Plan, cache_dir: Path | str | None, use_cache: bool = True) -> None:
        source = SOURCE.read_text()
        core = frozenset(re.findall(r"EXPORT \S+\*? (\w+)\(", source))
        self.sources = {"standin.cpp": source, "stubs.cpp": _definitions(plan.stubs, core)}
        self.sonames = {}
        for i, (file, versions) in enumerate(sorted(plan.placeholders.items())):
            self.sources[f"placeholder-{i}.cpp"] = _definitions({n: s for v in versions.values() for n, s in v.items()})
            self.sources[f"placeholder-{i}.map"] = _version_script(versions)
            self.sonames[f"placeholder-{i}.so"] = file
        self.major, self.cache_dir, self.use_cache = plan.major, cache_dir, use_cache
        self.files = (f"{TENSORRT.c_api}.so.{plan.major}", STUBS, *self.sonames)
        self.directory = ""
        self.error: str | None = None
        self.temporary: str | None = None

    @property
    def library(self) -> str:
        return os.path.join(self.directory, self.files[0])

    @property
    def placeholders(self) -> list[str]:
        return [os.path.join(self.directory, name) for name in self.sonames]

    def paths(self) -> tuple[str, ...]:
        return tuple(os.path.join(self.directory, name) for name in self.files)

    def __enter__(self) -> _StandIn:
        text = "\0".join(f"{name}\0{text}" for name, text in sorted(self.sources.items()))
        # what is built and how (this module holds the command lines); not the compiler: a stand-in built once
        # serves a machine that has none since
        recipe = f"{self.major}\0{RUNTIME}\0{recipe_digest()}\0{text}"
        names = ("tensorrt-standin", hashlib.sha256(cachedir.key_bytes(recipe)).hexdigest()[:32])
        root = cachedir.trusted_root(self.cache_dir) if self.use_cache else None
        if root is not None and all(cachedir.read_entry(root, (*names, f)) is not None for f in self.files):
            self.directory = str(root.joinpath(*names))
            return self
        self.directory = self.temporary = tempfile.mkdtemp(prefix="customops-tensorrt-")
        cleanup.register(self.temporary)
        self.error = self._build()
        if self.error is None and root is not None:
            for name in self.files:
                cachedir.write_entry(root, (*names, name), Path(self.temporary, name).read_bytes())
        return self

    def __exit__(self, *_: object) -> None:
        if self.temporary is not None:
            cleanup.remove(self.temporary)

    def _build(self) -> str | None:
        """Compile the stubs, libnvinfer.so.N needing them (found beside it), the placeholders; None, or why not.
        libnvinfer.so.N needs the C++ runtime before the stubs: the runtime, loaded first by it, resolves its
        own internal calls in its scope, and stubs listed first (a plugin may leave std::string's members
        undefined) would stand in for them, returning 0 from inside libstdc++."""
        cxx = compiler()
        if cxx is None:
            return f"no C++ compiler ({', '.join(COMPILERS)}) on PATH to build customops' TensorRT stand-in"
        for name, text in self.sources.items():
            Path(self.directory, name).write_text(text)
        common = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-w"]
        steps = [[*common, "stubs.cpp", f"-Wl,-soname,{STUBS}", "-o", STUBS],
                 [*common, "-fvisibility=hidden", f"-DCUSTOMOPS_MAJOR={self.major}", "standin.cpp",
                  f"-Wl,-soname,{self.files[0]}", "-Wl,--no-as-needed", *RUNTIME, f"-l:{STUBS}", "-L.",
                  "-Wl,-rpath,$ORIGIN", "-o", self.files[0]]]
        for name, soname in self.sonames.items():
            script = name.replace(".so", ".map")
            steps.append([*common, name.replace(".so", ".cpp"), f"-Wl,-soname,{soname}", "-o", name,
                          *([f"-Wl,--version-script={script}"] if self.sources[script] else [])])
        for command in steps:
            try:
                done = subprocess.run(command, cwd=self.directory, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.SubprocessError) as exc:
                return f"building customops' TensorRT stand-in failed: {exc}"
            if done.returncode != 0:
                last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
                return f"building customops' TensorRT stand-in with {cxx} failed: {last.strip()}"
        return None


def recipe_digest() -> str:
    """What a probe's result depends on in customops itself (this module, the scope walk, the child script, the
    stand-in's source, the version): part of the keys its results and builds are cached under."""
    here = Path(__file__).resolve().parent
    parts = [__version__, CHILD, SOURCE.read_text() if SOURCE.is_file() else "",
             *((here / name).read_text() for name in ("tensorrt_standin.py", "tensorrt_scope.py"))]
    return hashlib.sha256(cachedir.key_bytes("\0".join(parts))).hexdigest()[:32]


def compiler() -> str | None:
    """The machine's C++ compiler, the first of COMPILERS on PATH."""
    return next((found for name in COMPILERS if (found := shutil.which(name))), None)
