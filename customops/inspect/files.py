"""File facts the rules need, read before they run (customops.rules.context), so that the rules themselves
open no file (issue #16): they read these facts, and ELF files only through the run's ElfReader.

Each function reads one kind of fact and leaves out what cannot be read: a rule then has nothing to say
about that file, as it had when it read the file itself.
"""

from __future__ import annotations

import glob
import io
import os
import re
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np

from customops import safeio
from customops.elf.cache import ElfReader
from customops.elf.header import Buffer, read_header, readonly_data
from customops.elf.parse import open_mapped
from customops.elf.symtab import symtab_strings
from customops.errors import ElfError, InputError
from customops.inspect.onnxmodel import model_ops
from customops.inspect.registrations import Registration, static_registrations, torch_op_library

T = TypeVar("T")
SCHEMA_ARROW = b") -> "  # in every op schema string (customops.inspect.registrations.TORCH_SCHEMA)
TORCHSCRIPT_OP = re.compile(rb"\bops\.(\w+)\.(\w+)\(")


def modes(paths: Iterable[str]) -> dict[str, int]:
    """st_mode of each path that exists (CO601: who may replace a library or a directory searched)."""
    found = {}
    for path in paths:
        try:
            found[path] = os.stat(path).st_mode
        except OSError:
            continue
    return found


def identities(paths: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(st_dev, st_ino) of each path that exists: ld.so tells files apart by these, not by path
    (_dl_file_id_match_p, sysdeps/posix/dl-fileid.h in glibc)."""
    found = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found[path] = (st.st_dev, st.st_ino)
    return found


def digests(paths: Iterable[str]) -> dict[str, str]:
    """What each readable library's content is (CO406: one library loaded twice from two paths): equal for equal
    contents only. A file whose size no other path has cannot share its content, so only files of a shared size
    are read through (SHA-256); the rest get a token of their own (a framework library a registrant brings is not
    read whole for nothing)."""
    sizes: dict[str, int] = {}
    for path in dict.fromkeys(paths):
        try:
            sizes[path] = os.stat(path).st_size
        except (OSError, ValueError):
            continue
    shared = Counter(sizes.values())
    found = {}
    for path, size in sizes.items():
        if shared[size] < 2:
            found[path] = f"size {size}, no other: {path}"
            continue
        try:
            found[path] = safeio.sha256(path, safeio.LIBRARY_LIMIT)
        except InputError:
            continue
    return found


def registrations(paths: Iterable[str], reader: ElfReader) -> dict[str, tuple[Registration, ...]]:
    """What each library registers with its framework, read statically; nothing for a file that is not ELF."""
    found: dict[str, tuple[Registration, ...]] = {}
    for path in paths:
        try:
            info = reader.read(path)
            found[path] = (*static_registrations(info, symtab_strings(path, b"TORCH_LIBRARY")),
                           *torch_op_library(info, readonly_strings(path, SCHEMA_ARROW)))
        except ElfError:
            found[path] = ()
    return found


def readonly_strings(path: str, needle: bytes, longest: int = 4096) -> list[bytes]:
    """The NUL-terminated strings containing `needle` in the read-only data a stripped library keeps: its
    allocated, read-only, non-executable PROGBITS sections (.rodata and the like), or, without section
    headers, its read-only non-executable PT_LOAD segments. Each string at most `longest` bytes."""
    data, _identity = open_mapped(path)
    try:
        ranges = readonly_data(data, read_header(data, path), path)
    except ElfError:
        return []
    found: dict[bytes, None] = {}
    for begin, end in ranges:
        end = min(end, len(data))
        at = data.find(needle, begin, end)
        while at != -1:
            start = max(data.rfind(b"\0", max(begin, at - longest), at) + 1, begin, at - longest)
            stop = data.find(b"\0", at, min(end, at + longest))
            if stop != -1:
                found[bytes(data[start:stop])] = None
            at = data.find(needle, (stop if stop != -1 else at) + 1, end)
    return list(found)


def torchscript_ops(archive: str) -> set[tuple[str, str]]:
    """(namespace, op) of every `ops.<ns>.<op>(` call in a TorchScript archive's serialized code."""
    found: set[tuple[str, str]] = set()
    try:
        with zipfile.ZipFile(io.BytesIO(safeio.map_regular(archive, safeio.MODEL_FILE_LIMIT))) as z:
            for name in z.namelist():
                if "/code/" in f"/{name}" and name.endswith(".py"):
                    with z.open(name) as member:  # read bounded: the archive's own sizes may lie (a zip bomb)
                        code = member.read(safeio.ARCHIVE_MEMBER_LIMIT + 1)
                    if len(code) > safeio.ARCHIVE_MEMBER_LIMIT:
                        continue
                    found.update((ns.decode(), op.decode()) for ns, op in TORCHSCRIPT_OP.findall(code))
    except (OSError, InputError, zipfile.BadZipFile, RuntimeError, ValueError, EOFError, NotImplementedError):
        return set()
    return found


def onnx_ops(path: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]] | None:
    """(the domain:op pairs an ONNX model uses, those its own functions define); None when the model is
    absent or unreadable (then ONNX Runtime's own error is what the user sees)."""
    if not os.path.isfile(path):
        return None
    try:
        return model_ops(path)
    except (InputError, ValueError, BufferError):
        return None


