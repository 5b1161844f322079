"""Which libraries register protoc-generated descriptors through the dynamic linker, what they register, and
what the protobuf runtime among them prints when a file is registered twice; read statically.

protoc's C++ code registers each .proto file's serialized FileDescriptorProto from a static initialiser into
the generated pool of the protobuf runtime its call reaches: through `AddDescriptorsRunner`'s constructor
(protobuf 3.21 and later), `AddDescriptors` (3.12 to 3.20) or `DescriptorPool::InternalAddGeneratedFile`
(older code, and what the other two call inside the runtime). Those functions are the runtime's: the pool is
the object that defines the one the call binds to (one shared libprotobuf for two libraries is one pool; a
copy linked into each library is one pool each). A library names them in `.dynsym` when its calls go through
the dynamic linker (imported, or exported and interposable); one whose copy of the runtime is hidden names
none, registers into a pool no other object reaches, and is not read here.

The files a library registers are the .proto files of the `descriptor_table_<file>` tables its `.dynsym`
defines, or, where it defines none there (its tables are hidden), the names of the serialized
FileDescriptorProtos it embeds (customops.inspect.protobuf_descriptors).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from customops import safeio
from customops.elf.cache import ElfReader
from customops.elf.records import ElfInfo
from customops.errors import ElfError, InputError
from customops.inspect.files import readonly_strings
from customops.inspect.protobuf_descriptors import PREFIX, embedded_imports, proto_file

# The registration's functions, mangled name prefixes, in the order one calls the next.
STAGES = (b"_ZN6google8protobuf8internal20AddDescriptorsRunnerC",
          b"_ZN6google8protobuf8internal14AddDescriptorsE",
          b"_ZN6google8protobuf14DescriptorPool24InternalAddGeneratedFileE")
CHECKED = b"GeneratedDatabase()->Add("  # the condition InternalAddGeneratedFile checks, as its CHECK prints it
_LONGEST_CHECK = 200
_CLASSIC = b"CHECK failed: "  # GOOGLE_CHECK (protobuf before 22) keeps the whole line as one literal
_ABSL = "Check failed: "  # ABSL_CHECK (protobuf 22 and later) keeps the condition, and prints this before it


@dataclass(frozen=True)
class Registrar:
    """One library that names protobuf's registration functions in `.dynsym`: `calls` are those names
    (stage, symbol) in call order; `files` the .proto files it registers, sorted; `tables` those whose table
    its `.dynsym` defines (another object's table may stand in for it); `check` the line the runtime prints
    when a registration fails, where the library holds that runtime's text."""

    calls: tuple[tuple[int, bytes], ...]
    files: tuple[str, ...]
    tables: frozenset[str]
    check: str | None = None


def registration_calls(info: ElfInfo) -> tuple[tuple[tuple[int, bytes], ...], bool]:
    """The registration functions `.dynsym` names (defined or not), as (stage, symbol) in call order, and
    whether it defines the last (the runtime itself: its generated pool and the CHECK on adding to it)."""
    symbols = info.symbols
    found: set[tuple[int, bytes]] = set()
    runtime = False
    for stage, prefix in enumerate(STAGES):
        indices = symbols.names_starting(prefix)
        for i, name in zip(indices.tolist(), symbols.names(indices), strict=True):
            found.add((stage, bytes(name)))
            runtime = runtime or (stage == len(STAGES) - 1 and bool(symbols.defined_mask[i]))
    return tuple(sorted(found)), runtime


def exported_tables(info: ElfInfo) -> frozenset[str]:
    """The .proto files whose `descriptor_table_<file>` `.dynsym` defines for other objects."""
    symbols = info.symbols
    indices = symbols.names_starting(PREFIX)
    exported = symbols.exported_mask
    return frozenset(proto for i, name in zip(indices.tolist(), symbols.names(indices), strict=True)
                     if exported[i] and (proto := proto_file(bytes(name))) is not None)


def check_line(strings: Iterable[bytes]) -> str | None:
    """The line protobuf prints when InternalAddGeneratedFile's CHECK fails, from the runtime's strings
    holding its condition: GOOGLE_CHECK's whole literal, or ABSL_CHECK's condition after its prefix."""
    for text in strings:
        if not all(0x20 <= c < 0x7F for c in text):
            continue
        if text.startswith(_CLASSIC + CHECKED):
            return text.decode("ascii")
        if text.startswith(CHECKED):
            return _ABSL + text.decode("ascii")
    return None


def read(paths: Iterable[str], reader: ElfReader) -> dict[str, Registrar]:
    """A Registrar for each library that names a registration function in `.dynsym`; unreadable ones are
    left out (the linker model reports them)."""
    found = {}
    for path in paths:
        try:
            info = reader.read(path)
            calls, runtime = registration_calls(info)
            if not calls:
                continue
            exported = exported_tables(info)
            check = check_line(readonly_strings(path, CHECKED, _LONGEST_CHECK)) if runtime else None
        except (ElfError, InputError, OSError):
            continue
        files = set(exported) or _embedded(path)
        found[path] = Registrar(calls, tuple(sorted(files)), frozenset(exported), check)
    return found


def _embedded(path: str) -> set[str]:
    """The names of the serialized FileDescriptorProtos a library embeds."""
    try:
        data = safeio.map_regular(path, safeio.LIBRARY_LIMIT)
    except InputError:
        return set()
    try:
        return set(embedded_imports(data))
    finally:
        if hasattr(data, "close"):
            data.close()
