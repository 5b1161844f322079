"""The speed layer's index of a lookup scope (used by customops.linker.batch only): which objects of the
scope may export a name, from the hash halves of their symbols, for a whole batch of names at once."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from customops.linker.linkmap import FlatScope, LinkMap
from customops.linker.lookup import Match

# A batch decision: (winner, losers), or None where the per-symbol lookup decides
Remembered = tuple[Match | None, tuple[Match, ...]] | None


class ScopeIndex(FlatScope):
    """A flat scope with an index of what its objects may export: every object's export hash halves sorted
    together, each with the object's position. A batch of relocations finds the objects that may define each
    name with two binary searches per name, instead of one membership test per object of the scope, which made
    a chain of thousands of libraries quadratic."""

    def __init__(self, scopes: list[list[LinkMap]],
                 halves_of: Callable[[LinkMap], tuple[np.ndarray, np.ndarray]]) -> None:
        super().__init__(scopes)
        self._halves_of = halves_of
        # Batch decisions by (name, version hash, version id, hidden, PLT, referrer is the executable)
        self.decided: dict[tuple, Remembered] = {}

    @cached_property
    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        halves = [self._halves_of(o)[0] for o in self.objects]
        sizes = np.fromiter(map(len, halves), dtype=np.intp, count=len(halves))
        values = np.concatenate(halves) if halves else np.empty(0, np.uint32)
        positions = np.repeat(np.arange(len(halves)), sizes)
        order = np.argsort(values, kind="stable")  # equal halves stay in scope order
        return values[order], positions[order]

    def count(self, queries: np.ndarray) -> np.ndarray:
        """How many objects of the scope may export each queried hash half. The queries are searched in sorted
        order, whose neighbouring binary searches share their cache lines: a framework library's 450k
        relocations against its scope's 550k exports take a third of the time of searching them as they come."""
        values, _positions = self._index
        order = np.argsort(queries)
        ordered = queries[order]
        counts = np.empty(len(queries), dtype=np.intp)
        counts[order] = np.searchsorted(values, ordered, "right") - np.searchsorted(values, ordered, "left")
        return counts

    def candidates(self, half: int) -> list[LinkMap]:
        """The objects that may export one hash half, in scope order."""
        values, positions = self._index
        left, right = np.searchsorted(values, half, "left"), np.searchsorted(values, half, "right")
        return [self.objects[p] for p in positions[left:right].tolist()]  # sorted stably: in scope order

    def exporters(self, queries: np.ndarray) -> list[tuple[LinkMap, np.ndarray]]:
        """The objects that may export each queried hash half, in scope order, each with the mask of the
        queries it may answer."""
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


def members(sorted_sets: list[np.ndarray], queries: np.ndarray) -> list[np.ndarray]:
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
