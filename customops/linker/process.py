"""A model of glibc's dynamic linker for one process: what it will find, bind and reject, without running any
library. Every rule here has an oracle test that runs the real ld.so on the same scenario
(tests/test_linker_*.py). This module is the driver (elf/rtld.c dl_main at startup, elf/dl-open.c for each
dlopen, elf/dl-close.c for a failed one); in outline:

* search (customops.linker.search, elf/dl-load.c _dl_map_object): already loaded by name or SONAME; the
  RPATH chain, LD_LIBRARY_PATH, RUNPATH, ld.so.cache, the default directories.
* scopes: the global scope is the executable, the preloads, their breadth-first NEEDED closure and
  every RTLD_GLOBAL dlopen; a dlopen'ed object sees the global scope then its own breadth-first local
  scope (RTLD_DEEPBIND: the other way round).
* versions (customops.linker.versions, elf/dl-version.c) and binding (customops.linker.lookup,
  elf/dl-lookup.c; customops.linker.batch decides the same in bulk).
* outcomes: typed failures (customops.linker.types.FailureKind), rendered as ld.so or dlerror() prints them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from customops.elf.cache import ElfReader
from customops.elf.constants import DF_1_PIE, ET_EXEC, RELOC_LAZY
from customops.errors import ElfError
from customops.linker.batch import FEW, BatchLookup
from customops.linker.constructors import constructor_reach, init_order
from customops.linker.linkmap import LinkMap, first_loaded
from customops.linker.lookup import LookupCrash, SymbolLookup
from customops.linker.messages import dlerror, preload_warning, startup_error, symbol_lookup_error, unresolved
from customops.linker.prediction import Bound, Prediction, definition, to_binding
from customops.linker.search import LibrarySearch, LoadFailed
from customops.linker.target import LinkerTarget
from customops.linker.types import (
    Binding,
    CallOutcome,
    CallStatus,
    ConstructorReach,
    Dlopen,
    Failure,
    FailureKind,
    LoadedObject,
    Scenario,
    Search,
    StepKind,
    StepOutcome,
    StepStatus,
)
from customops.linker.versions import check_versions


class Linker:
    """Simulates one process: the executable's startup, then each dlopen step in order. `batch=False` binds
    every relocation with the readable per-symbol lookup alone (customops.linker.lookup), for tests; `few`:
    the batch relocates an object with at most this many looked-up relocations one symbol at a time (0: every
    object in bulk, for tests)."""

    def __init__(self, target: LinkerTarget, reader: ElfReader | None = None, batch: bool = True,
                 few: int = FEW) -> None:
        self.target = target
        self.reader = reader or ElfReader()
        self.batch = batch
        self.few = few

    def run(self, scenario: Scenario) -> Prediction:
        return _Process(self, scenario).run()


class _Process:
    def __init__(self, linker: Linker, scenario: Scenario) -> None:
        self.target = linker.target
        self.reader = linker.reader
        self.scenario = scenario
        self.env = scenario.environment
        self.progname = scenario.executable
        self.search = LibrarySearch(self.target, self.env, self.progname)
        self.lookup = (BatchLookup(self.env.dynamic_weak, linker.few) if linker.batch
                       else SymbolLookup(self.env.dynamic_weak))
        # a reader without relocations (resolve --tree-only) loads, searches and checks versions, binds nothing
        self.binds = linker.reader.relocations
        self.objects: list[LinkMap] = []
        # Indexes over `objects` (ld.so walks its list of loaded objects; thousands of objects make that
        # walk quadratic here): every name and SONAME an object answers to, and every file identity.
        self._named: dict[str, list[LinkMap]] = {}
        self._files: dict[tuple[int, int], list[LinkMap]] = {}
        self.global_scope: list[LinkMap] = []
        self.bindings: dict[tuple[str, bytes], Bound] = {}
        self.outcomes: list[StepOutcome] = []
        self.main: LinkMap | None = None
        self.exit_message: str | None = None
        self._relocated_objects: list[LinkMap] = []
        # per-step collectors
        self._searches: list[Search] = []
        self._warnings: list[str] = []

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

    def _outcome(self, kind: StepKind, request: str, label: str, status: StepStatus, message: str,
                 loaded: Sequence[LinkMap], unresolved: Sequence[Binding] = (), lazy: Sequence[Binding] = (),
                 version_errors: tuple[str, ...] = (), calls: tuple[CallOutcome, ...] = (),
                 failure: Failure | None = None, constructors: tuple[ConstructorReach, ...] = ()) -> None:
        self.outcomes.append(StepOutcome(kind, request, label, status, message, tuple(self._warnings),
                                         tuple(o.name for o in loaded), tuple(self._searches), tuple(unresolved),
                                         tuple(lazy), version_errors, calls, failure, constructors))
        self._searches, self._warnings = [], []

    def _fatal(self, failure: Failure, loaded: Sequence[LinkMap] = (), unresolved: Sequence[Binding] = (),
               lazy: Sequence[Binding] = (), version_errors: tuple[str, ...] = ()) -> None:
        """The process does not start: ld.so prints the error and exits."""
        self.exit_message = startup_error(self.progname, failure)
        self._outcome(StepKind.STARTUP, self.progname, "", StepStatus.FATAL, self.exit_message, loaded,
                      unresolved, lazy, version_errors, failure=failure)

    # -- startup (elf/rtld.c dl_main) ------------------------------------------------------------
    def _startup(self) -> None:
        step = len(split_preload(self.env.preload))  # each LD_PRELOAD entry's outcome comes first
        main = self._map_executable(step)
        preloads = self._preload(main)
        try:
            searchlist = self._map_deps(main, preloads, step)
        except LoadFailed as failed:
            return self._fatal(failed.failure)
        main.searchlist = searchlist
        self.global_scope = list(searchlist)
        for obj in searchlist:
            obj.is_global = True
            obj.scope = [self.global_scope]
        errors = self._check_versions(searchlist)
        if errors:
            return self._fatal(errors[0], searchlist, version_errors=tuple(dlerror(e) for e in errors))
        failing, lazy_failures, crash = self._relocate(searchlist, not self.env.bind_now)
        if crash is not None:
            self.exit_message = dlerror(crash)
            return self._outcome(StepKind.STARTUP, self.progname, "", StepStatus.CRASH, self.exit_message,
                                 searchlist, failing, lazy_failures, failure=crash)
        if failing:
            return self._fatal(unresolved(failing[0]), searchlist, failing, lazy_failures)
        reached = constructor_reach(init_order(searchlist, self.main), lazy_failures, self.bindings)
        called = next((r.calls[0] for r in reached if r.calls), None)
        if called is not None:  # _dl_init: a constructor's call is the function's first: the process dies
            failure = unresolved(called.binding)
            self.exit_message = symbol_lookup_error(self.progname, failure)
            return self._outcome(StepKind.STARTUP, self.progname, "", StepStatus.FATAL, self.exit_message,
                                 searchlist, [], lazy_failures, failure=failure, constructors=reached)
        self._outcome(StepKind.STARTUP, self.progname, "", StepStatus.LOADED, "", searchlist, [], lazy_failures,
                      constructors=reached)

    def _map_executable(self, step: int) -> LinkMap:
        """The executable the kernel mapped, and ld.so itself (its PT_INTERP), as objects of the startup step."""
        exe_path = self.scenario.executable
        host = self.target.host_path(exe_path)
        if host is None:
            raise ElfError(exe_path, "executable not found in the target")
        info = self.reader.read(host)
        real = self.target.resolve(exe_path) or exe_path
        # ld.so's l_name for the executable is "", printed as the program name (argv[0]).
        main = LinkMap(exe_path, host, info, None, os.path.dirname(real), step)
        self.main = self.search.main = self.lookup.main = main
        self.search.machine = (info.machine_code, info.elf_class)
        self._append(main)
        interp_host = self.target.host_path(info.interpreter) if info.interpreter else None
        if info.interpreter and interp_host:
            rtld = LinkMap(info.interpreter, interp_host, self.reader.read(interp_host), None,
                           os.path.dirname(info.interpreter), step)
            self._append(rtld)
        return main

    def _preload(self, main: LinkMap) -> list[LinkMap]:
        """elf/rtld.c handle_preload_list / do_preload: an entry that cannot be mapped is a warning."""
        preloads: list[LinkMap] = []
        for name in split_preload(self.env.preload):
            step = len(self.outcomes)
            try:
                obj = self._map_object(name, main, step)
            except LoadFailed as failed:
                self._warnings.append(preload_warning(name, failed.failure))
                self._outcome(StepKind.PRELOAD, name, "LD_PRELOAD", StepStatus.IGNORED, self._warnings[-1], [],
                              failure=failed.failure)
                continue
            if obj not in preloads and obj is not main:
                preloads.append(obj)
            self._outcome(StepKind.PRELOAD, name, "LD_PRELOAD", StepStatus.LOADED, "", [obj])
        return preloads

    # -- dlopen (elf/dl-open.c) --------------------------------------------------------------------
    def _dlopen(self, step: Dlopen) -> None:
        assert self.main is not None
        caller = self._object_named(step.caller) if step.caller else self.main
        before = len(self.objects)
        index = len(self.outcomes)
        try:
            root, new = self._open(step, caller or self.main, before, index)
        except LoadFailed as failed:
            self._unload(before)
            self._outcome(StepKind.DLOPEN, step.path, step.label, StepStatus.FAILED, dlerror(failed.failure), [],
                          failure=failed.failure)
            return
        for obj in new:
            obj.scope = [root.searchlist, self.global_scope] if step.deepbind else [self.global_scope, root.searchlist]
        lazy = step.lazy and not self.env.bind_now
        failing, lazy_failures, crash = self._relocate(list(reversed(root.searchlist)), lazy, only=set(new))
        if crash is not None:
            self.exit_message = dlerror(crash)
            self._outcome(StepKind.DLOPEN, step.path, step.label, StepStatus.CRASH, self.exit_message, new,
                          failing, lazy_failures, failure=crash)
            return
        if failing:
            self._unload(before)  # dlopen unloads what it mapped; the bindings made so far stay on record
            failure = unresolved(failing[0])
            self._outcome(StepKind.DLOPEN, step.path, step.label, StepStatus.FAILED, dlerror(failure), [], failing,
                          lazy_failures, failure=failure)
            return
        if step.make_global:
            self.lookup.scope_changed()
            for obj in root.searchlist:
                if not obj.is_global:
                    obj.is_global = True
                    self.global_scope.append(obj)
        calls = tuple(self._call(root, name) for name in step.calls)
        self._outcome(StepKind.DLOPEN, step.path, step.label, StepStatus.LOADED, "", new, [], lazy_failures,
                      calls=calls)

    def _open(self, step: Dlopen, caller: LinkMap, before: int, index: int) -> tuple[LinkMap, list[LinkMap]]:
        """dl_open_worker_begin: map the object and its dependencies, check their versions."""
        root = self._map_object(step.path, caller, index)
        if root.info.noopen and len(self.objects) > before:
            raise LoadFailed(Failure(FailureKind.NOT_DLOPENABLE, root.name))
        new = self.objects[before:]
        if root in new or not root.searchlist:
            root.searchlist = self._map_deps(root, [], index)
        new = self.objects[before:]
        errors = self._check_versions(new)
        if errors:
            raise LoadFailed(errors[0])
        return root, new

    def _call(self, root: LinkMap, name: str) -> CallOutcome:
        """dlsym(handle, name) searches the handle's own dependency tree, newest version first. Whether
        the function then reaches a lazily unresolved symbol depends on its code: see lazy_failures."""
        symbol = name.encode()
        for obj in root.searchlist:
            found = self.lookup.find_in(obj, symbol, None, True, newest=True)
            if found is not None:
                return CallOutcome(name, CallStatus.OK, "", definition(obj, found))
        failure = Failure(FailureKind.UNDEFINED_SYMBOL, root.name, symbol=symbol)
        return CallOutcome(name, CallStatus.NOT_FOUND, dlerror(failure), None)

    # -- the list of loaded objects ---------------------------------------------------------------
    def _append(self, obj: LinkMap) -> None:
        obj.seq = len(self.objects)
        self.objects.append(obj)
        # The executable the kernel mapped has the name "" and no file identity in ld.so's list: a dlopen
        # of its path opens the file again (and is refused as an executable); only its SONAME matches.
        names = () if obj is self.main else obj.names
        for name in (*names, *((obj.info.soname,) if obj.info.soname else ())):
            self._named.setdefault(name, []).append(obj)
        if obj is not self.main:
            self._files.setdefault(obj.file_id, []).append(obj)

    def _add_name(self, obj: LinkMap, name: str) -> None:
        if name not in obj.names:
            obj.names.add(name)
            self._named.setdefault(name, []).append(obj)

    def _unload(self, before: int) -> None:
        """Forget the objects a failed dlopen mapped (the last ones loaded): elf/dl-close.c."""
        for obj in self.objects[before:]:
            obj.loaded = False
        del self.objects[before:]

    def _object_named(self, name: str) -> LinkMap | None:
        """The first loaded object, in load order, whose name or SONAME is `name` (_dl_name_match_p)."""
        return first_loaded(self._named.get(name))

    # -- mapping (elf/dl-load.c, elf/dl-deps.c) ----------------------------------------------------
    def _map_object(self, name: str, loader: LinkMap, step: int) -> LinkMap:
        """_dl_map_object: reuse a loaded object by name or SONAME, else search and open."""
        found = self._object_named(name)
        if found is not None:
            return found
        if "/" in name:
            return self._new_object(self.search.open_path(name, loader), name, loader, step)
        search, found_at, failure = self.search.find(name, loader)
        self._searches.append(search)
        if found_at is None:
            assert failure is not None
            raise LoadFailed(failure)
        return self._new_object(found_at, name, loader, step)

    def _new_object(self, path: str, requested: str, loader: LinkMap, step: int) -> LinkMap:
        """_dl_map_object_from_fd: the same file under another name is the object already loaded."""
        host = self.search.host(path)
        assert host is not None
        try:
            info = self.reader.read(host)
        except ElfError as exc:  # what ld.so refuses to map says the same (elf.mapping's checks)
            raise LoadFailed(Failure(FailureKind.UNMAPPABLE, path, exc.reason)) from None
        same = first_loaded(self._files.get((info.identity.dev, info.identity.ino)))
        if same is not None:
            self._add_name(same, requested)
            return same
        if info.type_code == ET_EXEC:
            raise LoadFailed(Failure(FailureKind.EXECUTABLE, path))
        if info.flags_1 & DF_1_PIE:
            raise LoadFailed(Failure(FailureKind.PIE_EXECUTABLE, path))
        obj = LinkMap(path, host, info, loader, self.search.origin_of(path), step)
        obj.names.add(requested)
        self._append(obj)
        return obj

    def _map_deps(self, root: LinkMap, preloads: list[LinkMap], step: int) -> list[LinkMap]:
        """_dl_map_object_deps: the breadth-first closure, which is also the root's search list."""
        order: list[LinkMap] = []
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

    def _check_versions(self, objects: list[LinkMap]) -> list[Failure]:
        errors, warnings = check_versions(objects, self._object_named, self.progname)
        self._warnings += warnings
        return errors

    # -- relocation (elf/dl-reloc.c _dl_relocate_object) -------------------------------------------
    def _relocate(self, order: list[LinkMap], lazy: bool, only: set[LinkMap] | None = None
                  ) -> tuple[list[Binding], list[Binding], Failure | None]:
        """Process relocations object by object (dependencies first): the references that fail at load,
        those that fail at their first call (lazy binding), and ld.so's crash."""
        failing: list[Binding] = []
        lazy_failures: list[Binding] = []
        if not self.binds:
            return failing, lazy_failures, None
        for obj in reversed(order) if only is None else order:
            if obj.relocated or (only is not None and obj not in only):
                continue
            obj.relocated = True
            self._relocated_objects.append(obj)
            obj_lazy = lazy and not obj.info.binds_now
            try:
                for cls, raw in self.lookup.relocate(obj):
                    self.bindings[(obj.name, raw.name)] = raw
                    if raw.winner is None and not raw.weak_reference:
                        (lazy_failures if cls == RELOC_LAZY and obj_lazy else failing).append(to_binding(raw))
            except LookupCrash as crash:
                return failing, lazy_failures, crash.failure
        return failing, lazy_failures, None


def split_preload(value: str | None) -> list[str]:
    """handle_preload_list: entries separated by spaces and colons; empty entries skipped."""
    if not value:
        return []
    return [p for p in value.replace(":", " ").split(" ") if p]
