"""CO306 (from facts), CO501-CO503: what a custom library was built against versus what the container has.

Everything is read from the files: the library's DT_NEEDED and version needs, the container's library
file names and version definitions (customops.triton.container). No table of particular libraries is used.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from customops.elf.cache import ElfReader
from customops.elf.summary import version_key, version_maxima
from customops.errors import ElfError
from customops.findings import Finding
from customops.triton.plan import Context, LoadPlan, LoadStep

SONAME_MAJOR = re.compile(r"^(?P<stem>lib[\w+-]+)\.so\.(?P<major>\d+)$")


class Mismatch(NamedTuple):
    """A DT_NEEDED entry of another major version than the container's: "libnvinfer.so.8", "CO501",
    "TensorRT 8", "TensorRT 10"."""

    needed: str
    code: str
    needs: str
    has: str


def string_abi(plan: LoadPlan, prediction, ctx: Context, reader: ElfReader) -> list[Finding]:  # type: ignore[no-untyped-def]
    """CO503: a library whose std::string references use one libstdc++ ABI, linked against a framework
    library (from the container) that defines only the other."""
    from customops.elf.summary import cxx_abi

    def abi(path: str) -> dict:
        return reader.facts(reader.read(path), "cxx-abi", lambda i: cxx_abi(i).__dict__)

    loaded = {os.path.basename(o.name): o for o in prediction.objects}
    backend_dir = ctx.container.backend_dir  # type: ignore[attr-defined]
    findings = []
    for step in (*plan.preloads, *plan.dlopens):
        if step.purpose == "backend library":
            continue
        try:
            info = reader.read(step.source)
            mine = abi(step.source)
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
                findings.append(_finding("CO503", step, f"{step.path} uses the {flavour} std::string ABI; {needed} "
                                                        f"in the container uses the {other} one"))
    return findings


def check(plan: LoadPlan, ctx: Context, reader: ElfReader, loaded: bool) -> list[Finding]:
    """CO501/CO502 and CO306 from the facts. With the container's libraries at hand (`loaded`) the loading
    rules report both from the linker model's outcomes instead: CO501/CO502 as one finding with the library
    that is then not found (customops.rules.loading), CO306 from the real providers."""
    if loaded:
        return []
    facts = ctx.container.facts  # type: ignore[attr-defined]
    findings: list[Finding] = []
    for step in (*plan.preloads, *plan.dlopens):
        try:
            info = reader.read(step.source)
        except ElfError:
            continue
        findings += [_finding(m.code, step, f"{step.path} needs {m.needed} ({m.needs}); the container has {m.has}")
                     for m in major_mismatches(info, facts)]
        findings += _version_maxima(step, info, facts)
    return findings


def major_mismatches(info, facts) -> list[Mismatch]:  # type: ignore[no-untyped-def]
    """The library's TensorRT (CO501) and CUDA runtime (CO502) SONAMEs of another major version than the
    container's."""
    found = []
    for needed in info.needed:
        match = SONAME_MAJOR.match(needed)
        if not match:
            continue
        stem, major = match.group("stem"), match.group("major")
        if stem == "libnvinfer" and facts.tensorrt and facts.tensorrt.split(".")[0] != major:
            found.append(Mismatch(needed, "CO501", f"TensorRT {major}", f"TensorRT {facts.tensorrt}"))
        if stem == "libcudart" and facts.cuda and facts.cuda.split(".")[0] != major:
            found.append(Mismatch(needed, "CO502", f"CUDA {major}", f"CUDA {facts.cuda}"))
    return found


def _version_maxima(step: LoadStep, info, facts) -> list[Finding]:  # type: ignore[no-untyped-def]
    findings = []
    provided = {"GLIBC": facts.glibc, "GLIBCXX": facts.glibcxx, "CXXABI": facts.cxxabi}
    for family, needed in version_maxima(info).items():
        have = provided.get(family)
        if not have:
            continue
        need_key, have_key = version_key(needed), version_key(have)
        if need_key and have_key and need_key[1] > have_key[1]:
            findings.append(_finding("CO306", step, f"{step.path} needs {needed}; the container provides up to {have}",
                                     version=needed))
    return findings


def _finding(code: str, step: LoadStep, message: str, version: str | None = None) -> Finding:
    return Finding(code, message, model=step.model, library=step.path, file=step.source, version=version)
