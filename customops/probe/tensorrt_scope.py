"""What a TensorRT plugin library's own dependencies bring, as ld.so on this machine would load them: the files
it needs that are missing here (they get placeholders), and the names its load scope defines (no stub may
stand in for one: a stub returning 0 would shadow the real definition for every library after it).

The search is customops' model of ld.so (customops.linker.search) run on this machine, breadth-first over
DT_NEEDED as _dl_map_object_deps walks it; libnvinfer.so.N is the stand-in's, so it is neither searched
nor counted."""

from __future__ import annotations

import contextlib
import os
import re
import sys

from customops.elf.cache import ElfReader
from customops.elf.records import ElfInfo
from customops.errors import ElfError
from customops.frameworks import TENSORRT
from customops.linker.linkmap import LinkMap
from customops.linker.search import LibrarySearch, LoadFailed
from customops.linker.target import live_target
from customops.linker.types import Environment

NEEDED = re.compile(re.escape(TENSORRT.c_api) + r"\.so\.(\d+)")  # libnvinfer.so.N
SONAME = re.compile(r"[A-Za-z0-9_.+-]+")  # a file name a placeholder can carry as its SONAME
SCOPE_LIMIT = 512  # libraries read at most: a hostile dependency graph cannot make the plan unbounded


def _search(info: ElfInfo) -> LibrarySearch:
    search = LibrarySearch(live_target(), Environment(), sys.executable)
    search.machine = (info.machine_code, info.elf_class)
    return search


def missing(path: str, info: ElfInfo) -> set[str]:
    """The files the library needs (DT_NEEDED, but libnvinfer) that ld.so would not find here."""
    search = _search(info)
    loader = LinkMap(path, path, info, None, os.path.dirname(path), 0)
    lacking = set()
    for name in info.needed:
        with contextlib.suppress(LoadFailed):  # a refused candidate: the load fails in the child, as it would
            if not NEEDED.fullmatch(name) and SONAME.fullmatch(name) and search.find(name, loader)[1] is None:
                lacking.add(name)
    return lacking


def defined_in_scope(path: str, info: ElfInfo, reader: ElfReader, names: list[str]) -> set[str]:
    """Which of `names` a library of `path`'s load scope (its DT_NEEDED closure found here) defines."""
    search = _search(info)
    queue = [LinkMap(path, path, info, None, os.path.dirname(path), 0)]
    seen = {os.path.realpath(path)}
    wanted = {name.encode(): name for name in names}
    defined: set[str] = set()
    while queue and len(seen) < SCOPE_LIMIT and len(defined) < len(wanted):
        loader = queue.pop(0)
        for name in loader.info.needed:
            found = None
            with contextlib.suppress(LoadFailed):
                if not NEEDED.fullmatch(name):
                    found = search.find(name, loader)[1]
            if found is None or os.path.realpath(found) in seen:
                continue
            seen.add(os.path.realpath(found))
            with contextlib.suppress(OSError, ElfError, ValueError):
                dependency = reader.read(found)
                defined |= {text for raw, text in wanted.items() if _defines(dependency, raw)}
                queue.append(LinkMap(found, found, dependency, None, os.path.dirname(found), 0))
    return defined


def _defines(info: ElfInfo, name: bytes) -> bool:
    """Whether the library's dynamic symbol table defines `name` (a definition, not a reference)."""
    table = info.symbols
    sections = table.entries["st_shndx"]
    return any(int(sections[i]) != 0 for i in table.lookup(name))
