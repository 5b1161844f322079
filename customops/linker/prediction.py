"""What the model predicts for one process: every step's outcome, the objects loaded, and every binding,
kept compact (a Bound per looked-up relocation) and turned into Binding records only when asked for."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from customops.elf.constants import RELOC_LAZY, SYMBOL_BINDS, SYMBOL_TYPES, SYMBOL_VISIBILITIES, Relocation
from customops.linker.linkmap import LinkMap
from customops.linker.messages import dlerror, undefined
from customops.linker.types import (
    Binding,
    BindingReason,
    Definition,
    LoadedObject,
    StepKind,
    StepOutcome,
    StepStatus,
)


class Bound(NamedTuple):
    """A binding as the model stores it: compact, turned into a Binding record only when asked for."""

    referrer: LinkMap
    name: bytes
    version: str | None
    relocation: Relocation
    weak_reference: bool
    winner: tuple[LinkMap, int] | None
    losers: tuple[tuple[LinkMap, int], ...]
    reason: BindingReason


@dataclass
class Prediction:
    outcomes: list[StepOutcome]
    objects: list[LoadedObject]
    global_scope: list[str]
    raw_bindings: dict[tuple[str, bytes], Bound] = field(repr=False)
    relocated_objects: dict[str, LinkMap] = field(repr=False)
    exit_message: str | None = None  # set when the process dies (startup failure, lazy call failure)

    @property
    def startup(self) -> StepOutcome | None:
        """The process's start-up (its preloads' outcomes come before it)."""
        return next((o for o in self.outcomes if o.kind is StepKind.STARTUP), None)

    def binding(self, referrer: str, symbol: str | bytes) -> Binding | None:
        key = symbol.encode() if isinstance(symbol, str) else symbol
        raw = self.raw_bindings.get((referrer, key))
        if raw is not None:
            return to_binding(raw)
        obj = self.relocated_objects.get(referrer)
        if obj is not None:
            for i in obj.definitions(key):
                at = np.searchsorted(obj.bulk_bound, i)
                if at < len(obj.bulk_bound) and obj.bulk_bound[at] == i:
                    return to_binding(self_binding(obj, i))
        return None

    def bindings(self) -> Iterator[Binding]:
        yield from (to_binding(raw) for raw in self.raw_bindings.values())
        for obj in self.relocated_objects.values():
            yield from (to_binding(self_binding(obj, i)) for i in obj.bulk_bound.tolist())

    @property
    def ok(self) -> bool:
        return self.exit_message is None and all(o.status == StepStatus.LOADED for o in self.outcomes)

    def interpositions(self, involving: set[str] | None = None) -> Iterator[Binding]:
        """Bindings where another object's definition lost to the winner; with `involving`, only those
        whose winner or a loser is one of these objects (converting every binding of two framework
        libraries' shared C++ definitions costs more than all the rest of a check)."""
        return (to_binding(raw) for raw in self.raw_bindings.values() if raw.losers and raw.winner is not None
                and (involving is None or raw.winner[0].name in involving
                     or any(loser[0].name in involving for loser in raw.losers)))


def definition(obj: LinkMap, i: int, name: bytes | None = None) -> Definition:
    """The record of symbol `i` of `obj`; `name` when the caller knows it (a lookup's match has the name it
    looked up), which spares decoding it from the string table."""
    st_info, st_other, _shndx, _value, st_size, _versym = obj.info.symbols.fields
    version = obj.symbol_version(i)
    return Definition(
        obj.name,
        obj.info.symbols.name(i) if name is None else name,
        version.name if version is not None else None,
        SYMBOL_BINDS.get(st_info[i] >> 4, st_info[i] >> 4),
        SYMBOL_TYPES.get(st_info[i] & 0xF, st_info[i] & 0xF),
        SYMBOL_VISIBILITIES[st_other[i] & 3],
        st_size[i],
    )


def self_binding(obj: LinkMap, i: int) -> Bound:
    """A relocation of `obj` bound to its own definition `i`."""
    name = obj.info.symbols.name(i)
    cls = int(obj.info.symbols.reloc_class[i])
    version = obj.symbol_version(i)
    relocation = Relocation.LAZY if cls == RELOC_LAZY else Relocation.NOW
    return Bound(obj, name, version.name if version is not None else None, relocation, False, (obj, i), (),
                 BindingReason.SCOPE_ORDER)


def to_binding(raw: Bound) -> Binding:
    return Binding(
        raw.referrer.name, raw.name, raw.version, raw.relocation, raw.weak_reference,
        definition(*raw.winner, raw.name) if raw.winner else None,
        tuple(definition(*loser, raw.name) for loser in raw.losers), raw.reason,
        "" if raw.winner is not None or raw.weak_reference else
        dlerror(undefined(raw.referrer.name, raw.name, raw.version)),
    )
