"""CO503, and the version facts the loading rules report (CO501 and CO502 made here): what a custom library was
built against versus what the container has.

Everything is read from the files: the library's DT_NEEDED and version needs, the container's library
file names and version definitions (customops.triton.container). No table of particular libraries is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

from customops.codes import Code
from customops.elf.records import ElfInfo
from customops.elf.summary import version_key, version_maxima
from customops.emitters import emits
from customops.errors import ElfError
from customops.findings import Finding
from customops.frameworks import ONNXRUNTIME, PYTHON, TENSORRT, VERSIONED
from customops.rules.context import RuleContext
from customops.rules.needed import needed_not_found
from customops.rules.version_nodes import onnxruntime_release_mismatch, version_missing
from customops.triton.plan import LoadStep
from customops.triton.serverargs import SERVER_LIBRARY

NEEDS_PREDICTION = True
LIBPYTHON = re.compile(r"^libpython(?P<version>\d+\.\d+)\.so\.1\.0$")  # the interpreter's SONAME scheme
T = TypeVar("T")
SONAME_MAJOR = re.compile(r"^(?P<stem>lib[\w+-]+)\.so\.(?P<major>\d+)$")


class Mismatch(NamedTuple):
    """A DT_NEEDED entry of another major version than the container's: "libnvinfer.so.8", Code.CO501,
    "TensorRT 8", "TensorRT 10"."""

    needed: str
    code: Code
    needs: str
    has: str


class Shortfall(NamedTuple):
    """A symbol version the library needs beyond the newest the container's facts list: "GLIBCXX_3.4.32",
    "GLIBCXX_3.4.30"."""

    needed: str
    provided: str


class Undecided(NamedTuple):
    """What the facts cannot decide of a library: it needs libcudart.so.12, and the release's CUDA is not known."""

    model: str | None
    library: str
    needed: str  # the SONAME or symbol version it needs
    unknown: str  # what the facts do not say: "CUDA", "TensorRT", "GLIBCXX"


def check(ctx: RuleContext) -> list[Finding]:
    return string_abi_mismatches(ctx)


@emits(Code.CO503)
def string_abi_mismatches(ctx: RuleContext) -> list[Finding]:
    """A library whose std::string references use one libstdc++ ABI, linked against a framework library (from
    the container) that defines only the other."""
    from customops.elf.summary import cxx_abi

    reader = ctx.reader
    assert ctx.prediction is not None

    def abi(path: str) -> dict:
        return reader.facts(reader.read(path), "cxx-abi", lambda i: cxx_abi(i).__dict__)

    loaded = {os.path.basename(o.name): o for o in ctx.prediction.objects}
    backend_dir = ctx.triton.container.backend_dir
    findings = []
    for step in ctx.custom_steps:
        try:
            info = reader.read(step.host_path)
            mine = abi(step.host_path)
        except ElfError:
            continue
        for needed in info.needed:
            obj = loaded.get(needed)
            if obj is None or not obj.name.startswith(backend_dir + "/"):
                continue
            theirs = abi(obj.path)
            old_vs_new = mine["undefined_old"] and not theirs["defined_old"] and theirs["defined_cxx11"]
            new_vs_old = mine["undefined_cxx11"] and not theirs["defined_cxx11"] and theirs["defined_old"]
            if old_vs_new or new_vs_old:
                flavour, other = ("pre-C++11", "C++11") if old_vs_new else ("C++11", "pre-C++11")
                findings.append(Finding(Code.CO503, f"{step.path} uses the {flavour} std::string ABI; {needed} in "
                                                    f"the container uses the {other} one", model=step.model,
                                        library=step.path, file=step.host_path))
    return findings


