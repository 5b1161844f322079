"""The per-symbol lookup, as elf/dl-lookup.c does it: _dl_lookup_symbol_x walks the referrer's scope in
order, do_lookup_x searches each object's hash table, check_match accepts or rejects each definition.

This is the readable specification of binding; customops.linker.batch decides the same in bulk, and
`Linker(..., batch=False)` runs only this (tests compare both).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum, auto

from customops.elf.constants import (
    DF_SYMBOLIC,
    RELOC_COPY,
    RELOC_LAZY,
    SHN_ABS,
    SHN_UNDEF,
    STB_GLOBAL,
    STB_GNU_UNIQUE,
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
    VERSYM_HIDDEN,
    VERSYM_INDEX,
    Relocation,
)
from customops.elf.hashes import gnu_hash
from customops.elf.records import VersionSlot
from customops.linker.linkmap import FlatScope, LinkMap
from customops.linker.prediction import Bound
from customops.linker.types import BindingReason, Failure, FailureKind

ALLOWED_TYPES = {STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_COMMON, STT_TLS, STT_GNU_IFUNC}
# The members every relocation reads, as module names: reading one off its enum class costs ~0.1 µs
LAZY, NOW, COPY = Relocation.LAZY, Relocation.NOW, Relocation.COPY
SCOPE_ORDER = BindingReason.SCOPE_ORDER
Match = tuple[LinkMap, int]
# What a lookup decides: the winner (None: undefined), the definitions that lost, why the winner won
Decision = tuple[Match | None, tuple[Match, ...], BindingReason]


class Verdict(Enum):
    """check_match's answer for one definition."""

    MATCH = auto()
    REJECT = auto()
    VERSIONED = auto()  # a versioned definition an unversioned reference accepts only if it is the only one


