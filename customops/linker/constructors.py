"""elf/dl-init.c _dl_init: once the start-up relocations are done, ld.so runs every object's constructors,
dependencies first, before the program's main. A lazily bound function that nothing defines kills the process
at its first call (`symbol lookup error`, exit 127), and a constructor's call is such a first call: the process
dies before main. Which of them the constructors call is read from their code (elf.reach), and only for the
objects that have such functions: a framework library whose functions all resolve is never decoded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from customops.elf.constructors import read_code
from customops.elf.parse import MALFORMED, open_mapped
from customops.elf.reach import Reach, reach
from customops.errors import ElfError
from customops.linker.linkmap import LinkMap
from customops.linker.prediction import Bound
from customops.linker.types import Binding, ConstructorCall, ConstructorReach


def init_order(searchlist: Sequence[LinkMap], main: LinkMap | None) -> list[LinkMap]:
    """The order _dl_init calls the objects' constructors: the search list's dependencies before the objects
    that need them (its reverse), the executable's own last (__libc_start_main runs them)."""
    last = [main] if main is not None and main in searchlist else []
    return [*(o for o in reversed(searchlist) if o is not main), *last]


def constructor_reach(objects: Sequence[LinkMap], lazy_failures: Sequence[Binding],
                      bindings: dict[tuple[str, bytes], Bound]) -> tuple[ConstructorReach, ...]:
    """For each object (in the order its constructors run) with functions that nothing defines: the ones its
    constructors call, first called first."""
    failing: dict[str, dict[bytes, Binding]] = {}
    for binding in lazy_failures:
        failing.setdefault(binding.referrer, {}).setdefault(binding.symbol, binding)
    return tuple(_reach(obj, failing[obj.name], bindings) for obj in objects if obj.name in failing)


def _reach(obj: LinkMap, failing: dict[bytes, Binding], bindings: dict[tuple[str, bytes], Bound]
           ) -> ConstructorReach:
    def own(symbol: bytes) -> int | None:
        """The address of the object's own definition a call of `symbol` binds to (the traversal goes on
        into it), None where it binds elsewhere or nowhere."""
        bound = bindings.get((obj.name, symbol))
        if bound is not None:
            return int(obj.info.symbols.fields[3][bound.winner[1]]) if bound.winner and bound.winner[0] is obj \
                else None
        bulk = obj.bulk_bound  # bound to itself in bulk (linker.batch), recorded by index only
        found = [i for i in obj.definitions(symbol) if (at := int(np.searchsorted(bulk, i))) < len(bulk)
                 and bulk[at] == i]
        return int(obj.info.symbols.fields[3][found[0]]) if found else None

    try:
        data, _identity = open_mapped(obj.host)
        found: Reach = reach(read_code(obj.host, data), own)
    except ElfError as error:
        return ConstructorReach(obj.name, (), f"its code cannot be read ({error.reason})")
    except MALFORMED as error:
        return ConstructorReach(obj.name, (), f"its code cannot be read ({error})")
    calls = tuple(ConstructorCall(failing[r.symbol], r.chain[0] if r.chain else r.constructor.where,
                                  r.constructor.where, r.chain) for r in found.calls if r.symbol in failing)
    return ConstructorReach(obj.name, calls, found.undecided)
