"""Within one run that checks the same files against several containers (the upgrade matrix: one check per
release), what is read of the files, or derived from them alone, is read once: the files do not change between the
checks, only the facts they are held against. Outside `read_once()` nothing is kept."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
_KEPT: dict[Hashable, Any] | None = None  # within read_once(): what has been read, by what it was read with


@contextmanager
def read_once() -> Iterator[None]:
    """Within it, `once` computes each key once (a nested use shares the outer one's)."""
    global _KEPT
    outer = _KEPT
    _KEPT = {} if outer is None else outer
    try:
        yield
    finally:
        _KEPT = outer


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, kept under `key` within read_once() (an exception is not kept: it is raised again). The value
    is shared: keep it immutable."""
    if _KEPT is None:
        return compute()
    if key not in _KEPT:
        _KEPT[key] = compute()
    found: T = _KEPT[key]
    return found