class LookupCrash(Exception):
    """ld.so stops on an assertion during a lookup (the process dies)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.kind.value)
        self.failure = failure


def relocation_kind(reloc_class: int) -> Relocation:
    return LAZY if reloc_class == RELOC_LAZY else COPY if reloc_class == RELOC_COPY else NOW


class SymbolLookup:
    """The lookups of one process. `unique` is its GNU_UNIQUE table; `main` its executable."""

    def __init__(self, dynamic_weak: bool) -> None:
        self.dynamic_weak = dynamic_weak  # LD_DYNAMIC_WEAK
        self.unique: dict[bytes, Match] = {}
        self.main: LinkMap | None = None
        self._scopes: dict[tuple[int, ...], FlatScope] = {}  # by the ids of the scope lists they flatten

    def scope_of(self, obj: LinkMap) -> FlatScope:
        """The object's scopes flattened, once for every object that shares them."""
        key = tuple(id(s) for s in obj.scope)
        flat = self._scopes.get(key)
        if flat is None:
            flat = self._scopes[key] = self.flatten(obj.scope)
        return flat

    def flatten(self, scopes: list[list[LinkMap]]) -> FlatScope:
        return FlatScope(scopes)

    def scope_changed(self) -> None:
        """The global scope grew (an RTLD_GLOBAL dlopen): its flattened copies no longer hold."""
        self._scopes.clear()

    def relocate(self, obj: LinkMap) -> Iterator[tuple[int, Bound]]:
        """_dl_relocate_object's symbol lookups: each looked-up relocation, with its relocation class, in order.
        Raises LookupCrash when ld.so would stop."""
        scope = self.scope_of(obj)
        symbols = obj.info.symbols
        for i in obj.relocations().tolist():
            cls = int(symbols.reloc_class[i])
            yield cls, self.bind(obj, i, symbols.name(i), relocation_kind(cls), scope)

    def bind(self, obj: LinkMap, index: int, name: bytes, reloc: Relocation, scope: FlatScope) -> Bound:
        """One relocation of `obj` against its symbol `index`."""
        # The referrer's own entry, read alone: `fields` would convert a whole table (0.05 s for
        # libtensorflow_cc.so.2) for the few relocations of a large object that come this way.
        entry = obj.info.symbols.entries[index]
        st_info, st_other, st_shndx = int(entry["st_info"]), int(entry["st_other"]), int(entry["st_shndx"])
        own_defined = st_shndx != SHN_UNDEF
        weak_ref = not own_defined and (st_info >> 4) == STB_WEAK
        version = obj.symbol_version(index)
        version_name = version.name if version is not None else None
        # Protected definitions and -Bsymbolic objects bind their own references to themselves.
        protected = st_other & 3 == STV_PROTECTED
        if own_defined and reloc is not COPY and (protected or obj.info.flags & DF_SYMBOLIC):
            reason = BindingReason.PROTECTED if protected else BindingReason.SYMBOLIC
            return Bound(obj, name, version_name, reloc, weak_ref, (obj, index), (), reason)
        winner, losers, reason = self.decide(obj, name, version, reloc, scope)
        return Bound(obj, name, version_name, reloc, weak_ref, winner, losers, reason)

    def decide(self, referrer: LinkMap, name: bytes, version: VersionSlot | None, reloc: Relocation,
               scope: FlatScope) -> Decision:
        """The lookup a relocation asks for, over every object of the scope. A COPY relocation skips the
        executable (ELF_RTYPE_CLASS_COPY: do_lookup_x passes over lt_executable maps), whichever object holds
        it."""
        return self.lookup(referrer, name, version, reloc is LAZY, scope, scope.objects,
                           skip=self.main if reloc is COPY else None)

    def lookup(self, referrer: LinkMap, name: bytes, version: VersionSlot | None, plt: bool, scope: FlatScope,
               candidates: list[LinkMap], skip: LinkMap | None = None) -> Decision:
        """_dl_lookup_symbol_x over `candidates` (the scope, in order): the first acceptable definition wins;
        also collects the definitions that lost."""
        winner: Match | None = None
        weak_fallback: Match | None = None
        losers: list[Match] = []
        reason = SCOPE_ORDER
        gnu = self.gnu_hash(name)  # computed once for the whole walk, as _dl_lookup_symbol_x does
        for obj in candidates:
            found = None if obj is skip else self.find_in(obj, name, version, plt, gnu=gnu)
            if found is None:
                continue
            if winner is not None:
                losers.append((obj, found))
                continue
            bind = obj.info.symbols.fields[0][found] >> 4
            if bind == STB_WEAK and self.dynamic_weak:
                if weak_fallback is None:
                    weak_fallback = (obj, found)
                else:
                    losers.append((obj, found))
                continue
            if bind == STB_GNU_UNIQUE:  # elf/dl-lookup.c do_lookup_unique: one table for the process
                winner = self.unique.setdefault(name, (obj, found))
                if winner[0] is not obj:
                    losers.append((obj, found))
                    reason = BindingReason.GNU_UNIQUE
                continue
            winner = (obj, found)
            if obj is self.main and obj is not referrer and self._copies(obj, name):
                reason = BindingReason.COPY_RELOCATION
        if winner is None and weak_fallback is not None:
            winner = weak_fallback
        elif winner is not None and weak_fallback is not None:
            losers.insert(0, weak_fallback)
        return winner, tuple(loser for loser in losers if loser != winner), reason

    def _copies(self, obj: LinkMap, name: bytes) -> bool:
        """Does the executable hold a copy of this object? Aliases share the copy's address."""
        values = obj.info.symbols.fields[3]
        return any(values[i] in obj.copy_addresses for i in obj.definitions(name))

    def gnu_hash(self, name: bytes) -> int:
        return gnu_hash(name)

    def find_in(self, obj: LinkMap, name: bytes, version: VersionSlot | None, plt: bool, newest: bool = False,
                gnu: int | None = None) -> int | None:
        """do_lookup_x for one object: the first acceptable symbol, or None. An unversioned reference accepts
        a single versioned definition (`newest`: dlsym's, which takes the default version)."""
        versioned_candidate = None
        num_versions = 0
        for i in obj.definitions(name, gnu):
            verdict = self._check_match(obj, i, version, plt, newest)
            if verdict == Verdict.MATCH:
                return i
            if verdict == Verdict.VERSIONED:
                num_versions += 1
                if num_versions == 1:
                    versioned_candidate = i
        if num_versions == 1:
            return versioned_candidate
        return None

    def _check_match(self, obj: LinkMap, i: int, version: VersionSlot | None, plt: bool, newest: bool) -> Verdict:
        """check_match() of dl-lookup.c."""
        st_info, st_other, st_shndx, st_value, _size, versym = obj.info.symbols.fields
        shndx = st_shndx[i]
        stt = st_info[i] & 0xF
        # TLS relocations are of the PLT type class (elf_machine_type_class), so an undefined TLS entry, which
        # the no-value test lets through, is refused like a PLT reference's undefined entry
        if (st_value[i] == 0 and shndx != SHN_ABS and stt != STT_TLS) or ((plt or stt == STT_TLS)
                                                                          and shndx == SHN_UNDEF):
            return Verdict.REJECT
        if stt not in ALLOWED_TYPES:
            return Verdict.REJECT
        if (st_info[i] >> 4) not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
            return Verdict.REJECT
        if st_other[i] & 3 in (STV_HIDDEN, STV_INTERNAL):
            return Verdict.REJECT
        if version is not None:
            return self._check_version(obj, i, version, versym)
        if versym is not None:
            raw = versym[i]
            if (raw & VERSYM_INDEX) >= (2 if newest else 3):
                return Verdict.VERSIONED if not raw & VERSYM_HIDDEN else Verdict.REJECT
        return Verdict.MATCH

    def _check_version(self, obj: LinkMap, i: int, version: VersionSlot, versym: list[int] | None) -> Verdict:
        """check_match()'s test of a versioned reference against definition `i`."""
        if versym is None:
            if version.filename is not None and obj.matches(version.filename):
                raise LookupCrash(Failure(FailureKind.LOOKUP_ASSERTION, obj.name))
            return Verdict.MATCH
        raw = versym[i]
        slot = obj.info.version_slots.get(raw & VERSYM_INDEX)
        slot_hash = slot.hash if slot is not None else 0
        slot_name = slot.name if slot is not None else ""
        if (slot_hash != version.hash or slot_name != version.name) and (
            version.hidden or slot_hash or raw & VERSYM_HIDDEN
        ):
            return Verdict.REJECT
        return Verdict.MATCH
