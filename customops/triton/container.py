"""The target container's facts: where Triton lives, which backends and framework versions it ships,
and the glibc/libstdc++ version maxima its libraries provide. Read from the files, never from a table,
when a container root is available (the files are the truth; tables drift); `--triton-release` falls
back to a small table of verified facts and says which checks it cannot run.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from customops import safeio
from customops.elf.constants import EM_AARCH64, EM_X86_64, PF_X, PT_LOAD
from customops.errors import InputError
from customops.frameworks import PYTORCH, TENSORFLOW, VERSIONED, Framework, named
from customops.linker.target import LinkerTarget, live_target, target_for_root
from customops.textenum import TextEnum
from customops.triton.serverargs import (  # noqa: F401  (SERVER, SERVER_CWD, STAND_IN_HOSTS: imported from here)
    DEFAULT_BACKEND_DIRECTORY,
    SERVER,
    SERVER_CWD,
    STAND_IN_HOSTS,
    TRITON_HOME,
)

if TYPE_CHECKING:  # the ELF reader brings numpy: launch's cached start uses only the dataclasses (layout_only)
    from customops.elf.cache import ElfReader
    from customops.elf.records import ElfInfo

DEFAULT_BACKEND_DIR = DEFAULT_BACKEND_DIRECTORY


class FactsFrom(TextEnum):
    """Where a container's facts were read: its files, a profile of them, or the release table."""

    ROOT = "root"
    PROFILE = "profile"
    RELEASE = "release"


@dataclass(frozen=True)
class ContainerFacts:
    triton_version: str | None = None
    backends: tuple[str, ...] = ()  # present in the backend directory (empty when unknown)
    absent_backends: tuple[str, ...] = ()  # known to be absent (from the release table)
    # each framework's version (customops.frameworks.VERSIONED, a field each, in its order), e.g. "10.7.0" or "10"
    tensorrt: str | None = None
    onnxruntime: str | None = None
    tensorflow: str | None = None
    pytorch: str | None = None
    cuda: str | None = None
    libpython: str | None = None  # the SONAME of the one libpython a release's image ships (libpython3.12.so.1.0;
    # from its facts: a root's or a profile's libraries decide for themselves)
    glibc: str | None = None  # highest GLIBC_x defined by the container's libc
    glibcxx: str | None = None
    cxxabi: str | None = None
    known_from: FactsFrom = FactsFrom.ROOT
    missing: tuple[str, ...] = ()  # checks that need the container's files and cannot run

    def version_of(self, backend: str) -> str | None:
        """The version of the framework whose Triton backend is `backend` (None: unknown, or not a framework)."""
        framework = named(backend)
        return getattr(self, framework.backend) if framework in VERSIONED else None

    def record(self) -> dict[str, Any]:
        """The facts as profiles and the JSON report write them: `known_from` is their "source"."""
        return {("source" if key == "known_from" else key): (value.value if isinstance(value, FactsFrom) else value)
                for key, value in self.__dict__.items()}


@dataclass(frozen=True)
class Container:
    facts: ContainerFacts
    target: LinkerTarget | None  # None when only facts are known (profile or release table)
    backend_dir: str = DEFAULT_BACKEND_DIR
    server: str | None = SERVER
    server_args: tuple[str, ...] = field(default=())
    image: str | None = None  # a profile's: the image it was made from (profile create --image); --image's
    environment: tuple[tuple[str, str], ...] = ()  # --image: the configuration's Env (the server inherits it)
    notes: tuple[str, ...] = ()  # --image: what its entrypoint may do that is not modelled
    working_directory: str | None = None  # --image: its WorkingDir (else the NGC images' /opt/tritonserver)


def layout_only(root: str, backend_dir: str = DEFAULT_BACKEND_DIR) -> Container:
    """The container known only by where it lies (its root and backend directory), nothing read: what the
    process-wide loaders need to place the manifest's libraries (paths only), cheaply."""
    target = LinkerTarget(os.path.abspath(root), system_dirs=(), search_subdirs=(), lib_token="", platform="",
                          cache=None)
    return Container(ContainerFacts(), target, backend_dir)


def from_root(root: str, backend_dir: str = DEFAULT_BACKEND_DIR, reader: ElfReader | None = None) -> Container:
    from customops.elf.cache import ElfReader

    target = live_target() if os.path.abspath(root) == "/" else target_for_root(root)
    reader = reader or ElfReader()
    facts = read_facts(target, backend_dir, reader)
    server = SERVER if target.host_path(SERVER) else None
    return Container(facts, target, backend_dir, server)


