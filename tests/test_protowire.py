"""Every protobuf varint customops reads goes through one decoder (customops.inspect.protowire.varint), whose
caller says how it bounds a varint and what a bad one is. Each caller's behaviour on the edges is pinned here,
through the caller's own parsing: a model file's fields (strict, 10 bytes: a 64-bit varint's most), an
embedded FileDescriptorProto's lengths (tolerant, 5 bytes: a 32-bit length's most), and the OpList the
probe's children read from TensorFlow (strict, unbounded)."""

from __future__ import annotations

import pytest

from customops.inspect.protobuf_descriptors import embedded_imports
from customops.inspect.protowire import DamagedModel, fields, varint
from customops.probe import frameworks

MAX_64 = b"\xff" * 9 + b"\x01"  # 2**64 - 1, ten bytes
OVER_64 = b"\xff" * 9 + b"\x7f"  # 2**70 - 1: ten bytes, more than 64 bits
ELEVEN = b"\x80" * 10 + b"\x01"  # 2**70, eleven bytes
LONG_ZERO = b"\x80" * 19 + b"\x00"  # 0, twenty bytes


def test_the_decoder_itself():
    assert varint(b"\x96\x01", 0) == (150, 2)
    assert varint(b"\x00\x96\x01", 1) == (150, 3)
    assert varint(MAX_64, 0) == (2**64 - 1, 10)
    for bad in (b"", b"\x80", ELEVEN):
        with pytest.raises(DamagedModel, match="truncated varint"):
            varint(bad, 0)
    assert varint(b"\x80", 0, strict=False) == (None, 1)
    assert varint(b"\x80" * 6, 0, strict=False, most=5) == (None, 5)
    assert varint(LONG_ZERO, 0, most=None) == (0, 20)


@pytest.mark.parametrize(("data", "parsed"), [
    (b"", []),  # an empty message
    (b"\x08" + MAX_64, [(1, 2**64 - 1)]),
    (b"\x08" + OVER_64, [(1, 2**70 - 1)]),  # ten bytes are taken as they are
    (b"\x08", DamagedModel),  # the value's varint has no byte
    (b"\x08\x80", DamagedModel),  # truncated
    (b"\x08" + ELEVEN, DamagedModel),  # eleven bytes
    (b"\x80", DamagedModel),  # the key truncated
])
def test_a_model_files_fields_are_strict_with_ten_bytes(data, parsed):
    if parsed is DamagedModel:
        with pytest.raises(DamagedModel, match="truncated varint"):
            list(fields(memoryview(data)))
    else:
        assert list(fields(memoryview(data))) == parsed


NAMED = b"\n\x07a.proto"  # FileDescriptorProto.name


@pytest.mark.parametrize(("length", "imports"), [
    (b"\x07", {"a.proto": ("b.proto",)}),
    (b"\x87\x80\x80\x80\x00", {"a.proto": ("b.proto",)}),  # five bytes, not the shortest: taken
    (b"\x87\x80\x80\x80\x80\x00", {}),  # six bytes: not a descriptor
    (ELEVEN, {}),
    (OVER_64, {}),
    (b"\x80", {}),  # truncated (the data ends)
    (b"", {}),  # no byte of the length (the data ends)
])
def test_an_embedded_descriptors_lengths_are_tolerant_with_five_bytes(length, imports):
    following = b"b.proto" if length not in (b"\x80", b"") else b""
    assert embedded_imports(NAMED + b"\x1a" + length + following) == imports


def _op_names(script: str):
    namespace: dict[str, object] = {"__name__": "__probe__"}
    exec(compile(script, "<probe>", "exec"), namespace)
    return namespace["op_names"]


@pytest.mark.parametrize("script", ["LOADER", "TENSORFLOW_OPS"])
def test_the_probe_childrens_oplists_are_strict_and_unbounded(script):
    op_names = _op_names(getattr(frameworks, script))
    op = b"\x0a\x04MyOp"  # OpDef.name
    assert op_names(b"") == set()
    assert op_names(b"\x0a" + bytes([len(op)]) + op) == {"MyOp"}
    for data in (b"\x08" + MAX_64, b"\x08" + OVER_64, b"\x08" + ELEVEN, b"\x08" + LONG_ZERO):
        assert op_names(data) == set()  # a varint field: skipped, however long
    for data in (b"\x08", b"\x08\x80", b"\x80"):  # an IndexError ("index out of range") before the one decoder
        with pytest.raises(ValueError, match="truncated varint"):
            op_names(data)
