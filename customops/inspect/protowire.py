"""Reading protobuf's wire format directly: the few fields a check needs from a model file, without the
model's schema package and without copying its weights (views into a mapping).

`varint` is the one varint decoder of customops: the probe's children (customops/probe/child_load.py,
child_tensorflow_ops.py) run this file's text too (customops.probe.frameworks appends it to theirs), so it
needs nothing but the standard library and runs on Python 3.8 and later.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, overload

MOST = 10  # the bytes of a 64-bit varint


class DamagedModel(ValueError):
    pass


@overload
def varint(buf: bytes | memoryview, at: int, strict: Literal[True] = True,
           most: int | None = MOST) -> tuple[int, int]: ...


@overload
def varint(buf: bytes | memoryview, at: int, strict: Literal[False],
           most: int | None = MOST) -> tuple[int | None, int]: ...


def varint(buf: bytes | memoryview, at: int, strict: bool = True, most: int | None = MOST) -> tuple[int | None, int]:
    """(value, offset after it) of the varint at `at`, of at most `most` bytes (None: any number). A varint
    that the data ends in, or longer than `most`: strict raises DamagedModel("truncated varint"), tolerant
    returns (None, the offset where it stopped). The value is not masked: ten bytes may hold more than 64 bits."""
    value = shift = 0
    while at < len(buf) and (most is None or shift < 7 * most):
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    if strict:
        raise DamagedModel("truncated varint")
    return None, at


def fields(buf: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of each field: ints for varints, views for length-delimited ones."""
    at = 0
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
            yield number, value
        elif wire == 2:
            size, at = varint(buf, at)
            if at + size > len(buf):
                raise DamagedModel("length past the end")
            yield number, buf[at:at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
            if at > len(buf):
                raise DamagedModel("fixed-width field past the end")
        else:
            raise DamagedModel(f"wire type {wire}")


def text(value: int | memoryview) -> str:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, memoryview) else ""