def read_or_none(read: Callable[[str], T], path: str) -> T | None:
    """read(path) (a model reader: customops.inspect.onnxmodel, .tfmodel), or None where the file is absent,
    unreadable or damaged."""
    try:
        return read(path)
    except (InputError, ValueError, BufferError):
        return None


def listing(directory: str | None) -> tuple[str, ...]:
    """The names in a directory, sorted; none where it is None or cannot be listed."""
    if not directory:
        return ()
    try:
        return tuple(sorted(os.listdir(directory)))
    except OSError:
        return ()


def libraries_in(directory: str) -> list[str]:
    """The shared libraries (lib*.so*) of a directory, sorted."""
    return sorted(glob.glob(os.path.join(directory, "lib*.so*")))


def mentioned(paths: list[str], needle: bytes) -> bool:
    """Whether any of the files contains `needle` (a name a framework library builds in)."""
    return bool(mentions(paths, [needle]))


def mentions(paths: list[str], needles: Iterable[bytes]) -> frozenset[bytes]:
    """The needles that occur in any of the files, each file mapped once."""
    left = set(needles)
    found: set[bytes] = set()
    for path in paths:
        if not left:
            break
        try:
            data = safeio.map_regular(path, safeio.LIBRARY_LIMIT)
        except (InputError, ValueError):
            continue
        hits = {n for n in left if data.find(n) != -1}
        found |= hits
        left -= hits
    return frozenset(found)


def names_in_readonly_data(paths: Iterable[str], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """For each file, which of `names` occur in its read-only data as NUL-terminated strings, whole or as the tail
    of a longer one (a linker may keep a string inside a longer one that ends with it): where the string literal
    of a name registered in code lies (REGISTER_OP("Name")). A name found nowhere is in none of those files. Whole
    strings are matched all at once (whole_strings), only the rest searched for as tails."""
    wanted = {name.encode() for name in names if name}
    found: dict[str, frozenset[str]] = {}
    for path in paths:
        try:
            data, _identity = open_mapped(path)
            ranges = [(begin, min(end, len(data))) for begin, end in readonly_data(data, read_header(data, path), path)]
        except (InputError, ElfError, ValueError, OSError):
            continue
        hits = set().union(*(whole_strings(data, begin, end, wanted) for begin, end in ranges if end > begin))
        hits |= {name for name in wanted - hits
                 if any(data.find(name + b"\0", begin, end) != -1 for begin, end in ranges)}
        found[path] = frozenset(name.decode() for name in hits)
    return found


def whole_strings(data: Buffer, begin: int, end: int, wanted: set[bytes]) -> set[bytes]:
    """Those of `wanted` that are whole NUL-terminated strings of data[begin:end]: every string is keyed by its
    length and first eight bytes in one vectorised pass, and only those whose key a wanted name has are compared."""
    view = np.frombuffer(data, dtype=np.uint8, count=end - begin, offset=begin)
    ends = np.flatnonzero(view == 0)
    if not len(ends) or not wanted:
        return set()
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    keep = np.isin(lengths, [len(name) for name in wanted])
    starts, lengths = starts[keep], lengths[keep]
    keys = _keys(view[np.minimum(starts[:, None] + np.arange(8), len(view) - 1)], lengths)
    names = np.array([bytes(name[:8]).ljust(8, b"\0") for name in wanted], dtype="S8").view(np.uint8).reshape(-1, 8)
    chosen = np.isin(keys, _keys(names, np.array([len(name) for name in wanted])))
    return {text for at, size in zip(starts[chosen].tolist(), lengths[chosen].tolist(), strict=True)
            if (text := bytes(view[at:at + size])) in wanted}


def _keys(heads: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A string's key: its first eight bytes (those past its end zeroed) as a number, mixed with its length."""
    heads = np.ascontiguousarray(heads * (np.arange(8) < lengths[:, None]), dtype=np.uint8)
    return heads.view(np.uint64).ravel() ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
