"""A model of glibc's dynamic linker: what it will find, bind and reject, without running any library.

The rules and their sources are in reference/linker.md; every rule here has an oracle test that runs
the real ld.so on the same scenario (tests/test_linker_*.py). In outline:

* search (`elf/dl-load.c` `_dl_map_object`): already loaded by name or SONAME; the RPATH chain of the
  loader, its loaders and the executable, only when the loader has no RUNPATH; LD_LIBRARY_PATH; the
  loader's own RUNPATH; ld.so.cache; the default directories; hwcaps subdirectories inside each
  directory; wrong class or machine skipped; `$ORIGIN`, `$LIB`, `$PLATFORM`; DF_1_NODEFLIB.
* scopes: the global scope is the executable, the preloads, their breadth-first NEEDED closure and
  every RTLD_GLOBAL dlopen; a dlopen'ed object sees the global scope then its own breadth-first local
  scope (RTLD_DEEPBIND: the other way round).
* binding (`elf/dl-lookup.c` `do_lookup_x`, `check_match`): first acceptable definition in scope
  order; weak as global unless LD_DYNAMIC_WEAK; GNU_UNIQUE through one process-wide table; protected
  and -Bsymbolic definitions bind to themselves; symbol versions matched exactly.
* outcomes (`elf/dl-version.c`, relocation): missing version nodes, undefined symbols at load or at
  the first call under lazy binding, each with the message ld.so or dlerror() prints.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from customops import safeio
from customops.elf.cache import ElfReader
from customops.elf.constants import (
    BIND_NAMES,
    DF_1_PIE,
    DF_SYMBOLIC,
    RELOC_COPY,
    RELOC_LAZY,
    RELOC_NONE,
    SHN_ABS,
    SHN_UNDEF,
    STB_GLOBAL,
    STB_GNU_UNIQUE,
    STB_LOCAL,
    STB_WEAK,
    STT_COMMON,
    STT_FUNC,
    STT_GNU_IFUNC,
    STT_NOTYPE,
    STT_OBJECT,
    STT_TLS,
    STV_HIDDEN,
    STV_INTERNAL,
    STV_PROTECTED,
    TYPE_NAMES,
    VERSYM_HIDDEN,
    VERSYM_INDEX,
    VISIBILITY_NAMES,
)
from customops.elf.hashes import gnu_hashes
from customops.elf.header import GIT_LFS_POINTER, not_elf_kind
from customops.elf.records import ElfInfo
from customops.errors import ElfError, InputError
from customops.linker.target import LinkerTarget

ALLOWED_TYPES = {STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_COMMON, STT_TLS, STT_GNU_IFUNC}
NOT_FOUND = "cannot open shared object file: No such file or directory"
PERMISSION_DENIED = "Permission denied"  # strerror(EACCES)
# The same sets as tables indexed by st_info's type and binding and st_other's visibility (np.isin costs more
# than a whole small library's lookups).
_ALLOWED_TYPE = np.isin(np.arange(16), list(ALLOWED_TYPES))
_LOOKUP_BIND = np.isin(np.arange(16), (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE))
_HIDDEN = np.isin(np.arange(4), (STV_HIDDEN, STV_INTERNAL))


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    """The part of the process environment ld.so reads."""

    library_path: str | None = None  # LD_LIBRARY_PATH
    preload: str | None = None  # LD_PRELOAD
    bind_now: bool = False  # LD_BIND_NOW
    dynamic_weak: bool = False  # LD_DYNAMIC_WEAK
    cwd: str = "/"


@dataclass(frozen=True)
class Dlopen:
    """One dlopen() call. `caller` is the object calling dlopen (its RPATH/RUNPATH apply to a bare
    name); None means the executable. `calls` are functions then looked up with dlsym and called."""

    path: str
    lazy: bool = False
    make_global: bool = False
    deepbind: bool = False
    calls: tuple[str, ...] = ()
    caller: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Scenario:
    executable: str  # target path of the program ld.so starts
    environment: Environment = Environment()
    steps: tuple[Dlopen, ...] = ()


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchAttempt:
    source: str  # e.g. "RPATH of libtop.so", "LD_LIBRARY_PATH", "ld.so.cache", "system directories"
    path: str
    result: str  # "found", "not found", "wrong ELF class", "wrong machine", "already loaded", ...


@dataclass(frozen=True)
class FileProblem:
    """Why a file a step needs could not be opened or mapped, typed, beyond what dlerror() says: `kind` is
    "permission denied" (it exists, but the process cannot read it or search a directory above it) or
    "git-lfs-pointer" (a Git LFS pointer file in place of the library: elf.not_elf_kind)."""

    path: str  # the target path as requested
    kind: str


@dataclass(frozen=True)
class Search:
    name: str
    requested_by: str
    attempts: tuple[SearchAttempt, ...]
    found: str | None
    error: str | None


@dataclass(frozen=True)
class Definition:
    object: str  # l_name of the defining object
    symbol: bytes
    version: str | None
    binding: str
    type: str
    visibility: str
    size: int


@dataclass(frozen=True)
class Binding:
    referrer: str
    symbol: bytes
    version: str | None
    relocation: str  # "now", "lazy" or "copy"
    weak_reference: bool
    winner: Definition | None
    losers: tuple[Definition, ...] = ()
    reason: str = ""  # why the winner won when scope order alone does not say (unique, protected, ...)
    error: str = ""  # ld.so's message when the lookup fails with more than "undefined symbol"


@dataclass(frozen=True)
class CallOutcome:
    symbol: str
    status: str  # "ok" or "not found"
    message: str
    definition: Definition | None


@dataclass(frozen=True)
class StepOutcome:
    """What one preload or dlopen does. `status`: loaded | failed | ignored | fatal | crash."""

    kind: str  # "startup", "preload", "dlopen"
    request: str
    label: str
    status: str
    message: str
    warnings: tuple[str, ...]
    loaded: tuple[str, ...]
    searches: tuple[Search, ...]
    unresolved: tuple[Binding, ...]  # references that fail (at load, or at first call when lazy)
    lazy_failures: tuple[Binding, ...]
    version_errors: tuple[str, ...]
    calls: tuple[CallOutcome, ...] = ()
    problem: FileProblem | None = None  # what the failing file is, where the error's text does not say

    @property
    def ok(self) -> bool:
        return self.status == "loaded"

    def lazy_failure_messages(self, progname: str) -> list[str]:
        """What ld.so prints, and the process dies with (exit 127), when each lazy failure is first called."""
        return [f"{progname}: symbol lookup error: {_undefined(b)}" for b in self.lazy_failures]


@dataclass(frozen=True)
class LoadedObject:
    name: str  # l_name
    path: str  # host path
    soname: str | None
    loaded_by: str | None
    step: int  # index of the outcome that loaded it


class _Bound(NamedTuple):
    """A binding as the model stores it: compact, turned into a Binding record only when asked for."""

    referrer: _Object
    name: bytes
    version: str | None
    relocation: str
    weak_reference: bool
    winner: tuple[_Object, int] | None
    losers: tuple[tuple[_Object, int], ...]
    reason: str
    error: str


@dataclass
class Prediction:
    outcomes: list[StepOutcome]
    objects: list[LoadedObject]
    global_scope: list[str]
    raw_bindings: dict[tuple[str, bytes], _Bound] = field(repr=False)
    relocated_objects: dict[str, _Object] = field(repr=False)
    exit_message: str | None = None  # set when the process dies (startup failure, lazy call failure)

    def binding(self, referrer: str, symbol: str | bytes) -> Binding | None:
        key = symbol.encode() if isinstance(symbol, str) else symbol
        raw = self.raw_bindings.get((referrer, key))
        if raw is not None:
            return _binding(raw)
        obj = self.relocated_objects.get(referrer)
        if obj is not None:
            for i in obj.definitions(key):
                at = np.searchsorted(obj.bulk_bound, i)
                if at < len(obj.bulk_bound) and obj.bulk_bound[at] == i:
                    return _binding(_self_binding(obj, i))
        return None

    def bindings(self) -> Iterator[Binding]:
        yield from (_binding(raw) for raw in self.raw_bindings.values())
        for obj in self.relocated_objects.values():
            yield from (_binding(_self_binding(obj, i)) for i in obj.bulk_bound.tolist())

    @property
    def ok(self) -> bool:
        return self.exit_message is None and all(o.status in ("loaded",) for o in self.outcomes)

    def interpositions(self, involving: set[str] | None = None) -> Iterator[Binding]:
        """Bindings where another object's definition lost to the winner; with `involving`, only those
        whose winner or a loser is one of these objects (converting every binding of two framework
        libraries' shared C++ definitions costs more than all the rest of a check)."""
        return (_binding(raw) for raw in self.raw_bindings.values() if raw.losers and raw.winner is not None
                and (involving is None or raw.winner[0].name in involving
                     or any(loser[0].name in involving for loser in raw.losers)))


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class _Object:
    """ld.so's struct link_map, for one loaded object."""

    def __init__(self, name: str, host: str, info: ElfInfo, loader: _Object | None, origin: str | None,
                 step: int) -> None:
        self.name = name
        self.host = host
        self.info = info
        self.loader = loader
        self.origin = origin
        self.step = step
        self.names = {name} if name else set()
        self.file_id = (info.identity.dev, info.identity.ino)
        self.loaded = True  # False once a failed dlopen unloads it
        self.seq = 0  # position in load order
        # The RPATH search walks the loader chain: the nearest loader above this object that has an RPATH,
        # and the first object of the chain, spare walking thousands of loaders without one.
        self.rpath_next: _Object | None = (None if loader is None else loader if loader.effective_rpath
                                           else loader.rpath_next)
        self.top: _Object = self if loader is None else loader.top
        self.searchlist: list[_Object] = []  # set for the executable and dlopen roots
        self.scope: list[list[_Object]] = []
        self.relocated = False
        self.is_global = False
        self.copy_addresses: set[int] | None = None
        self._definitions: dict[bytes, tuple[int, ...]] = {}
        self.bulk_bound = np.empty(0, dtype=np.intp)  # sorted indices of relocations bound to itself in bulk

    def matches(self, name: str) -> bool:
        if name in self.names:
            return True
        if self.info.soname == name:
            self.names.add(name)
            return True
        return False

    @property
    def effective_rpath(self) -> tuple[str, ...]:
        """elf_get_dynamic_info: with DT_RUNPATH present, DT_RPATH is ignored."""
        return () if self.info.runpath else self.info.rpath

    def definitions(self, symbol: bytes, gnu: int | None = None) -> tuple[int, ...]:
        """Symbol indices named `symbol`, found through the object's own hash table in chain order:
        exactly what do_lookup_x walks (an object without one is never searched: l_nbuckets == 0)."""
        found = self._definitions.get(symbol)
        if found is None:
            found = self.info.symbols.lookup(symbol, gnu) if self.info.symbols.has_hash_table else ()
            self._definitions[symbol] = found
        return found

    def prefetch(self, names: list[bytes], hashes: np.ndarray) -> None:
        """`definitions` of many names in one pass over the hash table (the same walk, in bulk)."""
        if not self.info.symbols.has_hash_table:
            return
        found = self.info.symbols.lookup_many(names, hashes)
        if found is not None:
            self._definitions.update(zip(names, found, strict=True))

    @cached_property
    def matchable(self) -> np.ndarray:
        """`_matchable` of every symbol, once per object: each referrer's batch reads its candidates' rows."""
        return _matchable(self.info.symbols.entries)

    @cached_property
    def export_halves(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted hash halves of every symbol a lookup could find here, and those occurring more than once
        (a name under several versions, or a hash collision): answers "may this object export X?" in bulk."""
        symbols = self.info.symbols
        if not symbols.has_hash_table or not symbols.count:
            return np.empty(0, np.uint32), np.empty(0, np.uint32)
        e = symbols.entries
        mask = (e["st_shndx"] != SHN_UNDEF) | (e["st_value"] != 0)
        mask[0] = False
        values, counts = np.unique(symbols.hash_halves[mask], return_counts=True)
        return values, values[counts > 1]


class _Scope:
    """A referrer's lookup scope flattened (search order, each object once), with an index of what its objects
    may export: every object's export hash halves sorted together, each with the object's position. A batch of
    relocations finds the objects that may define each name with two binary searches per name, instead of one
    membership test per object of the scope, which made a chain of thousands of libraries quadratic."""

    def __init__(self, scopes: list[list[_Object]]) -> None:
        self.scopes = scopes  # keeps the lists alive: their ids are the key this scope is cached under
        self.objects: list[_Object] = []
        seen: set[int] = set()
        for scope in scopes:
            for o in scope:
                if id(o) not in seen:
                    seen.add(id(o))
                    self.objects.append(o)
        self.all_gnu = all(o.info.symbols.uses_gnu_hash for o in self.objects)
        self._members = seen
        # Batch decisions by (name, version hash, version id, hidden, PLT, referrer is the executable):
        # (winner, losers), or None where the per-symbol lookup decides (see _Process._bind_remembered).
        self.decided: dict[tuple, tuple[tuple[_Object, int] | None, tuple[tuple[_Object, int], ...]] | None] = {}

    def __contains__(self, obj: _Object) -> bool:
        return id(obj) in self._members

    @cached_property
    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        halves = [o.export_halves[0] for o in self.objects]
        sizes = np.fromiter(map(len, halves), dtype=np.intp, count=len(halves))
        values = np.concatenate(halves) if halves else np.empty(0, np.uint32)
        positions = np.repeat(np.arange(len(halves)), sizes)
        order = np.argsort(values, kind="stable")  # equal halves stay in scope order
        return values[order], positions[order]

    def count(self, queries: np.ndarray) -> np.ndarray:
        """How many objects of the scope may export each queried hash half."""
        values, _positions = self._index
        return np.searchsorted(values, queries, "right") - np.searchsorted(values, queries, "left")

    def candidates(self, half: int) -> list[_Object]:
        """The objects that may export one hash half, in scope order."""
        values, positions = self._index
        left, right = np.searchsorted(values, half, "left"), np.searchsorted(values, half, "right")
        return [self.objects[p] for p in positions[left:right].tolist()]  # sorted stably: in scope order

    def exporters(self, queries: np.ndarray) -> list[tuple[_Object, np.ndarray]]:
        """The objects that may export each queried hash half, in scope order, each with the mask of the
        queries it may answer: `queries ∈ o.export_halves[0]` for every object of the scope that has one."""
        values, positions = self._index
        left = np.searchsorted(values, queries, "left")
        counts = np.searchsorted(values, queries, "right") - left
        total = int(counts.sum())
        if not total:
            return []
        query = np.repeat(np.arange(len(queries)), counts)
        at = np.repeat(left - np.cumsum(counts) + counts, counts) + np.arange(total)
        where = positions[at]
        order = np.argsort(where, kind="stable")
        where, query = where[order], query[order]
        starts = np.flatnonzero(np.diff(where, prepend=-1))
        found = []
        for p, hits in zip(where[starts].tolist(), np.split(query, starts[1:]), strict=True):
            mask = np.zeros(len(queries), dtype=bool)
            mask[hits] = True
            found.append((self.objects[p], mask))
        return found


class _Failure(Exception):
    """A load error: `message` is what dlerror() returns, `reason` the part after the object name."""

    def __init__(self, message: str, reason: str | None = None, problem: FileProblem | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or message
        self.problem = problem


class Linker:
    """Simulates one process: the executable's startup, then each dlopen step in order."""

    def __init__(self, target: LinkerTarget, reader: ElfReader | None = None) -> None:
        self.target = target
        self.reader = reader or ElfReader()

    def run(self, scenario: Scenario) -> Prediction:
        return _Process(self, scenario).run()


class _Process:
    def __init__(self, linker: Linker, scenario: Scenario) -> None:
        self.target = linker.target
        self.reader = linker.reader
        self.scenario = scenario
        self.env = scenario.environment
        self.objects: list[_Object] = []
        # Indexes over `objects` (ld.so walks its list of loaded objects; thousands of objects make that
        # walk quadratic here): every name and SONAME an object answers to, and every file identity.
        self._named: dict[str, list[_Object]] = {}
        self._files: dict[tuple[int, int], list[_Object]] = {}
        self.global_scope: list[_Object] = []
        self.unique: dict[bytes, tuple[_Object, int]] = {}
        self.bindings: dict[tuple[str, bytes], _Bound] = {}
        self.outcomes: list[StepOutcome] = []
        self.main: _Object | None = None
        self.progname = scenario.executable
        self.exit_message: str | None = None
        self._lookup_memo: dict[tuple, tuple] = {}
        self._flat_scopes: dict[tuple[int, ...], _Scope] = {}
        self._relocated_objects: list[_Object] = []
        self._version_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._version_ids: dict[str, int] = {}
        self._missing_dirs: dict[str, bool] = {}
        self._hashes: dict[bytes, int] = {}  # GNU hashes of the names looked up one by one, computed in batches
        # per-step collectors
        self._searches: list[Search] = []
        self._warnings: list[str] = []

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> Prediction:
        self._startup()
        if self.exit_message is None:
            for step in self.scenario.steps:
                self._dlopen(step)
                if self.exit_message is not None:
                    break
        return Prediction(
            outcomes=self.outcomes,
            objects=[LoadedObject(o.name, o.host, o.info.soname, o.loader.name if o.loader else None, o.step)
                     for o in self.objects],
            global_scope=[o.name for o in self.global_scope],
            raw_bindings=self.bindings,
            relocated_objects={o.name: o for o in self._relocated_objects},
            exit_message=self.exit_message,
        )

    def _outcome(self, kind: str, request: str, label: str, status: str, message: str, loaded: list[_Object],
                 unresolved: list[Binding], lazy: list[Binding], version_errors: list[str],
                 calls: tuple[CallOutcome, ...] = (), problem: FileProblem | None = None) -> StepOutcome:
        outcome = StepOutcome(kind, request, label, status, message, tuple(self._warnings),
                              tuple(o.name for o in loaded), tuple(self._searches), tuple(unresolved),
                              tuple(lazy), tuple(version_errors), calls, problem)
        self.outcomes.append(outcome)
        self._searches, self._warnings = [], []
        return outcome

    # -- startup -----------------------------------------------------------------------------
    def _startup(self) -> None:
        exe_path = self.scenario.executable
        host = self.target.host_path(exe_path)
        if host is None:
            raise ElfError(exe_path, "executable not found in the target")
        info = self.reader.read(host)
        real = self.target.resolve(exe_path) or exe_path
        # ld.so's l_name for the executable is "", printed as the program name (argv[0]).
        main = _Object(exe_path, host, info, None, os.path.dirname(real), 0)
        self.main = main
        self.host_machine = (info.machine_code, info.elf_class)
        self._append(main)
        if info.interpreter:
            interp_host = self.target.host_path(info.interpreter)
            if interp_host:
                rtld = _Object(info.interpreter, interp_host, self.reader.read(interp_host), None,
                               os.path.dirname(info.interpreter), 0)
                self._append(rtld)
                self.rtld = rtld
        preloads: list[_Object] = []
        for name in _split_preload(self.env.preload):
            step = len(self.outcomes)
            try:
                obj = self._map_object(name, main, step)
            except _Failure as failure:
                self._warnings.append(
                    f"ERROR: ld.so: object '{name}' from LD_PRELOAD cannot be preloaded "
                    f"({_preload_reason(failure.reason)}): ignored."
                )
                self._outcome("preload", name, "LD_PRELOAD", "ignored", self._warnings[-1], [], [], [], [],
                              problem=failure.problem)
                continue
            if obj not in preloads and obj is not main:
                preloads.append(obj)
            self._outcome("preload", name, "LD_PRELOAD", "loaded", "", [obj], [], [], [])
        try:
            searchlist = self._map_deps(main, preloads, 0)
        except _Failure as failure:
            self.exit_message = f"{self.progname}: error while loading shared libraries: {failure.message}"
            self._outcome("startup", exe_path, "", "fatal", self.exit_message, [], [], [], [], problem=failure.problem)
            return
        main.searchlist = searchlist
        self.global_scope = list(searchlist)
        for obj in searchlist:
            obj.is_global = True
            obj.scope = [self.global_scope]
        errors = self._check_versions(searchlist)
        if errors:
            self.exit_message = f"{self.progname}: {errors[0]}"
            self._outcome("startup", exe_path, "", "fatal", self.exit_message, searchlist, [], [], errors)
            return
        lazy = not self.env.bind_now
        unresolved, lazy_fail, crash = self._relocate(searchlist, lazy)
        if crash:
            self.exit_message = crash
            self._outcome("startup", exe_path, "", "crash", crash, searchlist, unresolved, lazy_fail, [])
            return
        if unresolved:
            first = unresolved[0]
            self.exit_message = f"{self.progname}: symbol lookup error: {_undefined(first)}"
            self._outcome("startup", exe_path, "", "fatal", self.exit_message, searchlist, unresolved, lazy_fail, [])
            return
        self._outcome("startup", exe_path, "", "loaded", "", searchlist, [], lazy_fail, [])

    # -- dlopen ------------------------------------------------------------------------------
    def _dlopen(self, step: Dlopen) -> None:
        assert self.main is not None
        caller = self._object_named(step.caller) if step.caller else self.main
        before = len(self.objects)
        index = len(self.outcomes)
        try:
            root = self._map_object(step.path, caller or self.main, index, dlopen=True)
            if root.info.noopen and len(self.objects) > before:
                raise _Failure(f"{root.name}: shared object cannot be dlopen()ed")
            new = self.objects[before:]
            if root in new or not root.searchlist:
                root.searchlist = self._map_deps(root, [], index)
            new = self.objects[before:]
            errors = self._check_versions(new)
            if errors:
                raise _Failure(errors[0])
        except _Failure as failure:
            self._unload(before)
            self._outcome("dlopen", step.path, step.label, "failed", failure.message, [], [], [], [],
                          problem=failure.problem)
            return
        for obj in new:
            obj.scope = [root.searchlist, self.global_scope] if step.deepbind else [self.global_scope, root.searchlist]
        lazy = step.lazy and not self.env.bind_now
        unresolved, lazy_fail, crash = self._relocate(list(reversed(root.searchlist)), lazy, only=set(new))
        if crash:
            self.exit_message = crash
            self._outcome("dlopen", step.path, step.label, "crash", crash, new, unresolved, lazy_fail, [])
            return
        if unresolved:
            self._unload(before)  # dlopen unloads what it mapped; the bindings made so far stay on record
            self._outcome("dlopen", step.path, step.label, "failed", _undefined(unresolved[0]), [], unresolved,
                          lazy_fail, [])
            return
        if step.make_global:  # the global scope changes: cached lookups no longer hold
            self._lookup_memo.clear()
            self._flat_scopes.clear()
            for obj in root.searchlist:
                if not obj.is_global:
                    obj.is_global = True
                    self.global_scope.append(obj)
        calls = tuple(self._call(root, name) for name in step.calls)
        self._outcome("dlopen", step.path, step.label, "loaded", "", new, [], lazy_fail, [], calls)

    def _call(self, root: _Object, name: str) -> CallOutcome:
        """dlsym(handle, name) searches the handle's own dependency tree, newest version first. Whether
        the function then reaches a lazily unresolved symbol depends on its code: see lazy_failures."""
        symbol = name.encode()
        for obj in root.searchlist:
            found = self._find_in(obj, symbol, None, True, newest=True)
            if found is not None:
                return CallOutcome(name, "ok", "", _definition(obj, found))
        return CallOutcome(name, "not found", f"{root.name}: undefined symbol: {name}", None)

    # -- mapping objects ---------------------------------------------------------------------
    def _append(self, obj: _Object) -> None:
        obj.seq = len(self.objects)
        self.objects.append(obj)
        # The executable the kernel mapped has the name "" and no file identity in ld.so's list: a dlopen
        # of its path opens the file again (and is refused as an executable); only its SONAME matches.
        names = () if obj is self.main else obj.names
        for name in (*names, *((obj.info.soname,) if obj.info.soname else ())):
            self._named.setdefault(name, []).append(obj)
        if obj is not self.main:
            self._files.setdefault(obj.file_id, []).append(obj)

    def _add_name(self, obj: _Object, name: str) -> None:
        if name not in obj.names:
            obj.names.add(name)
            self._named.setdefault(name, []).append(obj)

    def _unload(self, before: int) -> None:
        """Forget the objects a failed dlopen mapped (the last ones loaded)."""
        for obj in self.objects[before:]:
            obj.loaded = False
        del self.objects[before:]

    def _object_named(self, name: str) -> _Object | None:
        """The first loaded object, in load order, whose name or SONAME is `name` (_dl_name_match_p)."""
        return _first_loaded(self._named.get(name))

    def _map_object(self, name: str, loader: _Object, step: int, dlopen: bool = False) -> _Object:
        """_dl_map_object: reuse a loaded object by name or SONAME, else search and open."""
        found = self._object_named(name)
        if found is not None:
            return found
        if "/" in name:
            path = self._expand(name, loader)
            if path is None:
                raise _Failure(f"{name}: {NOT_FOUND}", NOT_FOUND)
            verdict, detail = self._verify(path)
            if verdict == "absent" and (detail == PERMISSION_DENIED or self._access_denied(path)):
                # open() fails with EACCES: dlerror() names errno's text, as for ENOENT
                reason = f"cannot open shared object file: {PERMISSION_DENIED}"
                raise _Failure(f"{name}: {reason}", reason, FileProblem(name, "permission denied"))
            if verdict in ("absent", "other-machine"):
                raise _Failure(f"{name}: {NOT_FOUND}", NOT_FOUND)
            if verdict != "ok":
                raise _Failure(f"{name}: {detail}", detail, self._not_elf(name, path, detail))
            return self._new_object(path, name, loader, step, origin_from=path)
        search, path = self._search(name, loader)
        self._searches.append(search)
        if path is None:
            raise _Failure(search.error or f"{name}: {NOT_FOUND}", (search.error or NOT_FOUND).split(": ", 1)[-1])
        return self._new_object(path, name, loader, step, origin_from=path)

    def _new_object(self, path: str, requested: str, loader: _Object, step: int, origin_from: str) -> _Object:
        host = self._host(path)
        assert host is not None
        try:
            info = self.reader.read(host)
        except ElfError as exc:  # what ld.so refuses to map says the same (elf.py's _check_mapping)
            raise _Failure(f"{path}: {exc.reason}", exc.reason) from None
        same = _first_loaded(self._files.get((info.identity.dev, info.identity.ino)))
        if same is not None:  # _dl_map_object_from_fd: the same file under another name
            self._add_name(same, requested)
            return same
        for refused, reason in ((info.elf_type == "ET_EXEC", "cannot dynamically load executable"),
                                (info.flags_1 & DF_1_PIE, "cannot dynamically load position-independent executable")):
            if refused:
                raise _Failure(f"{path}: {reason}", reason)
        obj = _Object(path, host, info, loader, self._origin_of(origin_from), step)
        obj.names.add(requested)
        self._append(obj)
        return obj

    def _origin_of(self, path: str) -> str:
        """$ORIGIN of a library: the directory it was found in, symlinks not resolved (dl-object.c)."""
        if not path.startswith("/"):
            path = self.env.cwd.rstrip("/") + "/" + path
        return os.path.dirname(path) or "/"

    def _access_denied(self, path: str) -> bool:
        """Is a path that resolves to nothing hidden by a permission (EACCES) rather than absent: can the
        deepest existing directory above it not be searched for its next component? (For a dlopen path's
        failure only: a search's candidates are not asked.)"""
        parts = self._absolute(path).rstrip("/").split("/")
        for cut in range(len(parts) - 1, 0, -1):
            host = self.target.host_path("/".join(parts[:cut]) or "/")
            if host is None:
                continue
            try:
                os.lstat(os.path.join(host, parts[cut]))
            except PermissionError:
                return True
            except OSError:
                return False
            return False
        return False

    def _not_elf(self, name: str, path: str, detail: str) -> FileProblem | None:
        """The typed outcome of a candidate refused for its first bytes: what the file is instead."""
        if detail != "invalid ELF header":
            return None
        host = self._host(path)
        try:
            fd = safeio.open_regular(host or "")
        except InputError:
            return None
        try:
            kind = not_elf_kind(os.read(fd, len(GIT_LFS_POINTER)))
        except OSError:
            return None
        finally:
            os.close(fd)
        return FileProblem(name, kind) if kind else None

    def _absolute(self, path: str) -> str:
        return path if path.startswith("/") else self.env.cwd.rstrip("/") + "/" + path

    def _host(self, path: str) -> str | None:
        if not path.startswith("/"):
            path = self.env.cwd.rstrip("/") + "/" + path
        return self.target.host_path(path)

    def _map_deps(self, root: _Object, preloads: list[_Object], step: int) -> list[_Object]:
        """_dl_map_object_deps: the breadth-first closure, which is also the root's search list."""
        order: list[_Object] = []
        seen: set[int] = set()
        for obj in (root, *preloads):
            if id(obj) not in seen:
                seen.add(id(obj))
                order.append(obj)
        i = 0
        while i < len(order):
            obj = order[i]
            for needed in obj.info.needed:
                dep = self._map_object(needed, obj, step)
                if id(dep) not in seen:
                    seen.add(id(dep))
                    order.append(dep)
            i += 1
        return order

    # -- search ------------------------------------------------------------------------------
    def _search(self, name: str, loader: _Object) -> tuple[Search, str | None]:
        attempts: list[SearchAttempt] = []
        other_class = False

        def try_dirs(dirs: Iterable[str], source: str) -> str | None:
            nonlocal other_class
            for directory in dirs:
                for sub in (*self.target.search_subdirs, ""):
                    # An empty element means the current directory: the candidate is the bare name.
                    base = directory if not directory or directory.endswith("/") else directory + "/"
                    candidate = base + (sub + "/" if sub else "") + name
                    if base and self._no_directory(base + sub):  # what _verify finds, without a lookup per name
                        verdict, detail = "absent", "not found"
                    else:
                        verdict, detail = self._verify(candidate)
                    attempts.append(SearchAttempt(source, candidate, detail if verdict != "ok" else "found"))
                    if verdict == "ok":
                        return candidate
                    if verdict == "other-class":
                        other_class = True
                    elif verdict == "fatal":
                        raise _Failure(f"{candidate}: {detail}", detail, self._not_elf(candidate, candidate, detail))
            return None

        found = None
        if not loader.info.runpath:
            # The loader, its loaders up the chain, then the executable when the chain does not end there;
            # only those with an RPATH are tried.
            chain: list[_Object | None] = [loader if loader.effective_rpath else loader.rpath_next]
            if self.main is not None and loader.top is not self.main and self.main.effective_rpath:
                chain.append(self.main)
            for first in chain:
                obj: _Object | None = first
                while found is None and obj is not None:
                    label = "RPATH of " + (obj.name or self.progname)
                    found = try_dirs(self._expand_list(obj.effective_rpath, obj), label)
                    obj = obj.rpath_next
        if found is None and self.env.library_path is not None:
            dirs = self.env.library_path.replace(";", ":").split(":")
            found = try_dirs(self._expand_list(tuple(dirs), self.main), "LD_LIBRARY_PATH")
        if found is None and loader.info.runpath:
            label = "RUNPATH of " + (loader.name or self.progname)
            found = try_dirs(self._expand_list(loader.info.runpath, loader), label)
        nodeflib = loader.info.nodeflib
        errno_cleared = False
        if found is None and self.target.cache is not None:
            hit = self.target.cache.lookup(name, *self.host_machine)
            if hit is None:
                attempts.append(SearchAttempt("ld.so.cache", name, "not in cache"))
            elif nodeflib and any(hit.startswith(d.rstrip("/") + "/") for d in self.target.system_dirs):
                # glibc 2.36 opens the cached file, then drops it; errno is 0 when the search ends.
                attempts.append(SearchAttempt("ld.so.cache", hit, "skipped: loader has DF_1_NODEFLIB"))
                errno_cleared = True
            else:
                verdict, detail = self._verify(hit)
                attempts.append(SearchAttempt("ld.so.cache", hit, "found" if verdict == "ok" else detail))
                if verdict == "ok":
                    found = hit
                elif verdict == "other-class":
                    other_class = True
        if found is None and self.target.cache is None and self.target.conf_dirs:
            found = try_dirs(self.target.conf_dirs, "ld.so.conf")
        if found is None:
            if nodeflib:
                attempts.append(SearchAttempt("system directories", ":".join(self.target.system_dirs),
                                              "skipped: loader has DF_1_NODEFLIB"))
            else:
                found = try_dirs(self.target.system_dirs, "system directories")
        error = None
        if found is None and other_class:
            error = f"{name}: wrong ELF class: ELFCLASS{64 if self.host_machine[1] == 32 else 32}"
        elif found is None:
            error = f"{name}: cannot open shared object file" if errno_cleared else f"{name}: {NOT_FOUND}"
        return Search(name, loader.name or self.progname, tuple(attempts), found, error), found

    def _no_directory(self, directory: str) -> bool:
        """Is there no directory at this target path? Then no file is found inside it. Remembered for the
        process, as ld.so remembers search directories that do not exist: a library's search tries every
        hwcaps subdirectory of every search directory, most of which are missing."""
        missing = self._missing_dirs.get(directory)
        if missing is None:
            host = self._host(directory)
            missing = self._missing_dirs[directory] = host is None or not os.path.isdir(host)
        return missing

    def _verify(self, path: str) -> tuple[str, str]:
        """open_verify: is this candidate loadable here?
        ("ok" | "absent" | "other-class" | "other-machine" | "fatal", and the reason)."""
        host = self._host(path)
        if host is None or os.path.isdir(host):
            return "absent", "not found"
        try:
            fd = safeio.open_regular(host)
        except InputError as exc:
            return "absent", exc.reason
        try:
            head = os.read(fd, 64)
        except OSError as exc:
            return "absent", exc.strerror or "unreadable"
        finally:
            os.close(fd)
        if len(head) < 52:
            return "fatal", "file too short"
        if head[:4] != b"\x7fELF":
            return "fatal", "invalid ELF header"
        want_machine, want_class = self.host_machine
        elf_class = 64 if head[4] == 2 else 32
        if elf_class != want_class:
            return "other-class", f"wrong ELF class: ELFCLASS{elf_class}"
        if head[5] != 1:
            return "fatal", "ELF file data encoding not little-endian"
        machine = int.from_bytes(head[18:20], "little")
        if machine != want_machine:
            return "other-machine", "wrong machine, skipped"
        e_type = int.from_bytes(head[16:18], "little")
        if e_type not in (2, 3):
            return "fatal", "only ET_DYN and ET_EXEC can be loaded"
        return self._verify_program_headers(host, head, elf_class)

    def _verify_program_headers(self, host: str, head: bytes, elf_class: int) -> tuple[str, str]:
        """The end of open_verify: program header entries of this class's size, and the table read whole
        (from the first bytes already read, else with pread: an offset past 2**63 is EINVAL)."""
        if elf_class == 64:
            phoff, phentsize, phnum, size, wrap = (int.from_bytes(head[32:40], "little"),
                                                   int.from_bytes(head[54:56], "little"),
                                                   int.from_bytes(head[56:58], "little"), 56, 1 << 64)
        else:
            phoff, phentsize, phnum, size, wrap = (int.from_bytes(head[28:32], "little"),
                                                   int.from_bytes(head[42:44], "little"),
                                                   int.from_bytes(head[44:46], "little"), 32, 1 << 32)
        if phentsize != size:
            return "fatal", "ELF file's phentsize not the expected size"
        file_size = os.stat(host).st_size
        end = phoff + phnum * size
        if end > file_size and end % wrap > min(file_size, 832):  # not in ld.so's buffer: pread(), and too short
            reason = "cannot read file data" + (": Invalid argument" if elf_class == 64 and phoff >= 1 << 63 else "")
            return "fatal", reason
        return "ok", ""

    def _expand_list(self, dirs: tuple[str, ...], obj: _Object | None) -> list[str]:
        out = []
        for d in dirs:
            expanded = self._expand(d, obj)
            if expanded is not None:
                out.append(expanded)
        return out

    def _expand(self, text: str, obj: _Object | None) -> str | None:
        """Dynamic string tokens: $ORIGIN, $LIB, $PLATFORM (with or without braces)."""
        if "$" not in text:
            return text
        origin = obj.origin if obj is not None else None
        out = text
        for token, value in (("ORIGIN", origin), ("LIB", self.target.lib_token), ("PLATFORM", self.target.platform)):
            for form in ("${" + token + "}", "$" + token):
                if form in out:
                    if value is None:
                        return None
                    out = out.replace(form, value)
        return out

    # -- versions ----------------------------------------------------------------------------
    def _check_versions(self, objects: list[_Object]) -> list[str]:
        """dl-version.c: every version an object needs must be defined by the file it names."""
        errors = []
        for obj in objects:
            for need in obj.info.version_needs:
                provider = self._object_named(need.file)
                if provider is None:
                    continue
                if not provider.info.version_definitions:
                    self._warnings.append(
                        f"{provider.name}: no version information available (required by {obj.name or self.progname})"
                    )
                    continue
                defined = {(d.hash, d.name) for d in provider.info.version_definitions}
                for req in need.versions:
                    if (req.hash, req.name) in defined:
                        continue
                    text = f"version `{req.name}' not found (required by {obj.name or self.progname})"
                    if req.is_weak:
                        self._warnings.append(f"{provider.name}: weak {text}")
                    else:
                        errors.append(f"{provider.name}: {text}")
        return errors

    # -- relocation and binding --------------------------------------------------------------
    def _relocate(self, order: list[_Object], lazy: bool, only: set[_Object] | None = None
                  ) -> tuple[list[Binding], list[Binding], str | None]:
        """Process relocations object by object (dependencies first), as _dl_relocate_object does."""
        unresolved: list[Binding] = []
        lazy_failures: list[Binding] = []
        for obj in reversed(order) if only is None else order:
            if obj.relocated or (only is not None and obj not in only):
                continue
            obj.relocated = True
            self._relocated_objects.append(obj)
            obj_lazy = lazy and not obj.info.binds_now
            symbols = obj.info.symbols
            entries = symbols.entries
            # RESOLVE_MAP: a relocation against a local, hidden or internal symbol needs no lookup.
            looked_up = ((symbols.reloc_class != RELOC_NONE) & ((entries["st_info"] >> 4) != STB_LOCAL)
                         & ~_HIDDEN[entries["st_other"] & 3])
            relocated = np.flatnonzero(looked_up)
            if not len(relocated):
                continue
            relocated = relocated[np.argsort(symbols.reloc_first[relocated])]  # distinct positions: no ties
            scope = self._flat_scope(obj)
            halves = symbols.hash_halves[relocated]
            bulk = self._bound_to_itself(obj, relocated, halves, scope)
            obj.bulk_bound = np.sort(relocated[bulk])
            rest = np.flatnonzero(~bulk)
            indices = relocated[rest]
            names = symbols.names(indices)
            hashes = gnu_hashes(names)
            self._hashes.update(zip(names, hashes.tolist(), strict=True))
            classes = symbols.reloc_class[indices].tolist()
            decided = self._bind_remembered(obj, scope, indices, names, hashes)
            scope_key = self._scope_key(obj)
            for k, (i, name, cls, half) in enumerate(zip(indices.tolist(), names, classes, (hashes >> 1).tolist(),
                                                         strict=True)):
                raw = decided[k]
                if raw is None:
                    kind = "lazy" if cls == RELOC_LAZY else "copy" if cls == RELOC_COPY else "now"
                    raw, crash = self._bind(obj, i, name, kind, scope, scope_key, half)
                    if crash:
                        return unresolved, lazy_failures, crash
                self.bindings[(obj.name, name)] = raw
                if raw.winner is None and (raw.error or not raw.weak_reference):
                    (lazy_failures if cls == RELOC_LAZY and obj_lazy else unresolved).append(_binding(raw))
        return unresolved, lazy_failures, None

    def _bind_remembered(self, obj: _Object, scope: _Scope, indices: np.ndarray, names: list[bytes],
                         hashes: np.ndarray) -> list[_Bound | None]:
        """`_bind_in_bulk`, each decision remembered for the scope: it depends on the name, the reference's
        version, PLT or not and whether the referrer is the executable, not on which object refers. A name
        defined by thousands of objects of one scope is then decided once, not once per referrer (which
        walked every definition for each). The lookups the batch leaves to `_bind` are remembered as such;
        a COPY relocation or a protected or -Bsymbolic own definition is never remembered."""
        symbols = obj.info.symbols
        e = symbols.entries[indices]
        cls = symbols.reloc_class[indices]
        own_binds = (e["st_shndx"] != SHN_UNDEF) & (((e["st_other"] & 3) == STV_PROTECTED)
                                                    | bool(obj.info.flags & DF_SYMBOLIC))
        mine = ((cls == RELOC_COPY) | own_binds).tolist()
        _slot, ref_hash, ref_id, ref_hidden = self._versions_at(obj, indices)
        keys = [None if own else (name, h, v, hidden, c == RELOC_LAZY, obj is self.main)
                for own, name, h, v, hidden, c in zip(mine, names, ref_hash.tolist(), ref_id.tolist(),
                                                      ref_hidden.tolist(), cls.tolist(), strict=True)]
        decided: list[_Bound | None] = [None] * len(indices)
        missing = []
        for k, key in enumerate(keys):
            if key is None or key not in scope.decided:
                missing.append(k)
                continue
            remembered = scope.decided[key]
            if remembered is not None:
                weak_ref = (int(e["st_shndx"][k]) == SHN_UNDEF and int(e["st_info"][k]) >> 4 == STB_WEAK)
                version = _symbol_version(obj, int(indices[k]))
                decided[k] = _Bound(obj, names[k], version.name if version is not None else None,
                                    "lazy" if key[4] else "now", weak_ref, *remembered, "", "")
        if not missing:
            return decided
        at = np.array(missing, dtype=np.intp)
        asked = [names[k] for k in missing]
        exporters = scope.exporters(hashes[at] >> 1)
        for o, found in exporters:  # every definition the lookups below may ask for, in bulk per object
            wanted = np.flatnonzero(found)
            if len(wanted) > 1:
                o.prefetch([asked[k] for k in wanted.tolist()], hashes[at][wanted])
        for k, raw in zip(missing, self._bind_in_bulk(obj, indices[at], asked, exporters), strict=True):
            decided[k] = raw
            key = keys[k]
            if key is not None:
                scope.decided[key] = None if raw is None else (raw.winner, raw.losers)
        return decided

    def _bind_in_bulk(self, obj: _Object, indices: np.ndarray, names: list[bytes],
                      exporters: list[tuple[_Object, np.ndarray]]) -> list[_Bound | None]:
        """The same lookups as `_bind`, decided for a whole batch with array operations where nothing can
        depend on the order of the lookups or on more than one definition per object: each candidate
        object's one definition of the name goes through check_match's tests at once, the first match
        wins and later matches lose. None marks a relocation left to `_bind`: a COPY relocation, a
        protected or -Bsymbolic own definition, several definitions of the name in one object (versioned
        choice), GNU_UNIQUE (process-wide state), the executable (copy relocations), a versioned reference
        to an object without versym (ld.so's assertion), LD_DYNAMIC_WEAK, or a scope with a SysV-only
        hash table (the named-file rule)."""
        n = len(indices)
        if not n or self.env.dynamic_weak or not self._flat_scope(obj).all_gnu:
            return [None] * n
        symbols = obj.info.symbols
        e = symbols.entries[indices]
        cls = symbols.reloc_class[indices]
        own_defined = e["st_shndx"] != SHN_UNDEF
        own_binds = own_defined & (((e["st_other"] & 3) == STV_PROTECTED) | bool(obj.info.flags & DF_SYMBOLIC))
        undecided = (cls == RELOC_COPY) | own_binds
        plt = cls == RELOC_LAZY
        ref_slot, ref_hash, ref_id, ref_hidden = self._versions_at(obj, indices)
        versioned = ref_hash != 0
        matched: list[tuple[_Object, np.ndarray, np.ndarray]] = []  # per candidate: ks matched, definitions
        for o, found in exporters:
            ks = np.flatnonzero(found & ~undecided)
            if not len(ks):
                continue
            definitions = [o.definitions(names[k]) for k in ks.tolist()]
            counts = np.fromiter(map(len, definitions), dtype=np.intp, count=len(ks))
            undecided[ks[counts > 1]] = True
            single = counts == 1
            ks = ks[single]
            d = np.fromiter((t[0] for t, one in zip(definitions, single.tolist(), strict=True) if one),
                            dtype=np.intp, count=len(ks))
            oe = o.info.symbols.entries[d]
            ok = self._acceptable(o, oe, d, plt[ks], versioned[ks], ref_hash[ks], ref_id[ks], ref_hidden[ks])
            state = (((oe["st_info"] >> 4) == STB_GNU_UNIQUE) | (o is self.main and o is not obj)) & ok
            if o.info.symbols.versym is None:
                state |= versioned[ks]
            undecided[ks[state]] = True
            matched.append((o, ks[ok], d[ok]))
        winners: dict[int, tuple[_Object, int]] = {}
        losers: dict[int, list[tuple[_Object, int]]] = {}
        for o, ks, d in matched:  # in scope order: the first match wins, later ones lose
            for k, i in zip(ks.tolist(), d.tolist(), strict=True):
                if k in winners:
                    losers.setdefault(k, []).append((o, i))
                else:
                    winners[k] = (o, i)
        st_info = e["st_info"].tolist()
        slots = obj.info.version_slots
        version_names = [None if not h else slots[v].name for h, v in zip(ref_hash.tolist(), ref_slot.tolist(),
                                                                        strict=True)]
        decided: list[_Bound | None] = [None] * n
        kinds = ["lazy" if c == RELOC_LAZY else "now" for c in cls.tolist()]
        for k, (skip, defined) in enumerate(zip(undecided.tolist(), own_defined.tolist(), strict=True)):
            if not skip:
                decided[k] = _Bound(obj, names[k], version_names[k], kinds[k],
                                    not defined and (st_info[k] >> 4) == STB_WEAK, winners.get(k),
                                    tuple(losers.get(k, ())), "", "")
        return decided

    def _acceptable(self, o: _Object, oe: np.ndarray, d: np.ndarray, plt: np.ndarray, versioned: np.ndarray,
                    ref_hash: np.ndarray, ref_id: np.ndarray, ref_hidden: np.ndarray) -> np.ndarray:
        """check_match() for definitions `d` of `o` (their entries `oe`), each against its own reference (see
        `_check_match`); a versioned reference to an object without versym is left to the caller."""
        ok = o.matchable[d] & ~(plt & (oe["st_shndx"] == SHN_UNDEF))
        if o.info.symbols.versym is None:
            return ok
        raw = o.info.symbols.versym[d]
        slot, def_hash, def_id, _hidden = self._versions_at(o, d)
        hidden = (raw & VERSYM_HIDDEN) != 0
        wrong_version = versioned & ((def_hash != ref_hash) | (def_id != ref_id)) & (ref_hidden | (def_hash != 0)
                                                                                    | hidden)
        hidden_versioned = ~versioned & (slot >= 3) & hidden  # unversioned references skip hidden versions
        return ok & ~wrong_version & ~hidden_versioned

    def _versions_at(self, obj: _Object, indices: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The versym index of each symbol and its l_versions entry as arrays: ELF hash (0: none), an id
        of the version name, and the entry's hidden flag."""
        table = self._version_tables.get(id(obj))
        if table is None:
            slots = obj.info.version_slots
            size = max(slots, default=0) + 2  # the last row stands for indices without an entry
            hashes, ids, hidden = np.zeros(size, np.uint64), np.zeros(size, np.intp), np.zeros(size, bool)
            for index, slot in slots.items():
                hashes[index], hidden[index] = slot.hash, slot.hidden
                ids[index] = self._version_ids.setdefault(slot.name, len(self._version_ids) + 1)
            table = self._version_tables[id(obj)] = (hashes, ids, hidden)
        hashes, ids, hidden = table
        versym = obj.info.symbols.versym
        if versym is None:
            zero = np.zeros(len(indices), np.intp)
            return zero, zero.astype(np.uint64), zero, zero.astype(bool)
        slot = (versym[indices] & VERSYM_INDEX).astype(np.intp)
        row = np.where(slot < len(hashes) - 1, slot, len(hashes) - 1)
        return slot, hashes[row], ids[row], hidden[row]

    def _bound_to_itself(self, obj: _Object, relocated: np.ndarray, halves: np.ndarray, scope: _Scope) -> np.ndarray:
        """Relocations of the object's own unique, acceptable definitions whose name no other object in
        its scope may export: ld.so's walk can only end at the object itself. Decided in bulk from the
        hash tables (no names built), which makes a 400k-symbol framework library cheap; every
        relocation with a real choice, or a hash collision, goes through the per-symbol lookup."""
        own, repeated = _members(list(obj.export_halves), halves)
        if obj not in scope:
            own[:] = False
        others = scope.count(halves) - own > 0
        e = obj.info.symbols.entries
        acceptable = (obj.matchable & ((e["st_info"] >> 4) != STB_GNU_UNIQUE) & (e["st_shndx"] != SHN_UNDEF)
                      & (obj.info.symbols.reloc_class != RELOC_COPY))
        return own & ~others & acceptable[relocated] & ~repeated

    def _scope_key(self, obj: _Object) -> tuple[int, ...]:
        return tuple(id(s) for s in obj.scope)

    def _flat_scope(self, obj: _Object) -> _Scope:
        """The referrer's scopes in search order, each object once."""
        key = self._scope_key(obj)
        flat = self._flat_scopes.get(key)
        if flat is None:
            flat = self._flat_scopes[key] = _Scope(obj.scope)
        return flat

    def _bind(self, obj: _Object, index: int, name: bytes, reloc: str, scope: _Scope,
              scope_key: tuple[int, ...], half: int) -> tuple[_Bound, str | None]:
        # The referrer's own entry, read alone: `fields` would convert a whole table (0.05 s for
        # libtensorflow_cc.so.2) for the few relocations of a large object that come this way.
        entry = obj.info.symbols.entries[index]
        st_info, st_other, st_shndx = int(entry["st_info"]), int(entry["st_other"]), int(entry["st_shndx"])
        own_defined = st_shndx != SHN_UNDEF
        weak_ref = not own_defined and (st_info >> 4) == STB_WEAK
        version = _symbol_version(obj, index)
        version_name = version.name if version is not None else None
        # Protected definitions and -Bsymbolic objects bind their own references to themselves.
        protected = st_other & 3 == STV_PROTECTED
        if own_defined and reloc != "copy" and (protected or obj.info.flags & DF_SYMBOLIC):
            reason = "protected" if protected else "-Bsymbolic"
            return _Bound(obj, name, version_name, reloc, weak_ref, (obj, index), (), reason, ""), None
        plt = reloc == "lazy"
        key = (scope_key, name, version_name, plt, reloc == "copy")
        memo = self._lookup_memo.get(key)
        if memo is None:
            try:
                memo = self._lookup(obj, name, version, plt, scope, scope.candidates(half),
                                    skip=obj if reloc == "copy" else None)
            except _Failure as failure:
                return _Bound(obj, name, version_name, reloc, weak_ref, None, (), "", ""), failure.message
            self._lookup_memo[key] = memo
        winner, losers, reason, error = memo
        return _Bound(obj, name, version_name, reloc, weak_ref, winner, losers, reason, error), None

    def _lookup(self, referrer: _Object, name: bytes, version, plt: bool, scope: _Scope,  # type: ignore[no-untyped-def]
                candidates: list[_Object], skip: _Object | None = None):
        """_dl_lookup_symbol_x over the referrer's scope, visiting only objects that export the name;
        also collects the definitions that lost. `skip` is the executable while resolving its COPY
        relocations (ELF_RTYPE_CLASS_COPY)."""
        winner: tuple[_Object, int] | None = None
        weak_fallback: tuple[_Object, int] | None = None
        losers: list[tuple[_Object, int]] = []
        reason = ""
        for obj in candidates:
            if obj is skip:
                continue
            found = self._find_in(obj, name, version, plt)
            if found is None:
                continue
            if winner is not None:
                losers.append((obj, found))
                continue
            bind = obj.info.symbols.fields[0][found] >> 4
            if bind == STB_WEAK and self.env.dynamic_weak:
                if weak_fallback is None:
                    weak_fallback = (obj, found)
                else:
                    losers.append((obj, found))
                continue
            if bind == STB_GNU_UNIQUE:
                entered = self.unique.get(name)
                if entered is None:
                    self.unique[name] = (obj, found)
                    winner = (obj, found)
                else:
                    winner = entered
                    if entered[0] is not obj:
                        losers.append((obj, found))
                        reason = "GNU_UNIQUE: the first definition loaded in the process wins"
                continue
            winner = (obj, found)
            if obj is self.main and obj is not referrer and self._copies(obj, name):
                reason = "copy relocation: the executable holds the object and every reference binds to it"
        if winner is None and weak_fallback is not None:
            winner = weak_fallback
        elif winner is not None and weak_fallback is not None:
            losers.insert(0, weak_fallback)
        error = self._missing_in_named_file(referrer, name, version, scope, winner)
        if error:
            return None, (), "", error
        return winner, tuple(loser for loser in losers if loser != winner), reason, ""

    def _missing_in_named_file(self, referrer: _Object, name: bytes, version, scope: _Scope,  # type: ignore[no-untyped-def]
                               winner: tuple[_Object, int] | None) -> str:
        """do_lookup_x returns -1 when it reaches the file named by the verneed entry without a match
        and that file's SysV hash chain ended at STN_UNDEF. Through DT_GNU_HASH, glibc 2.36 leaves symidx
        at the last candidate and reports a plain "undefined symbol" instead (oracle-tested)."""
        if version is None or version.filename is None or scope.all_gnu:
            return ""
        for obj in scope.objects:
            if winner is not None and obj is winner[0]:
                return ""
            if obj.matches(version.filename):
                if obj.info.symbols.uses_gnu_hash:
                    return ""
                return (f"{referrer.name}: symbol {name.decode('utf-8', 'replace')} version {version.name} "
                        f"not defined in file {version.filename} with link time reference")
        return ""

    def _copies(self, obj: _Object, name: bytes) -> bool:
        """Does the executable hold a copy of this object? Aliases share the copy's address."""
        if obj.copy_addresses is None:
            symbols = obj.info.symbols
            copied = np.flatnonzero(symbols.reloc_class == RELOC_COPY)
            obj.copy_addresses = set(symbols.entries["st_value"][copied].tolist())
        values = obj.info.symbols.fields[3]
        return any(values[i] in obj.copy_addresses for i in obj.definitions(name))

    def _find_in(self, obj: _Object, name: bytes, version, plt: bool, newest: bool = False) -> int | None:  # type: ignore[no-untyped-def]
        """do_lookup_x for one object: the first acceptable symbol, or None."""
        versioned_candidate = None
        num_versions = 0
        for i in obj.definitions(name, self._hashes.get(name)):
            verdict = self._check_match(obj, i, version, plt, newest)
            if verdict == "match":
                return i
            if verdict == "versioned":
                num_versions += 1
                if num_versions == 1:
                    versioned_candidate = i
        if num_versions == 1:
            return versioned_candidate
        return None

    def _check_match(self, obj: _Object, i: int, version, plt: bool, newest: bool) -> str:  # type: ignore[no-untyped-def]
        """check_match() of dl-lookup.c: "match", "reject", or "versioned" (counted for unversioned refs)."""
        st_info, st_other, st_shndx, st_value, _size, versym = obj.info.symbols.fields
        shndx = st_shndx[i]
        stt = st_info[i] & 0xF
        if (st_value[i] == 0 and shndx != SHN_ABS and stt != STT_TLS) or (plt and shndx == SHN_UNDEF):
            return "reject"
        if stt not in ALLOWED_TYPES:
            return "reject"
        if (st_info[i] >> 4) not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
            return "reject"
        if st_other[i] & 3 in (STV_HIDDEN, STV_INTERNAL):
            return "reject"
        if version is not None:
            if versym is None:
                if version.filename is not None and obj.matches(version.filename):
                    raise _Failure(
                        "Inconsistency detected by ld.so: dl-lookup.c: check_match: Assertion "
                        "`version->filename == NULL || ! _dl_name_match_p (version->filename, map)' failed!"
                    )
                return "match"
            raw = versym[i]
            slot = obj.info.version_slots.get(raw & VERSYM_INDEX)
            slot_hash = slot.hash if slot is not None else 0
            slot_name = slot.name if slot is not None else ""
            if (slot_hash != version.hash or slot_name != version.name) and (
                version.hidden or slot_hash or raw & VERSYM_HIDDEN
            ):
                return "reject"
            return "match"
        if versym is not None:
            raw = versym[i]
            if (raw & VERSYM_INDEX) >= (2 if newest else 3):
                return "versioned" if not raw & VERSYM_HIDDEN else "reject"
        return "match"


def _first_loaded(objects: list[_Object] | None) -> _Object | None:
    """The earliest in load order of these objects that is still loaded."""
    return min((o for o in objects or () if o.loaded), key=lambda o: o.seq, default=None)


def _matchable(e: np.ndarray) -> np.ndarray:
    """check_match()'s tests that depend on the definition alone, for symbol entries `e`: a value (or
    SHN_ABS, or TLS), an allowed type, a global, weak or unique binding, and a visible symbol."""
    stt = e["st_info"] & 0xF
    return (((e["st_value"] != 0) | (e["st_shndx"] == SHN_ABS) | (stt == STT_TLS)) & _ALLOWED_TYPE[stt]
            & _LOOKUP_BIND[e["st_info"] >> 4] & ~_HIDDEN[e["st_other"] & 3])


def _definition(obj: _Object, i: int, name: bytes | None = None) -> Definition:
    """The record of symbol `i` of `obj`; `name` when the caller knows it (a lookup's match has the name it
    looked up), which spares decoding it from the string table."""
    st_info, st_other, _shndx, _value, st_size, _versym = obj.info.symbols.fields
    version = _symbol_version(obj, i)
    return Definition(
        obj.name,
        obj.info.symbols.name(i) if name is None else name,
        version.name if version is not None else None,
        BIND_NAMES.get(st_info[i] >> 4, str(st_info[i] >> 4)),
        TYPE_NAMES.get(st_info[i] & 0xF, str(st_info[i] & 0xF)),
        VISIBILITY_NAMES[st_other[i] & 3],
        st_size[i],
    )


def _symbol_version(obj: _Object, i: int):  # type: ignore[no-untyped-def]
    """The l_versions entry symbol `i`'s versym names, or None where it has no version (no versym, an
    index without an entry, or the base/local indices whose hash is 0)."""
    versym = obj.info.symbols.versym
    if versym is None:
        return None
    slot = obj.info.version_slots.get(int(versym[i]) & VERSYM_INDEX)
    return slot if slot is not None and slot.hash else None


def _self_binding(obj: _Object, i: int) -> _Bound:
    name = obj.info.symbols.name(i)
    cls = int(obj.info.symbols.reloc_class[i])
    version = _symbol_version(obj, i)
    return _Bound(obj, name, version.name if version is not None else None, "lazy" if cls == RELOC_LAZY else "now",
                  False, (obj, i), (), "", "")


def _binding(raw: _Bound) -> Binding:
    return Binding(
        raw.referrer.name, raw.name, raw.version, raw.relocation, raw.weak_reference,
        _definition(*raw.winner, raw.name) if raw.winner else None,
        tuple(_definition(*loser, raw.name) for loser in raw.losers), raw.reason, raw.error,
    )


def _members(sorted_sets: list[np.ndarray], queries: np.ndarray) -> list[np.ndarray]:
    """[queries ∈ values for values in sorted_sets], with the queries sorted once. The smaller side is
    searched in the larger: a set no larger than the queries has each of its values find its run of equal
    queries (the common case of a framework library's references tested against libc), a larger one is
    searched with the sorted queries, whose neighbouring binary searches share their cache lines. Only the
    hits are written back in the queries' order, so a small set costs little beside a large batch."""
    order = np.argsort(queries)
    sorted_queries = queries[order]
    found = []
    for values in sorted_sets:
        member = np.zeros(len(queries), dtype=bool)
        if not len(values) or not len(queries):
            pass
        elif len(values) <= len(queries):
            left = np.searchsorted(sorted_queries, values, "left")
            right = np.searchsorted(sorted_queries, values, "right")
            hit = np.flatnonzero(right > left)
            left, counts = left[hit], (right - left)[hit]
            if len(counts) and int(counts.max()) > 1:  # a repeated query: every position of its run
                left = np.repeat(left - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
            member[order[left]] = True
        else:
            at = np.minimum(np.searchsorted(values, sorted_queries), len(values) - 1)
            member[order[values[at] == sorted_queries]] = True
        found.append(member)
    return found


def _split_preload(value: str | None) -> list[str]:
    """handle_preload_list: entries separated by spaces and colons; empty entries skipped."""
    if not value:
        return []
    return [p for p in value.replace(":", " ").split(" ") if p]


def _preload_reason(reason: str) -> str:
    """The part of a load error that ld.so prints inside the preload warning's parentheses."""
    return "cannot open shared object file" if reason.startswith("cannot open shared object file") else reason


def _undefined(binding: Binding) -> str:
    if binding.error:
        return binding.error
    text = f"{binding.referrer}: undefined symbol: {binding.symbol.decode('utf-8', 'replace')}"
    if binding.version:
        text += f", version {binding.version}"
    return text
