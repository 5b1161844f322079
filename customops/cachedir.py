"""customops' own cache, and the rules by which it trusts what it finds there. Importing this costs nothing
(no numpy), so warm paths can look here before loading anything heavy.

A cache may only ever cost or save time, never change an answer, so nothing in it is trusted because it is
there. As ssh treats its files, the cache directory is used only when it, and every directory above it, can
be written by no one but this user (or root; a sticky directory such as /tmp counts as safe above it), and
customops creates its directories 0700. An entry is read only if it is a regular file, not a symlink, owned
by this user, not writable by group or others, with a single link, in directories that pass the same test,
and below a size limit; it is then checked against the exact shape its writer gives it (including the key
it was stored under), and anything else is a miss that is recomputed. A cache directory that fails the test
is not used at all: the run is correct, just uncached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from customops.safeio import CACHE_ENTRY_LIMIT

RESULTS_FORMAT = "results-3"  # bump whenever a cached result's shape or meaning changes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_trusted_roots: dict[str, Path | None] = {}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def default_cache_dir() -> Path:
    if env := os.environ.get("CUSTOMOPS_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "customops"


def file_key(path: str) -> str:
    """(device, inode, size, mtime, ctime) of a file: it is unchanged while these are (a file rewritten in place
    with its mtime set back still has a new ctime, which no user can set). Raises OSError."""
    st = os.stat(path)
    return f"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ctime_ns:x}"


def tree_fingerprint(directory: str) -> str:
    """Every file and directory under `directory` with its file_key: changes when anything in the tree does.
    Walked with a stack of its own, as os.walk(followlinks=False) would (Python 3.11's recurses, and a
    repository nested 1,500 directories deep would end the run with a RecursionError)."""
    entries = []
    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as scan:
                found = [(e.name, _is_dir(e), e.is_symlink()) for e in scan]
        except OSError:
            continue
        dirs = sorted(name for name, is_dir, _ in found if is_dir)
        for name in sorted(name for name, is_dir, _ in found if not is_dir) + dirs:
            path = os.path.join(current, name)
            try:
                entries.append(f"{os.path.relpath(path, directory)}={file_key(path)}")
            except OSError:
                entries.append(f"{os.path.relpath(path, directory)}=?")
        links = {name for name, is_dir, link in found if is_dir and link}
        stack.extend(os.path.join(current, name) for name in reversed(dirs) if name not in links)
    return "\n".join(entries)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


# -- trust -----------------------------------------------------------------------------------
def trusted_root(cache_dir: Path | str | None = None) -> Path | None:
    """The cache directory (default: default_cache_dir()) resolved, created 0700 where missing, if no one
    but this user can write it or replace it; None when it cannot be used (then nothing is cached)."""
    wanted = os.path.abspath(cache_dir if cache_dir is not None else default_cache_dir())
    if wanted not in _trusted_roots:
        _trusted_roots[wanted] = _check_root(wanted)
    return _trusted_roots[wanted]


def _check_root(wanted: str) -> Path | None:
    try:
        missing, path = [], wanted
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for directory in reversed(missing):  # every directory customops creates is 0700, not just the last
            with contextlib.suppress(FileExistsError):  # a concurrent run made it: checked below like any
                os.mkdir(directory, 0o700)
        real = os.path.realpath(wanted, strict=True)
        if not trusted_directory(os.stat(real), own=True):
            return None
        parent = os.path.dirname(real)
        while True:  # nobody else may rename or replace anything on the way down
            if not trusted_directory(os.stat(parent), own=False):
                return None
            if parent == "/":
                return Path(real)
            parent = os.path.dirname(parent)
    except (OSError, ValueError):
        return None


def trusted_directory(st: os.stat_result, own: bool) -> bool:
    """A directory of ours (own) or one above it: owned by this user (or root above), and not writable by
    group or others (above it, a sticky directory such as /tmp is fine: no one can rename our entry)."""
    if not stat.S_ISDIR(st.st_mode):
        return False
    if st.st_uid != os.geteuid() and (own or st.st_uid != 0):
        return False
    return not st.st_mode & 0o022 or (not own and bool(st.st_mode & stat.S_ISVTX))


def _mine(st: os.stat_result) -> bool:
    """An entry or directory this user wrote and no one else can modify."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def open_dir(root: Path, names: Sequence[str], create: bool = False) -> int | None:
    """A descriptor of root/names..., each step opened without following a symlink and required to be ours;
    with `create`, missing directories are made 0700. None when missing or not trusted."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for name in names:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if not _mine(os.fstat(fd)):
                raise PermissionError(name)
    except (OSError, ValueError):
        os.close(fd)
        return None
    return fd


def read_entry(root: Path, names: Sequence[str], limit: int = CACHE_ENTRY_LIMIT) -> bytes | None:
    """The bytes of the entry root/names... if this user wrote it: a regular file (not a symlink, not a FIFO),
    owned by us, not writable by group or others, with one link, at most `limit` bytes; else None."""
    directory = open_dir(root, names[:-1])
    if directory is None:
        return None
    try:
        fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                     dir_fd=directory)
    except (OSError, ValueError):
        return None
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _mine(st) or st.st_nlink != 1 or st.st_size > limit:
            return None
        data = os.read(fd, st.st_size + 1)
        return data if len(data) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_entry(root: Path, names: Sequence[str], data: bytes) -> None:
    """Write atomically (a private temporary file renamed into place: readers see the old entry or the new
    one), and silently do nothing when the cache cannot be written (correct results, just slower)."""
    directory = open_dir(root, names[:-1], create=True)
    if directory is None:
        return
    temporary = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.rename(temporary, names[-1], src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
            raise
    except OSError:
        pass
    finally:
        os.close(directory)


# -- JSON results ----------------------------------------------------------------------------
def key_bytes(text: str) -> bytes:
    """A key's text as bytes, for every str: a path that is not UTF-8 holds lone surrogates (os.listdir's
    surrogateescape), which plain UTF-8 refuses; surrogatepass encodes each of them, and distinct texts stay
    distinct."""
    return text.encode("utf-8", "surrogatepass")


def _result_names(kind: str, parts: Sequence[str]) -> tuple[str, str, str]:
    digest = hashlib.sha256(key_bytes("\0".join((RESULTS_FORMAT, kind, *parts)))).hexdigest()
    return kind, digest[:2], digest


def load_result(cache_dir: Path | str | None, kind: str, parts: Sequence[str], shape: object) -> Any:
    """The value stored under (kind, parts) if the entry is trusted and has exactly `shape` (see matches);
    None otherwise. `cache_dir` None: no cache."""
    root = trusted_root(cache_dir) if cache_dir is not None else None
    if root is None:
        return None
    names = _result_names(kind, parts)
    raw = read_entry(root, names)
    if raw is None:
        return None
    try:
        entry = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    expected = {"format": RESULTS_FORMAT, "key": names[2], "value": shape}
    return entry["value"] if matches(entry, expected) else None


def store_result(cache_dir: Path | str | None, kind: str, parts: Sequence[str], value: object) -> None:
    root = trusted_root(cache_dir) if cache_dir is not None else None
    if root is None:
        return
    names = _result_names(kind, parts)
    entry = {"format": RESULTS_FORMAT, "key": names[2], "value": value}
    write_entry(root, names, json.dumps(entry, separators=(",", ":")).encode())


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# -- shapes ------------------------------------------------------------------------------------
# customops.elf.summary.CxxAbi as a dict: the "cxx-abi" fact of an ELF cache entry and part of a cached scan record.
CXX_ABI_SHAPE = {"flavour": frozenset({"cxx11", "pre-cxx11", "both", "none"}), "defined_cxx11": int,
                 "defined_old": int, "undefined_cxx11": int, "undefined_old": int}


class MapOf:
    """Shape of a JSON object with any string keys whose values all have `value`'s shape."""

    def __init__(self, value: object) -> None:
        self.value = value