def read_facts(target: LinkerTarget, backend_dir: str, reader: ElfReader) -> ContainerFacts:
    def host(path: str) -> str | None:
        return target.host_path(path)

    backends_host = host(backend_dir)
    backends = tuple(sorted(d for d in os.listdir(backends_host)
                            if os.path.isdir(os.path.join(backends_host, d)))) if backends_host else ()
    version_file = host(f"{TRITON_HOME}/TRITON_VERSION")
    triton_version = _read_text(version_file) if version_file else None
    libraries = _Libraries(target, backend_dir)
    glibc = glibcxx = cxxabi = None
    for soname, families in (("libc.so.6", ("GLIBC",)), ("libstdc++.so.6", ("GLIBCXX", "CXXABI"))):
        path = target.cache.lookup(soname, target.machine, target.elf_class) if target.cache else None
        path = path or next((f"{d}/{soname}" for d in target.system_dirs if host(f"{d}/{soname}")), None)
        found = host(path) if path else None
        if found is None:
            continue
        maxima = _definition_maxima(reader, found)
        if "GLIBC" in families:
            glibc = maxima.get("GLIBC")
        else:
            glibcxx, cxxabi = maxima.get("GLIBCXX"), maxima.get("CXXABI")
    versions: dict[str, Any] = {f.backend: _version(f, libraries, reader) for f in VERSIONED}  # its field: its value
    return replace(ContainerFacts(
        triton_version=triton_version,
        backends=backends,
        cuda=libraries.first_version("libcudart"),
        glibc=glibc, glibcxx=glibcxx, cxxabi=cxxabi,
    ), **versions)


@dataclass(frozen=True)
class _Libraries:
    """The versions in the file names of a container's libraries."""

    target: LinkerTarget
    backend_dir: str

    def versioned(self, directory: str, stem: str) -> str | None:
        """The version in a library's file name (libonnxruntime.so.1.20.1 -> 1.20.1), highest first."""
        folder = self.target.host_path(directory)
        if not folder or not os.path.isdir(folder):
            return None
        found = []
        for name in os.listdir(folder):
            match = re.fullmatch(re.escape(stem) + r"\.so\.(\d+(?:\.\d+)*)", name)
            if match:
                found.append(tuple(int(p) for p in match.group(1).split(".")))
        return ".".join(map(str, max(found))) if found else None

    def first_version(self, stem: str) -> str | None:
        """The version of the first directory holding it: every framework backend's (a backend shipping its own
        runtime is the one its libraries get), CUDA's, the system's."""
        for directory in (*(f"{self.backend_dir}/{f.backend}" for f in VERSIONED), "/usr/local/cuda/lib64",
                          *self.target.system_dirs):
            version = self.versioned(directory, stem)
            if version:
                return version
        return None


def _version(framework: Framework, libraries: _Libraries, reader: ElfReader) -> str | None:
    """A framework's version: the exact one its library's bytes tell, else the one in its library's file names."""
    directory = f"{libraries.backend_dir}/{framework.backend}"
    if framework.version_exact and (exact := framework_version(
            reader, libraries.target.host_path(f"{directory}/{framework.version_exact}"),
            EXACT_VERSION[framework.backend])):
        return exact
    if not framework.version_stem:
        return None
    if framework.version_anywhere:
        return libraries.first_version(framework.version_stem)
    return libraries.versioned(directory, framework.version_stem)


VERSION = re.compile(rb"\d+\.\d+\.\d+[0-9A-Za-z.+-]{0,40}")  # a release, with a pre-release or local part


def framework_version(reader: ElfReader, path: str | None, read: Callable[[ElfInfo, Any], str | None],
                      ) -> str | None:
    """A framework's exact version, read from its library's bytes by `read` (once per change on disk)."""
    from customops.elf.parse import open_mapped
    from customops.errors import ElfError

    if path is None:
        return None
    try:
        info = reader.read(path)
        data, _ = open_mapped(path)
        found = reader.facts(info, f"framework-version:{read.__name__}", lambda i: {"version": read(i, data) or ""})
    except (ElfError, ValueError, IndexError, struct.error):
        return None
    return found["version"] or None


def _string_at(data: Any, segments: list, address: int) -> str | None:
    """The NUL-terminated version string at a virtual address (inside a loaded segment's file bytes)."""
    for seg in segments:
        if seg.type == PT_LOAD and seg.vaddr <= address < seg.vaddr + seg.filesz:
            start = seg.offset + address - seg.vaddr
            end = data.find(b"\0", start, start + 64)
            match = VERSION.fullmatch(bytes(data[start:end])) if end > start else None
            return match.group().decode() if match else None
    return None


def tensorflow_version(info: ElfInfo, data: Any) -> str | None:
    """TF_Version() of libtensorflow_cc.so.2 (TensorFlow's C API) returns TF_VERSION_STRING ("2.21.0"): the
    address its body loads into the return register (x86-64 `lea rax, [rip + d]`; AArch64 `adrp x0` then
    `add x0, x0, #lo`), read from the file."""
    from customops.elf.header import program_headers, read_header

    found = info.symbols.lookup(b"TF_Version")
    if not found:
        return None
    entry = int(info.symbols.entries["st_value"][found[0]])
    segments = program_headers(data, read_header(data, info.path), info.path)
    code = next((bytes(data[s.offset + entry - s.vaddr:s.offset + entry - s.vaddr + 32]) for s in segments
                 if s.type == PT_LOAD and s.flags & PF_X and s.vaddr <= entry < s.vaddr + s.filesz), b"")
    if info.machine_code == EM_X86_64:
        at = code.find(b"\x48\x8d\x05")  # lea rax, [rip + disp32]
        if at >= 0:
            return _string_at(data, segments, entry + at + 7 + struct.unpack_from("<i", code, at + 3)[0])
    elif info.machine_code == EM_AARCH64:
        words = struct.unpack_from("<8I", code.ljust(32, b"\0"))
        for i, word in enumerate(words[:-1]):
            add = words[i + 1]
            if word & 0x9F00001F == 0x90000000 and add & 0xFFC003FF == 0x91000000:  # adrp x0; add x0, x0
                page = ((word >> 29 & 3) | (word >> 3 & 0x1FFFFC)) << 12
                page -= (1 << 33) if page & (1 << 32) else 0
                return _string_at(data, segments, ((entry + 4 * i) & ~0xFFF) + page + (add >> 10 & 0xFFF))
    return None