def major_mismatches(info, facts) -> list[Mismatch]:
    """The library's TensorRT (CO501) and CUDA runtime (CO502) SONAMEs of another major version than the
    container's."""
    found = []
    for needed in info.needed:
        match = SONAME_MAJOR.match(needed)
        if not match:
            continue
        stem, major = match.group("stem"), match.group("major")
        if stem == TENSORRT.version_stem and facts.tensorrt and facts.tensorrt.split(".")[0] != major:
            found.append(Mismatch(needed, Code.CO501, f"{TENSORRT.label} {major}",
                                  f"{TENSORRT.label} {facts.tensorrt}"))
        if stem == "libcudart" and facts.cuda and facts.cuda.split(".")[0] != major:
            found.append(Mismatch(needed, Code.CO502, f"CUDA {major}", f"CUDA {facts.cuda}"))
    return found


def onnxruntime_nodes(info, facts) -> list[str]:
    """The ONNX Runtime version nodes (VERS_x.y.z) the library needs of libonnxruntime that the container's release
    does not define: each release defines only its own node, so one linked against another release is refused."""
    if not facts.onnxruntime:
        return []
    own = f"VERS_{facts.onnxruntime}"
    return [v.name for need in info.version_needs if need.file.startswith(f"{ONNXRUNTIME.c_api}.so")
            for v in need.versions if v.name.startswith("VERS_") and v.name != own and not v.is_weak]


NOT_LISTED = "a library the release's facts do not list"


def unknown_versions(info, facts) -> list[tuple[str, str]]:
    """(what the library needs, what the facts do not say) for each need the facts cannot decide. A DT_NEEDED
    library is decided by a version the facts state (libcudart.so.12 by the CUDA version, a framework's library by
    its version, libtritonserver.so by the server's), or by symbol versions the facts bound (libc.so.6,
    libstdc++.so.6, libgcc_s.so.1 by the GLIBC_, GLIBCXX_, CXXABI_ and GCC_ nodes the library needs of it); any
    other library is not decided (libcublas, libcudnn: the facts do not say which the release ships)."""
    found = []
    provided = _provided(facts)
    frameworks = {stem: f for f in VERSIONED for stem in (f.version_stem, f.c_api) if stem}
    families = {n.file: {key[0] for v in n.versions if (key := version_key(v.name))} for n in info.version_needs}
    for needed in info.needed:
        match = SONAME_MAJOR.match(needed)
        stem = match.group("stem") if match else needed.split(".so", 1)[0]
        if stem == "libcudart":
            if not facts.cuda:
                found.append((needed, "CUDA"))
        elif needed == SERVER_LIBRARY:  # Triton core: every release's server has it
            if not facts.triton_version:
                found.append((needed, "Triton"))
        elif LIBPYTHON.match(needed):  # decided by the one libpython the container's facts name
            if not facts.libpython:
                found.append((needed, PYTHON.label))
        elif stem in frameworks:
            if not getattr(facts, frameworks[stem].backend):
                found.append((needed, frameworks[stem].label))
        elif not families.get(needed) or not all(provided.get(family) for family in families[needed]):
            found.append((needed, NOT_LISTED))
    found += [(needed, family) for family, needed in version_maxima(info).items()
              if family in provided and not provided[family]]
    return found


def _provided(facts) -> dict[str, str | None]:
    """The newest symbol version of each family the container provides, by its facts."""
    from customops.triton.releases import libgcc_node

    return {"GLIBC": facts.glibc, "GLIBCXX": facts.glibcxx, "CXXABI": facts.cxxabi, "GCC": libgcc_node(facts.glibcxx)}


