"""Reading protobuf's wire format directly: the few fields a check needs from a model file, without the
model's schema package and without copying its weights (views into a mapping)."""

from __future__ import annotations

from collections.abc import Iterator


class DamagedModel(ValueError):
    pass


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(buf) or shift > 63:
            raise DamagedModel("truncated varint")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def fields(buf: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of each field: ints for varints, views for length-delimited ones."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(buf, at)
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