def torch_version(info: ElfInfo, data: Any) -> str | None:
    """TORCH_VERSION ("2.13.0") in libtorch_cpu.so: the ONNX exporter's producer version, stored as a string
    right after its producer name "pytorch" (torch/csrc/jit/serialization/export.cpp) in the read-only data."""
    from customops.elf.header import read_header, readonly_data

    for start, end in readonly_data(data, read_header(data, info.path), info.path, with_code=True):
        while (at := data.find(b"\0pytorch\0", start, end)) >= 0:
            near = bytes(data[at + 9:at + 9 + 96]).split(b"\0")
            version = next((w for w in near if VERSION.fullmatch(w)), None)
            if version:
                return version.decode()
            start = at + 1
    return None


# how a framework library's bytes tell its exact version, for each framework whose descriptor names one
EXACT_VERSION: dict[str, Callable[[ElfInfo, Any], str | None]] = {TENSORFLOW.backend: tensorflow_version,
                                                                   PYTORCH.backend: torch_version}


def _read_text(path: str) -> str | None:
    try:
        return safeio.read_text(path, safeio.SMALL_TEXT_LIMIT, errors="replace").strip() or None
    except InputError:
        if not os.path.lexists(path):
            return None
        raise


def _definition_maxima(reader: ElfReader, path: str) -> dict[str, str]:
    from customops.elf.summary import version_key

    best: dict[str, tuple[tuple[int, ...], str]] = {}
    for definition in reader.read(path).version_definitions:
        key = version_key(definition.name)
        if key and (key[0] not in best or key[1] > best[key[0]][0]):
            best[key[0]] = (key[1], definition.name)
    return {family: name for family, (_, name) in best.items()}


def from_release(name: str) -> Container:
    """A release's cited facts, and what follows from them (customops.triton.releases); no files."""
    from customops.triton.releases import release, releases

    row = release(name)
    if row is None or row.server is None:
        known = ", ".join(r.name for r in releases() if r.server)
        reason = "the built-in table knows too little of it (not its server)" if row else "unknown Triton release"
        raise InputError(name, f"{reason}: give its profile or its image (the table knows {known})")
    derived = row.derived()
    facts = ContainerFacts(triton_version=row.server,  # the table says which releases build TensorFlow's backend
                           absent_backends=() if row.tensorflow_backend else (TENSORFLOW.backend,),
                           cuda=row.value("cuda"), libpython=derived.get("libpython"),
                           glibc=derived.get("glibc"), glibcxx=derived.get("glibcxx"),
                           cxxabi=derived.get("cxxabi"), known_from=FactsFrom.RELEASE,
                           missing=("loading and symbol resolution (needs the container's libraries: use "
                                    "--container-root or a profile)",))
    versions: dict[str, Any] = {f.backend: row.value(f.backend) for f in VERSIONED}
    return Container(replace(facts, **versions), None)


def write_profile(container: Container, path: str, server_args: tuple[str, ...] = (), image: str | None = None
                  ) -> None:
    from customops.triton import profile

    profile.write(profile.create(container, server_args, image), path)


def read_profile(path: str, cache_dir: str | os.PathLike[str] | None) -> Container:
    """A profile's container: on the skeleton of its libraries when it has them, else its facts only. The
    skeleton is kept in `cache_dir`; None (--no-cache) builds it in a temporary directory removed at exit."""
    from pathlib import Path

    from customops.triton import profile
    from customops.triton.skeleton import materialize

    data = profile.read(path)  # the schema in full: every fact below has its type
    facts = dict(data["facts"])
    for key in ("backends", "absent_backends"):
        facts[key] = tuple(facts.get(key, ()))
    skeleton = materialize(data, Path(cache_dir) if cache_dir is not None else None, path)
    facts.pop("source", None)  # what the profile was made from: this container's facts are known from it
    facts["known_from"] = FactsFrom.PROFILE
    facts["missing"] = () if skeleton else (
        "loading and symbol resolution (this profile holds the container's facts but not its libraries)",)
    target = target_for_root(skeleton) if skeleton else None
    return Container(ContainerFacts(**facts), target, data.get("backend_dir", DEFAULT_BACKEND_DIR),
                     data.get("server"), tuple(data.get("server_args", ())), data.get("image"),
                     environment=tuple(sorted(data.get("environment", {}).items())),
                     working_directory=data.get("working_directory"))
