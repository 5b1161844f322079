"""ld.so's struct link_map for one loaded object (include/link.h), and a referrer's lookup scope flattened."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from customops.elf.constants import RELOC_COPY, RELOC_NONE, STB_LOCAL, STV_HIDDEN, STV_INTERNAL, VERSYM_INDEX
from customops.elf.records import ElfInfo, VersionSlot

_HIDDEN = np.isin(np.arange(4), (STV_HIDDEN, STV_INTERNAL))  # indexed by st_other's visibility


class LinkMap:
    """One loaded object: its file, who loaded it, its names and scopes, and what relocating it found."""

    def __init__(self, name: str, host: str, info: ElfInfo, loader: LinkMap | None, origin: str | None,
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
        self.rpath_next: LinkMap | None = (None if loader is None else loader if loader.effective_rpath
                                           else loader.rpath_next)
        self.top: LinkMap = self if loader is None else loader.top
        self.searchlist: list[LinkMap] = []  # set for the executable and dlopen roots
        self.scope: list[list[LinkMap]] = []
        self.relocated = False
        self.is_global = False
        self.definition_cache: dict[bytes, tuple[int, ...]] = {}
        self.bulk_bound = np.empty(0, dtype=np.intp)  # sorted indices of relocations bound to itself in bulk

    def matches(self, name: str) -> bool:
        """_dl_name_match_p: one of its names, or its SONAME."""
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
        found = self.definition_cache.get(symbol)
        if found is None:
            found = self.info.symbols.lookup(symbol, gnu) if self.info.symbols.has_hash_table else ()
            self.definition_cache[symbol] = found
        return found

    def relocations(self) -> np.ndarray:
        """The symbol indices its relocations look up, in the order of their first relocation. RESOLVE_MAP
        (elf/dl-reloc.c): a relocation against a local, hidden or internal symbol needs no lookup."""
        symbols = self.info.symbols
        entries = symbols.entries
        looked_up = ((symbols.reloc_class != RELOC_NONE) & ((entries["st_info"] >> 4) != STB_LOCAL)
                     & ~_HIDDEN[entries["st_other"] & 3])
        relocated = np.flatnonzero(looked_up)
        return relocated[np.argsort(symbols.reloc_first[relocated])]  # distinct positions: no ties

    @cached_property
    def copy_addresses(self) -> frozenset[int]:
        """The addresses of its symbols the executable's COPY relocations copy (aliases share them)."""
        symbols = self.info.symbols
        copied = np.flatnonzero(symbols.reloc_class == RELOC_COPY)
        return frozenset(symbols.entries["st_value"][copied].tolist())

    def symbol_version(self, i: int) -> VersionSlot | None:
        """The l_versions entry symbol `i`'s versym names, or None where it has no version (no versym, an
        index without an entry, or the base/local indices whose hash is 0)."""
        versym = self.info.symbols.versym
        if versym is None:
            return None
        slot = self.info.version_slots.get(int(versym[i]) & VERSYM_INDEX)
        return slot if slot is not None and slot.hash else None


class FlatScope:
    """A referrer's lookup scopes (l_scope) in search order, each object once: what _dl_lookup_symbol_x walks."""

    def __init__(self, scopes: list[list[LinkMap]]) -> None:
        self.scopes = scopes  # keeps the lists alive: their ids are the key a scope may be cached under
        self.objects: list[LinkMap] = []
        seen: set[int] = set()
        for scope in scopes:
            for o in scope:
                if id(o) not in seen:
                    seen.add(id(o))
                    self.objects.append(o)
        self._members = seen

    def __contains__(self, obj: LinkMap) -> bool:
        return id(obj) in self._members


def first_loaded(objects: list[LinkMap] | None) -> LinkMap | None:
    """The earliest in load order of these objects that is still loaded."""
    return min((o for o in objects or () if o.loaded), key=lambda o: o.seq, default=None)
