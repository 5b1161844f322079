"""The speed layer: the same bindings as customops.linker.lookup, decided in bulk with numpy.

Every shortcut the model takes lives here, and `Linker(..., batch=False)` switches all of them off:
* bulk self-binding (`_bound_to_itself`): an object's own unique definitions no other object of its scope
  may export bind to itself, decided from hash tables without building names;
* the hash-half prefilter (customops.linker.scopeindex.ScopeIndex): a lookup visits only the objects whose
  export hash halves hold the name's, instead of every object of the scope;
* batch binding (`_bind_in_bulk`, remembered per scope by `_bind_remembered`): a whole object's
  relocations go through check_match's tests at once, per candidate object;
* memoised lookups per scope, and GNU hashes computed in batches.
What the batch cannot decide from one definition per object (versioned choice, GNU_UNIQUE, copy
relocations, LD_DYNAMIC_WEAK, ld.so's assertion) it leaves to the per-symbol lookup.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from customops.elf.constants import (
    DF_SYMBOLIC,
    RELOC_COPY,
    RELOC_LAZY,
    SHN_ABS,
    SHN_UNDEF,
    STB_GLOBAL,
    STB_GNU_UNIQUE,
    STB_WEAK,
    STT_TLS,
    STV_HIDDEN,
    STV_INTERNAL,
    STV_PROTECTED,
    VERSYM_HIDDEN,
    VERSYM_INDEX,
    Relocation,
)
from customops.elf.hashes import gnu_hashes
from customops.elf.records import VersionSlot
from customops.linker.linkmap import FlatScope, LinkMap
from customops.linker.lookup import (
    ALLOWED_TYPES,
    COPY,
    LAZY,
    NOW,
    SCOPE_ORDER,
    Decision,
    Match,
    SymbolLookup,
    relocation_kind,
)
from customops.linker.prediction import Bound
from customops.linker.scopeindex import ScopeIndex, members

# check_match's sets as tables indexed by st_info's type and binding and st_other's visibility (np.isin costs
# more than a whole small library's lookups).
_ALLOWED_TYPE = np.isin(np.arange(16), list(ALLOWED_TYPES))
_LOOKUP_BIND = np.isin(np.arange(16), (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE))
_HIDDEN = np.isin(np.arange(4), (STV_HIDDEN, STV_INTERNAL))
FEW = 8  # Linker's default: an object with at most this many looked-up relocations is relocated one by one

class BatchLookup(SymbolLookup):
    """SymbolLookup with every shortcut: the same decisions, in bulk."""

    def __init__(self, dynamic_weak: bool, few: int = 0) -> None:
        super().__init__(dynamic_weak)
        self.few = few
        self._memo: dict[tuple, Decision] = {}
        self._hashes: dict[bytes, int] = {}  # GNU hashes of the names looked up one by one, computed in batches
        self._version_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._version_ids: dict[str, int] = {}
        self._matchable: dict[int, np.ndarray] = {}
        self._export_halves: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # -- the per-symbol lookup, prefiltered and remembered ----------------------------------------
    def flatten(self, scopes: list[list[LinkMap]]) -> ScopeIndex:
        return ScopeIndex(scopes, self._halves)

    def scope_changed(self) -> None:
        super().scope_changed()
        self._memo.clear()

    def gnu_hash(self, name: bytes) -> int:
        known = self._hashes.get(name)
        return known if known is not None else super().gnu_hash(name)

    def decide(self, referrer: LinkMap, name: bytes, version: VersionSlot | None, reloc: Relocation,
               scope: FlatScope) -> Decision:
        """The lookup over the objects that may export the name, remembered for the scope with everything the
        lookup reads of the reference (its version's hidden flag and named file, whether the referrer is the
        executable). An undefined name is remembered too: its message is made from each referrer's own
        Bound."""
        assert isinstance(scope, ScopeIndex)
        key = (tuple(id(s) for s in referrer.scope), name,
               None if version is None else (version.name, version.hidden, version.filename), reloc is LAZY,
               reloc is COPY, referrer is self.main)
        memo = self._memo.get(key)
        if memo is None:
            half = self._hashes[name] >> 1
            memo = self.lookup(referrer, name, version, reloc is LAZY, scope, scope.candidates(half),
                               skip=self.main if reloc is COPY else None)
            self._memo[key] = memo
        return memo

    # -- relocation in bulk ----------------------------------------------------------------------
    def relocate(self, obj: LinkMap) -> Iterator[tuple[int, Bound]]:
        relocated = obj.relocations()
        if not len(relocated):
            return
        if len(relocated) <= self.few:
            yield from self._relocate_each(obj, relocated.tolist())
            return
        symbols = obj.info.symbols
        scope = self.scope_of(obj)
        assert isinstance(scope, ScopeIndex)
        bulk = self._bound_to_itself(obj, relocated, symbols.hash_halves[relocated], scope)
        obj.bulk_bound = np.sort(relocated[bulk])
        indices = relocated[~bulk]
        names = symbols.names(indices)
        hashes = gnu_hashes(names)
        self._hashes.update(zip(names, hashes.tolist(), strict=True))
        classes = symbols.reloc_class[indices].tolist()
        decided = self._bind_remembered(obj, scope, indices, names, hashes)
        for raw, i, name, cls in zip(decided, indices.tolist(), names, classes, strict=True):
            yield cls, raw if raw is not None else self.bind(obj, i, name, relocation_kind(cls), scope)

    def _relocate_each(self, obj: LinkMap, relocated: list[int]) -> Iterator[tuple[int, Bound]]:
        """A few relocations go through the per-symbol lookup (prefiltered and remembered all the same): the
        arrays of a batch cost ~0.3 ms an object whatever its size, several times its lookups."""
        symbols = obj.info.symbols
        scope = self.scope_of(obj)
        for i in relocated:
            name = symbols.name(i)
            if name not in self._hashes:
                self._hashes[name] = super().gnu_hash(name)
            cls = int(symbols.reloc_class[i])
            yield cls, self.bind(obj, i, name, relocation_kind(cls), scope)

    def _bound_to_itself(self, obj: LinkMap, relocated: np.ndarray, halves: np.ndarray,
                         scope: ScopeIndex) -> np.ndarray:
        """Relocations of the object's own unique, acceptable definitions whose name no other object in
        its scope may export: ld.so's walk can only end at the object itself. Decided in bulk from the
        hash tables (no names built), which makes a 400k-symbol framework library cheap; every
        relocation with a real choice, or a hash collision, goes through the per-symbol lookup."""
        own, repeated = members(list(self._halves(obj)), halves)
        if obj not in scope:
            own[:] = False
        others = scope.count(halves) - own > 0
        e = obj.info.symbols.entries
        acceptable = (self._matchable_of(obj) & ((e["st_info"] >> 4) != STB_GNU_UNIQUE) & (e["st_shndx"] != SHN_UNDEF)
                      & (obj.info.symbols.reloc_class != RELOC_COPY))
        return own & ~others & acceptable[relocated] & ~repeated

    def _bind_remembered(self, obj: LinkMap, scope: ScopeIndex, indices: np.ndarray, names: list[bytes],
                         hashes: np.ndarray) -> list[Bound | None]:
        """`_bind_in_bulk`, each decision remembered for the scope: it depends on the name, the reference's
        version, PLT or not and whether the referrer is the executable, not on which object refers. A name
        defined by thousands of objects of one scope is then decided once, not once per referrer (which
        walked every definition for each). The lookups the batch leaves to `bind` are remembered as such;
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
        decided: list[Bound | None] = [None] * len(indices)
        missing = []
        for k, key in enumerate(keys):
            if key is None or key not in scope.decided:
                missing.append(k)
                continue
            remembered = scope.decided[key]
            if remembered is not None:
                weak_ref = (int(e["st_shndx"][k]) == SHN_UNDEF and int(e["st_info"][k]) >> 4 == STB_WEAK)
                version = obj.symbol_version(int(indices[k]))
                decided[k] = Bound(obj, names[k], version.name if version is not None else None,
                                   LAZY if key[4] else NOW, weak_ref, *remembered, SCOPE_ORDER)
        if not missing:
            return decided
        at = np.array(missing, dtype=np.intp)
        asked = [names[k] for k in missing]
        exporters = scope.exporters(hashes[at] >> 1)
        for o, found in exporters:  # every definition the lookups below may ask for, in bulk per object
            wanted = np.flatnonzero(found)
            if len(wanted) > 1:
                _prefetch(o, [asked[k] for k in wanted.tolist()], hashes[at][wanted])
        for k, raw in zip(missing, self._bind_in_bulk(obj, indices[at], asked, exporters), strict=True):
            decided[k] = raw
            key = keys[k]
            if key is not None:
                scope.decided[key] = None if raw is None else (raw.winner, raw.losers)
        return decided

    def _bind_in_bulk(self, obj: LinkMap, indices: np.ndarray, names: list[bytes],
                      exporters: list[tuple[LinkMap, np.ndarray]]) -> list[Bound | None]:
        """The same lookups as `bind`, decided for a whole batch with array operations where nothing can
        depend on the order of the lookups or on more than one definition per object: each candidate
        object's one definition of the name goes through check_match's tests at once, the first match
        wins and later matches lose. None marks a relocation left to `bind`: a COPY relocation, a
        protected or -Bsymbolic own definition, several definitions of the name in one object (versioned
        choice), GNU_UNIQUE (process-wide state), the executable (copy relocations), a versioned reference
        to an object without versym (ld.so's assertion), or LD_DYNAMIC_WEAK."""
        n = len(indices)
        if not n or self.dynamic_weak:
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
        matched: list[tuple[LinkMap, np.ndarray, np.ndarray]] = []  # per candidate: ks matched, definitions
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
        winners, losers = _first_matches(matched)
        st_info = e["st_info"].tolist()
        slots = obj.info.version_slots
        version_names = [None if not h else slots[v].name for h, v in zip(ref_hash.tolist(), ref_slot.tolist(),
                                                                        strict=True)]
        decided: list[Bound | None] = [None] * n
        kinds = [LAZY if c == RELOC_LAZY else NOW for c in cls.tolist()]
        for k, (skip, defined) in enumerate(zip(undecided.tolist(), own_defined.tolist(), strict=True)):
            if not skip:
                decided[k] = Bound(obj, names[k], version_names[k], kinds[k],
                                   not defined and (st_info[k] >> 4) == STB_WEAK, winners.get(k),
                                   tuple(losers.get(k, ())), SCOPE_ORDER)
        return decided

    def _acceptable(self, o: LinkMap, oe: np.ndarray, d: np.ndarray, plt: np.ndarray, versioned: np.ndarray,
                    ref_hash: np.ndarray, ref_id: np.ndarray, ref_hidden: np.ndarray) -> np.ndarray:
        """check_match() for definitions `d` of `o` (their entries `oe`), each against its own reference (see
        lookup's `_check_match`); a versioned reference to an object without versym is left to the caller."""
        ok = self._matchable_of(o)[d] & ~(plt & (oe["st_shndx"] == SHN_UNDEF))
        if o.info.symbols.versym is None:
            return ok
        raw = o.info.symbols.versym[d]
        slot, def_hash, def_id, _hidden = self._versions_at(o, d)
        hidden = (raw & VERSYM_HIDDEN) != 0
        wrong_version = versioned & ((def_hash != ref_hash) | (def_id != ref_id)) & (ref_hidden | (def_hash != 0)
                                                                                    | hidden)
        hidden_versioned = ~versioned & (slot >= 3) & hidden  # unversioned references skip hidden versions
        return ok & ~wrong_version & ~hidden_versioned

    def _versions_at(self, obj: LinkMap, indices: np.ndarray
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

    def _matchable_of(self, obj: LinkMap) -> np.ndarray:
        """check_match()'s tests that depend on the definition alone, for every symbol of `obj`: a value (or
        SHN_ABS, or a defined TLS symbol: TLS relocations are of the PLT class), an allowed type, a global,
        weak or unique binding, and a visible symbol."""
        found = self._matchable.get(id(obj))
        if found is None:
            e = obj.info.symbols.entries
            stt = e["st_info"] & 0xF
            tls = stt == STT_TLS
            found = self._matchable[id(obj)] = (
                ((e["st_value"] != 0) | (e["st_shndx"] == SHN_ABS) | tls) & ~(tls & (e["st_shndx"] == SHN_UNDEF))
                & _ALLOWED_TYPE[stt] & _LOOKUP_BIND[e["st_info"] >> 4] & ~_HIDDEN[e["st_other"] & 3])
        return found

    def _halves(self, obj: LinkMap) -> tuple[np.ndarray, np.ndarray]:
        """Sorted hash halves of every symbol a lookup could find in `obj`, and those occurring more than once
        (a name under several versions, or a hash collision): answers "may this object export X?" in bulk."""
        found = self._export_halves.get(id(obj))
        if found is None:
            symbols = obj.info.symbols
            if not symbols.has_hash_table or not symbols.count:
                found = np.empty(0, np.uint32), np.empty(0, np.uint32)
            else:
                e = symbols.entries
                mask = (e["st_shndx"] != SHN_UNDEF) | (e["st_value"] != 0)
                mask[0] = False
                values, counts = np.unique(symbols.hash_halves[mask], return_counts=True)
                found = values, values[counts > 1]
            self._export_halves[id(obj)] = found
        return found


def _first_matches(matched: list[tuple[LinkMap, np.ndarray, np.ndarray]]
                   ) -> tuple[dict[int, Match], dict[int, list[Match]]]:
    """Per reference k, the first matching definition in scope order, and the later ones (which lose)."""
    winners: dict[int, Match] = {}
    losers: dict[int, list[Match]] = {}
    for o, ks, d in matched:
        for k, i in zip(ks.tolist(), d.tolist(), strict=True):
            if k in winners:
                losers.setdefault(k, []).append((o, i))
            else:
                winners[k] = (o, i)
    return winners, losers


def _prefetch(obj: LinkMap, names: list[bytes], hashes: np.ndarray) -> None:
    """`obj.definitions` of many names in one pass over its hash table (the same walk, in bulk)."""
    if not obj.info.symbols.has_hash_table:
        return
    found = obj.info.symbols.lookup_many(names, hashes)
    if found is not None:
        obj.definition_cache.update(zip(names, found, strict=True))