def from_facts(rules: RuleContext) -> list[Finding]:
    """CO501/CO502, CO306, CO505 and CO302 (another Python's libpython) from the container's facts, without its
    libraries."""
    facts = rules.triton.container.facts

    def held(info) -> tuple[list[Mismatch], list[Shortfall], list[str], list[str]]:
        return (major_mismatches(info, facts), version_shortfalls(info, facts), onnxruntime_nodes(info, facts),
                other_pythons(info, facts))

    findings: list[Finding] = []
    for step, (mismatches, shortfalls, nodes, pythons) in _each_library(rules, held):
        about = {"model": step.model, "library": step.path, "file": step.host_path}
        findings += [major_mismatch(m, f"{step.path} needs {m.needed} ({m.needs}); the container has {m.has}",
                                    **about) for m in mismatches]
        findings += [version_missing(f"{step.path} needs {s.needed}; the container provides up to {s.provided}",
                                     version=s.needed, **about) for s in shortfalls]
        findings += [onnxruntime_release_mismatch(
            f"{step.path} needs ONNX Runtime's version node {node}; the container's ONNX Runtime "
            f"{facts.onnxruntime} defines VERS_{facts.onnxruntime} only: it was linked against another release",
            version=node, **about) for node in nodes]
        findings += [python_missing(step.path, needed, facts.libpython, about) for needed in pythons]
    return findings


def other_pythons(info, facts) -> list[str]:
    """The libpython SONAMEs the library needs other than the one libpython the container's facts name (a
    release's image has one Python, Ubuntu's python3: libpython3.10.so.1.0 is absent from 24.12)."""
    if not facts.libpython:
        return []
    return [n for n in info.needed if LIBPYTHON.match(n) and n != facts.libpython]


def python_missing(library: str, needed: str, libpython: str | None, about: dict) -> Finding:
    """CO302 from the facts: the library needs another Python's libpython, which the container does not have."""
    def version(soname: str | None) -> str:
        match = LIBPYTHON.match(soname or "")
        return match.group("version") if match else "?"

    return needed_not_found(f"{library} needs {needed} ({PYTHON.label} {version(needed)}); the container's "
                            f"{PYTHON.label} is {version(libpython)}, whose {libpython} is its only libpython",
                            predicted=f"{needed}: cannot open shared object file: No such file or directory", **about)


def undecided(rules: RuleContext) -> list[Undecided]:
    """Without the container's libraries: what its facts cannot decide of each library (a release whose CUDA no
    source states, for a library that needs libcudart.so.12). Not a finding, and not a pass: the upgrade matrix
    shows such a target as undecided for the model."""
    facts = rules.triton.container.facts
    return [Undecided(step.model, step.path, needed, what)
            for step, unknown in _each_library(rules, lambda info: unknown_versions(info, facts))
            for needed, what in unknown]


def _each_library(rules: RuleContext, compute: Callable[[ElfInfo], T]) -> Iterator[tuple[LoadStep, T]]:
    """(step, compute(its library)) for each step whose library is an ELF file, computed once per library: a
    thousand models loading one op library hold one library against the facts."""
    done: dict[str, T | None] = {}
    for step in rules.steps:
        if step.host_path not in done:
            try:
                done[step.host_path] = compute(rules.reader.read(step.host_path))
            except ElfError:
                done[step.host_path] = None
        value = done[step.host_path]
        if value is not None:
            yield step, value


def major_mismatch(mismatch: Mismatch, message: str, **fields: Any) -> Finding:
    """The finding of a mismatched major: its code's emitter's."""
    return (tensorrt_major if mismatch.code == Code.CO501 else cuda_major)(message, **fields)


@emits(Code.CO501)
def tensorrt_major(message: str, **fields: Any) -> Finding:
    """A library that needs libnvinfer of another major version than the container's TensorRT."""
    return Finding(Code.CO501, message, **fields)


@emits(Code.CO502)
def cuda_major(message: str, **fields: Any) -> Finding:
    """A library that needs libcudart of another major version than the container's CUDA."""
    return Finding(Code.CO502, message, **fields)


def version_shortfalls(info, facts) -> list[Shortfall]:
    """The GLIBC, GLIBCXX, CXXABI and GCC versions the library needs beyond the newest the container provides
    (from the container's facts, without its libraries: CO306 from the facts)."""
    found = []
    provided = _provided(facts)
    for family, needed in version_maxima(info).items():
        have = provided.get(family)
        if not have:
            continue
        need_key, have_key = version_key(needed), version_key(have)
        if need_key and have_key and need_key[1] > have_key[1]:
            found.append(Shortfall(needed, have))
    return found