class Text:
    """Shape of a string without control characters or lone surrogates (`lines`: newlines and tabs allowed),
    so that a cached string cannot put escape sequences on a terminal, forge lines, or fail to print."""

    def __init__(self, lines: bool = False) -> None:
        self.refused = _CONTROL_IN_LINES if lines else _CONTROL


def matches(value: object, shape: object) -> bool:
    """Whether decoded JSON `value` has exactly `shape`: a type (str, int, bool, float; bool is not an int),
    None or a string (that very value), a frozenset of allowed values, a tuple of alternatives, [element
    shape], {key: shape} (exactly these keys), MapOf(value shape) or Text()."""
    if shape is None or isinstance(shape, str):
        return value == shape
    if isinstance(shape, type):
        if shape is int:
            return type(value) is int
        if shape is float:
            return type(value) in (int, float)
        return type(value) is shape
    if isinstance(shape, frozenset):
        return type(value) in (str, int) and value in shape
    if isinstance(shape, tuple):
        return any(matches(value, s) for s in shape)
    if isinstance(shape, list):
        return type(value) is list and all(matches(v, shape[0]) for v in value)
    if isinstance(shape, dict):
        return type(value) is dict and value.keys() == shape.keys() and all(matches(value[k], s)
                                                                            for k, s in shape.items())
    if isinstance(shape, MapOf):
        return type(value) is dict and all(matches(v, shape.value) for v in value.values())
    if isinstance(shape, Text):
        return type(value) is str and shape.refused.search(value) is None
    raise TypeError(f"not a shape: {shape!r}")
