"""Every finding code is made by one named function, its emitter, registered for it with `@emits(Code.COxxx)`
(ruff's one rule, one violation): `REGISTRY` says which function makes a code, and a Finding of a code can only
be made while that code's emitter runs, so the registry is the truth, checked at run time rather than by
reading the source. A copy of a finding with a field changed (its place, a suppression, more evidence) is
made under its code (customops.findings.amended): it is still the emitter's finding.

An emitter returns what it made (a Finding, a list of them, the error that reports CO106) and calls what it
likes; a nested emitter makes its own code. It is not a generator: a generator's findings would be made after
it returned, outside it, and be refused. This module imports no Finding, so that launch's start from a cached
verdict, whose loaders and manifest reader register emitters, stays as light as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from customops.codes import Code

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Emitter:
    """Where a code's findings are made: the module and the name of its emitter."""

    code: Code
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


REGISTRY: dict[Code, Emitter] = {}
_MAKING: ContextVar[Code | None] = ContextVar("customops_making", default=None)


def emits(code: Code) -> Callable[[F], F]:
    """Register the decorated function as the one emitter of `code`; a second one for the code is refused."""
    def register(function: F) -> F:
        emitter = Emitter(code, function.__module__, function.__qualname__)
        if REGISTRY.setdefault(code, emitter) != emitter:
            raise ValueError(f"{code} has two emitters: {REGISTRY[code]} and {emitter}")

        @functools.wraps(function)
        def emitting(*args: Any, **kwargs: Any) -> Any:
            token = _MAKING.set(code)
            try:
                return function(*args, **kwargs)
            finally:
                _MAKING.reset(token)

        return emitting  # type: ignore[return-value]

    return register


@contextmanager
def making(code: Code) -> Iterator[None]:
    """Inside, findings of `code` may be made: what a copy of one of them runs under."""
    token = _MAKING.set(code)
    try:
        yield
    finally:
        _MAKING.reset(token)


def check_maker(code: Code) -> None:
    """Every Finding made calls this: refused unless `code`'s emitter (or a copy of a finding of it) makes it."""
    current = _MAKING.get()
    if current != code:
        maker = f"while {REGISTRY.get(current, current)} runs" if current else "outside any emitter"
        raise RuntimeError(f"a {code} finding made {maker}: only {REGISTRY.get(code, 'its emitter')} makes {code} "
                           "(customops.emitters)")
