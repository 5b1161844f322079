"""The protobuf descriptor tables a library defines and the .proto files they embed, read statically.

protoc's C++ code gives every .proto file a `DescriptorTable` named `descriptor_table_<file>` (the file name
with every byte other than [A-Za-z0-9] written `_xx`, its hex: `google/protobuf/any.proto` is
`descriptor_table_google_2fprotobuf_2fany_2eproto`), holding the file's serialized FileDescriptorProto and
pointers to the tables of the files it imports. A static initialiser (`AddDescriptorsRunner`) registers each
table, its imports first, into protobuf's generated pool; a file registered twice into one pool aborts the
process (`File already exists in database: <file>`, descriptor_database.cc).

What this module reads, without running anything:
- which tables a library exports (default visibility, in `.dynsym`: another object's references bind to
  them) and which it names in `.dynsym` at all (exported or imported): a table of a file it does not name
  there is its private copy;
- the imports of each .proto file whose serialized FileDescriptorProto the library embeds (fields 1, name,
  and 3, dependency, which protoc writes first, in field order).
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from customops import safeio
from customops.elf.cache import ElfReader
from customops.elf.records import ElfInfo
from customops.errors import ElfError, InputError
from customops.inspect.protowire import varint

PREFIX = b"descriptor_table_"
_NOT_A_TABLE = (b"descriptor_table_protodef_",)  # the serialized bytes themselves (older protoc exports them)
_ESCAPE = re.compile(rb"_([0-9a-f]{2})")
# A serialized FileDescriptorProto starts with its name (field 1, tag 0x0a, one-byte length) ending in .proto.
_SERIALIZED = re.compile(rb"\n([\x01-\x7f])(?=[\w./+-]{1,126}\.proto)")
_NAME_CHARS = re.compile(rb"[\w./+-]+\.proto\Z")
LENGTH_BYTES = 5  # a length's varint holds 32 bits at most: a longer one is not a descriptor
_FOLLOWING = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14}  # the fields a FileDescriptorProto may hold after its name


@dataclass(frozen=True)
class DescriptorFacts:
    """One library's descriptor tables: `exported` and `named` are .proto file names (a table exported; a
    table named in `.dynsym`, defined or not); `imports` maps each embedded file to the files it imports."""

    exported: frozenset[str] = frozenset()
    named: frozenset[str] = frozenset()
    imports: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def private(self, proto: str) -> bool:
        """Whether the library's table of `proto` is its own copy: one it embeds but names nowhere in
        `.dynsym`, so that no other object's table can stand in for it."""
        return proto in self.imports and proto not in self.named


def proto_file(symbol: bytes) -> str | None:
    """The .proto file a `descriptor_table_<file>` symbol is named after, or None for any other name."""
    if not symbol.startswith(PREFIX) or symbol.startswith(_NOT_A_TABLE):
        return None
    mangled = symbol[len(PREFIX):]
    if not mangled or not re.fullmatch(rb"(?:[A-Za-z0-9]|_[0-9a-f]{2})+", mangled):
        return None
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), mangled).decode("latin-1")


def table_symbol(proto: str) -> bytes:
    """protoc's `descriptor_table_<file>` name for a .proto file (FilenameIdentifier in protoc's helpers)."""
    return PREFIX + b"".join(bytes([c]) if chr(c).isascii() and chr(c).isalnum() else b"_%02x" % c
                             for c in proto.encode())


def tables(info: ElfInfo) -> tuple[frozenset[str], frozenset[str]]:
    """(exported, named): the .proto files whose tables `.dynsym` defines for other objects, and those it
    names at all (defined, or imported from another object)."""
    symbols = info.symbols
    mask = symbols.names_containing(PREFIX)
    indices = mask.nonzero()[0]
    exported_mask = symbols.exported_mask
    exported, named = set(), set()
    for i, name in zip(indices.tolist(), symbols.names(indices), strict=True):
        proto = proto_file(bytes(name))
        if proto is None:
            continue
        named.add(proto)
        if exported_mask[i]:
            exported.add(proto)
    return frozenset(exported), frozenset(named)


def embedded_imports(data: bytes | mmap.mmap) -> dict[str, tuple[str, ...]]:
    """Each embedded serialized FileDescriptorProto's name and its imports, the first well-formed copy of
    each file; a name longer than 127 bytes is not looked for."""
    found: dict[str, tuple[str, ...]] = {}
    with memoryview(data) as view:
        for match in _SERIALIZED.finditer(data):
            start = match.end()
            name = bytes(view[start:start + match.group(1)[0]])
            if not _NAME_CHARS.match(name):
                continue
            parsed = _imports(view, start + len(name))
            if parsed is not None:
                found.setdefault(name.decode("ascii"), parsed)
    return found


def _imports(view: memoryview, at: int) -> tuple[str, ...] | None:
    """The dependency fields (3) after a FileDescriptorProto's name; None where what follows is not one."""
    imports: list[str] = []
    seen_field = False
    while at < len(view):
        key = view[at]
        number, wire = key >> 3, key & 7
        if number not in _FOLLOWING or (number <= 3 and wire != 2):
            break
        if number > 3:
            seen_field = True
            break
        size, at = varint(view, at + 1, strict=False, most=LENGTH_BYTES)
        if size is None or at + size > len(view):
            return None
        value = bytes(view[at:at + size])
        at += size
        if number == 3:
            if not _NAME_CHARS.match(value):
                return None
            imports.append(value.decode("ascii"))
        seen_field = True
    return tuple(imports) if seen_field else None


def read(paths: Iterable[str], reader: ElfReader) -> dict[str, DescriptorFacts]:
    """DescriptorFacts of each library that exports a descriptor table (the others cannot impose a table
    on another object); the embedded descriptors are read only for those."""
    found = {}
    for path in paths:
        try:
            exported, named = tables(reader.read(path))
        except (ElfError, InputError, OSError):
            continue
        if not exported:
            continue
        try:
            data = safeio.map_regular(path, safeio.LIBRARY_LIMIT)
        except InputError:
            continue
        try:
            imports = embedded_imports(data)
        finally:
            if hasattr(data, "close"):
                data.close()
        found[path] = DescriptorFacts(exported, named, imports)
    return found
