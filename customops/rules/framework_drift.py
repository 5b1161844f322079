"""CO504's facts: which container framework library a library was built against another version of (from the
demangled namespace of a missing symbol and the framework's own symbols, with no list of frameworks), and what
to rebuild it against (the version the container's file names or facts give)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from customops.elf.cache import ElfReader
from customops.elf.demangle import demangle
from customops.errors import ElfError
from customops.linker.types import Binding
from customops.triton.plan import Context, LoadStep


def rebuild_against(step: LoadStep, framework: str, where: str, beside: tuple[str, ...], ctx: Context) -> str:
    """CO504's fix, naming what the container ships: the version in the framework library's real file name
    (libtensorflow_framework.so.2 -> libtensorflow_framework.so.2.15.0) or a sibling's (`beside`: the names in
    its backend directory), else the container's version of the step's framework (its facts), else the file it
    must be built against."""
    target = ctx.container.target
    names = [os.path.basename((target.resolve(where) if target else None) or where), *beside]
    pattern = re.compile(re.escape(framework) + r"\.(\d+(?:\.\d+)*)")
    versions = [m.group(1) for m in map(pattern.fullmatch, names) if m]
    major = framework.rsplit(".so.", 1)[-1] if ".so." in framework else ""
    fact = ctx.container.facts.version_of(step.loader.value)
    version = (f"{major}.{versions[0]}" if versions else
               fact if isinstance(fact, str) and re.fullmatch(r"\d+(\.\d+)+", fact) else None)
    if version:
        return (f"Rebuild against the framework version shipped in the container: {framework} version {version} "
                f"({where}).")
    return (f"Rebuild against the framework the container ships, {where} (no file name there gives its version "
            "beyond the SONAME): build inside the container, or against that library and its matching headers.")


def framework_of(binding: Binding, library: str, ctx: Context, reader: ElfReader,
                  backends: Mapping[str, tuple[str, ...]]) -> tuple[str, str, tuple[str, ...]] | None:
    """The container framework library (a DT_NEEDED entry found in a backend directory) that exports the
    missing symbol's namespace, its container path and the names beside it: `library` (a container path) was built
    against
    another version of it. Decided from the demangled name and the framework's own symbols, with no list of
    frameworks. `backends`: the backend directory's entries and their names (FileFacts.backends)."""
    name = demangle(binding.symbol)
    if "::" not in name:
        return None
    namespace = name.split("::", 1)[0]
    target = ctx.container.target
    backend_dir = ctx.container.backend_dir
    host = target.host_path(library) if target else None
    if target is None or host is None:
        return None
    try:
        needed = reader.read(host).needed
    except ElfError:
        return None
    mangled = f"_ZN{len(namespace)}{namespace}".encode()
    for directory, beside in backends.items():
        for name in needed:
            where = f"{backend_dir}/{directory}/{name}"
            candidate = target.host_path(where)
            if candidate:
                try:
                    if reader.read(candidate).symbols.names_containing(mangled).any():
                        return name, where, beside
                except ElfError:
                    continue
    return None
