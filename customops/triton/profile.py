"""Container profiles: the facts of a Triton container plus a compact skeleton of its libraries, so that
CI without the image checks loading against the exact container.

For every ELF file under the container's library directories (the system directories, everything below
/opt/tritonserver, the directories its ld.so.cache points into) the profile keeps only the byte ranges the
dynamic linker reads: headers, PT_DYNAMIC, the dynamic symbol and string tables, the hash and version
tables (elf.ranges.loader_ranges), zlib-compressed; relocations are left out, since the container's own
libraries are not on trial. It also keeps symlinks, the backend directory layout, TRITON_VERSION and the
binary ld.so.cache. `materialize` rebuilds a sparse skeleton root from it (cached by content), on which
`customops check` runs exactly as on the container itself.

A profile is untrusted input: a committed `customops-profile.json` is used by a plain `customops check`, so a
pull request can edit it. `read` checks every key, type and value against the schema (paths absolute and
normalised, nothing nested under a file or a symlink, sizes and offsets bounded, data decompressed within
limits) and refuses anything else with the JSON pointer of the problem; `materialize` writes only inside the
skeleton directory, never through a symlink, and never with setuid, setgid, sticky or group/other write bits.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import posixpath
import re
import stat
import tempfile
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from customops import chroot, outputs, safeio, schemas
from customops.elf.ranges import loader_ranges
from customops.errors import ElfError, InputError, printable

PROFILE_SCHEMA = schemas.PROFILE
EXTRA_DIRS = ("/opt/tritonserver", "/lib64")
SMALL_FILES = ("model.py", "TRITON_VERSION")


def _encode(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def create(container, server_args: tuple[str, ...] = ()) -> dict:  # type: ignore[no-untyped-def]
    """The profile of a container read from its root (customops.triton.container.from_root)."""
    target = container.target
    root = target.root.rstrip("/") if not target.is_live else ""
    dirs = set(target.system_dirs) | set(EXTRA_DIRS) | set(target.conf_dirs)
    if target.cache is not None:
        dirs |= {os.path.dirname(e.path) for e in target.cache.entries}
    files: dict[str, dict] = {}
    links: dict[str, str] = {}
    directories: set[str] = set()
    for top in sorted({posixpath.normpath("/" + d.lstrip("/")) for d in dirs}):  # `..` stops at the root
        real = _real_directory(target.root, top, links)
        if real is None:
            continue
        for container_dir in _walk(root, real, recursive=top.startswith("/opt/tritonserver")):
            directories.add(container_dir)
            try:
                entries = sorted(os.scandir(root + container_dir), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                path = posixpath.join(container_dir, entry.name)
                if entry.is_symlink():
                    links[path] = os.readlink(entry.path)
                elif entry.is_file(follow_symlinks=False) and path not in files:
                    file_entry = _file_entry(entry.path, entry.name)
                    if file_entry is not None:
                        files[path] = file_entry
    cache = None
    cache_path = target.host_path("/etc/ld.so.cache")  # resolved inside the root, as the container's ld.so
    if cache_path is not None and safeio.is_regular(cache_path):
        cache = _encode(safeio.read_bytes(cache_path, safeio.LD_CACHE_LIMIT))
    return {
        "schema": PROFILE_SCHEMA,
        "facts": asdict(container.facts),
        "backend_dir": container.backend_dir,
        "server": container.server,
        "server_args": list(server_args),
        "target": {"system_dirs": list(target.system_dirs), "lib_token": target.lib_token,
                   "platform": target.platform},
        "directories": sorted(directories),
        "links": dict(sorted(links.items())),
        "files": dict(sorted(files.items())),
        "ld_so_cache": cache,
    }


def _real_directory(root: str, top: str, links: dict[str, str]) -> str | None:
    """The container path `top` names, resolved inside the root (chroot.resolve): a directory reached
    through a symlink (`/lib -> usr/lib`, or one pointing out of the root) is read where the container sees
    it, never on this machine, and every symlink on the way is recorded as a link. None: not a directory."""
    found = chroot.resolve(root, (), top)
    if found is None or not os.path.isdir(found[1]):
        return None
    prefix = ""
    for part in (p for p in top.split("/") if p):
        prefix += "/" + part
        resolved = chroot.resolve(root, (), posixpath.dirname(prefix))
        if resolved is None:
            return None
        host = chroot.host_of_real(root, (), posixpath.join(resolved[0], part))
        if host is not None and os.path.islink(host):
            links.setdefault(posixpath.join(resolved[0], part), os.readlink(host))
    return found[0]


def _walk(root: str, top: str, recursive: bool) -> list[str]:
    """`top` and, if recursive, every directory below it (container paths, symlinks not followed), without
    recursion: a hostile root may nest directories deeper than Python's stack."""
    found, stack = [], [top]
    while stack:
        current = stack.pop()
        found.append(current)
        if not recursive:
            continue
        try:
            subdirs = [e.name for e in os.scandir(root + current) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        stack += [posixpath.join(current, name) for name in sorted(subdirs, reverse=True)]
    return found


def _file_entry(host: str, name: str) -> dict | None:
    """A library's loader ranges, or a small file whole; None for anything else (or what cannot be read)."""
    try:
        fd = safeio.open_regular(host, follow=False)
    except InputError:
        return None
    try:
        st = os.fstat(fd)
        magic = os.pread(fd, 4, 0)
        mode = stat.S_IMODE(st.st_mode)
        if magic == b"\x7fELF":
            try:
                ranges = loader_ranges(host)
                image = {offset: bytearray(_read_at(fd, offset, length)) for offset, length in ranges}
                image.update(_relocation_summary(host, image))
            except ElfError:
                return None
            return {"size": st.st_size, "mode": mode,
                    "chunks": [[offset, _encode(bytes(data))] for offset, data in sorted(image.items())]}
        if name in SMALL_FILES and st.st_size <= SMALL_FILE_LIMIT:
            return {"size": st.st_size, "mode": mode, "content": _encode(_read_at(fd, 0, st.st_size))}
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_at(fd: int, offset: int, length: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset, length = offset + len(chunk), length - len(chunk)
    return b"".join(chunks)


def _relocation_summary(host: str, image: dict[int, bytearray]) -> dict[int, bytearray]:
    """One synthetic relocation per symbol the library relocates (its class and first position kept),
    written where the original tables were, with DT_RELASZ/DT_PLTRELSZ patched to match: the linker model
    sees the same references, at a fraction of the size. 64-bit little-endian RELA only; other files keep
    no relocations (their references are then not modelled)."""
    import struct

    import numpy as np

    from customops.elf.cache import ElfReader
    from customops.elf.constants import (
        COPY_BY_MACHINE,
        DT_JMPREL,
        DT_PLTRELSZ,
        DT_RELA,
        DT_RELASZ,
        JUMP_SLOT_BY_MACHINE,
        PT_DYNAMIC,
        PT_LOAD,
        RELOC_COPY,
        RELOC_LAZY,
        RELOC_NOW,
    )
    from customops.elf.header import program_headers, read_header
    from customops.elf.parse import open_mapped

    info = ElfReader(use_cache=False).read(host)
    if info.elf_class != 64 or info.byte_order != "little":
        return {}
    mapped, _identity = open_mapped(host)
    segments = program_headers(mapped, read_header(mapped, host), host)
    loads = [(s.vaddr, s.offset, s.filesz) for s in segments if s.type == PT_LOAD]
    dynamic = next(((s.offset, s.filesz) for s in segments if s.type == PT_DYNAMIC), None)
    chunk = next((k for k, data in image.items() if dynamic and k <= dynamic[0] < k + len(data)), None)
    if dynamic is None or chunk is None:
        return {}
    dyn_off, dyn_size = dynamic
    start = dyn_off - chunk
    dyn = bytearray(image[chunk][start:start + dyn_size])
    tags = {struct.unpack_from("<q", dyn, i)[0]: i for i in range(0, len(dyn) - 15, 16)}

    def offset_of(vaddr: int) -> int | None:
        return next((vaddr - v + o for v, o, size in loads if v <= vaddr < v + size), None)

    symbols = info.symbols
    order = np.argsort(symbols.reloc_first, kind="stable")
    classes = symbols.reloc_class[order]
    out: dict[int, bytearray] = {}
    plan = ((DT_RELA, DT_RELASZ, (RELOC_NOW, RELOC_COPY)), (DT_JMPREL, DT_PLTRELSZ, (RELOC_LAZY,)))
    for table, size_tag, wanted in plan:
        if table not in tags:
            continue
        where = offset_of(struct.unpack_from("<Q", dyn, tags[table] + 8)[0])
        if where is None:
            continue
        entries = bytearray()
        for index, cls in zip(order[np.isin(classes, wanted)].tolist(), classes[np.isin(classes, wanted)].tolist(),
                              strict=True):
            if cls == RELOC_LAZY:
                kind = JUMP_SLOT_BY_MACHINE.get(info.machine_code, 0)
            elif cls == RELOC_COPY:
                kind = COPY_BY_MACHINE.get(info.machine_code, 0)
            else:
                kind = 0xFF  # any type but JUMP_SLOT and COPY reads as "needed at load"
            entries += struct.pack("<QQq", 0, (index << 32) | kind, 0)
        if entries:
            out[where] = entries
        if size_tag in tags:
            struct.pack_into("<Q", dyn, tags[size_tag] + 8, len(entries))
    merged = bytearray(image[chunk])
    merged[start:start + dyn_size] = dyn
    out[chunk] = merged
    return out


def write(profile: dict, path: str) -> None:
    outputs.write_file(path, lambda f: f.write(json.dumps(profile, separators=(",", ":")) + "\n"))


# -- reading: a profile is untrusted input (a pull request can edit a committed one) -----------------
def read(path: str) -> dict:
    """The profile at `path`, checked against its schema in full: anything else is an InputError naming the
    file and the JSON pointer of the first problem (exit 2)."""
    data = safeio.read_bytes(path, safeio.PROFILE_LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not a customops profile (not UTF-8 text, byte {exc.start})") from None
    try:
        profile = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(path, "not a customops profile (JSON nested too deeply)") from None
    except ValueError as exc:
        raise InputError(path, f"not a customops profile (invalid JSON: {_one_line(str(exc))})") from None
    if not isinstance(profile, dict) or profile.get("schema") != PROFILE_SCHEMA:
        raise InputError(path, f"not a customops profile (expected schema {PROFILE_SCHEMA})")
    _Validator(path).profile(profile)
    return profile


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """json.loads keeps the last of two equal keys; a profile that says two things about one path is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _one_line(text: str) -> str:
    return text.replace("\n", " ")[:300]


MAX_FILE_SIZE = 64 << 30  # the largest libraries of a Triton image are ~2 GB; a sparse skeleton file this big
MAX_DEPTH = 128  # path components (real containers: < 20)
MAX_TEXT = 4096
CHUNK_LIMIT = 256 * safeio.MiB  # one chunk decompressed (the largest real ones: string tables of ~80 MB)
SMALL_FILE_LIMIT = 1 * safeio.MiB  # a file kept whole (TRITON_VERSION, model.py)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
TOP_KEYS = {"schema", "facts", "backend_dir", "server", "server_args", "target", "directories", "links", "files",
            "ld_so_cache"}
REQUIRED_KEYS = {"schema", "facts"}
VERSION_FACTS = ("triton_version", "tensorrt", "onnxruntime", "tensorflow", "pytorch", "cuda", "glibc", "glibcxx",
                 "cxxabi")
LIST_FACTS = ("backends", "absent_backends", "missing")
REPOSITORY_FLAGS = ("--model-repository=", "--model-store=")
DIRECTORY = "a directory"


class _Validator:
    """Every key, type and value of a profile, in the order materialisation would meet them."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, pointer: str, reason: str) -> NoReturn:
        raise InputError(self.where, f"damaged customops profile: {printable(pointer or '/')}: {reason}")

    def profile(self, p: dict) -> None:
        for key in p:
            if key not in TOP_KEYS:
                self.fail(_at("", key), "unknown key")
        for key in REQUIRED_KEYS - p.keys():
            self.fail(_at("", key), "missing")
        self.facts(p["facts"])
        if "backend_dir" in p:
            self.path("/backend_dir", p["backend_dir"])
        if p.get("server") is not None:
            self.path("/server", p["server"])
        for i, arg in enumerate(self.array("/server_args", p.get("server_args", []))):
            self.text(f"/server_args/{i}", arg)
            if arg.startswith(REPOSITORY_FLAGS):
                self.path(f"/server_args/{i}", arg.split("=", 1)[1])
        if "target" in p:
            self.target(p["target"])
        nodes: dict[str, tuple[str, str]] = {}  # path -> (what it is, where the profile says so)
        for i, directory in enumerate(self.array("/directories", p.get("directories", []))):
            self.node(f"/directories/{i}", directory, DIRECTORY, nodes, root_ok=True)
        for path, target in self.object("/links", p.get("links", {})).items():
            self.node(_at("/links", path), path, "a link", nodes)
            self.link_target(_at("/links", path), target)
        for path, entry in self.object("/files", p.get("files", {})).items():
            self.node(_at("/files", path), path, "a file", nodes)
            self.file(_at("/files", path), entry)
        if p.get("ld_so_cache") is not None:
            self.base64("/ld_so_cache", p["ld_so_cache"])
            self.node("/ld_so_cache", "/etc/ld.so.cache", "the ld.so.cache", nodes)
        for path, (_, pointer) in nodes.items():  # nothing may be created under a file or a link
            parent = os.path.dirname(path)
            while parent != "/":
                kind = nodes.get(parent, (DIRECTORY, ""))[0]
                if kind != DIRECTORY:
                    self.fail(pointer, f"lies under {parent}, which the profile makes {kind}")
                parent = os.path.dirname(parent)

    def facts(self, facts: object) -> None:
        for key, value in self.object("/facts", facts).items():
            pointer = _at("/facts", key)
            if key in VERSION_FACTS:
                if value is not None:
                    self.text(pointer, value, 256)
            elif key in LIST_FACTS:
                for i, item in enumerate(self.array(pointer, value)):
                    self.text(f"{pointer}/{i}", item)
                    if key != "missing" and ("/" in item or item in ("", ".", "..")):
                        self.fail(f"{pointer}/{i}", "not a backend name")
            elif key == "source":
                self.text(pointer, value, 16)
            else:
                self.fail(pointer, "unknown key")

    def target(self, target: object) -> None:
        fields = self.object("/target", target)
        if fields.keys() != {"system_dirs", "lib_token", "platform"}:
            self.fail("/target", "expected exactly the keys system_dirs, lib_token, platform")
        for i, directory in enumerate(self.array("/target/system_dirs", fields["system_dirs"])):
            self.path(f"/target/system_dirs/{i}", directory)
        self.text("/target/lib_token", fields["lib_token"], 256)
        self.text("/target/platform", fields["platform"], 256)

    def file(self, pointer: str, entry: object) -> None:
        fields = self.object(pointer, entry)
        if fields.keys() not in ({"size", "mode", "chunks"}, {"size", "mode", "content"}):
            self.fail(pointer, "expected the keys size, mode and one of chunks, content")
        size = self.integer(f"{pointer}/size", fields["size"], MAX_FILE_SIZE)
        self.integer(f"{pointer}/mode", fields["mode"], 0o7777)
        if "content" in fields:
            self.base64(f"{pointer}/content", fields["content"])
            if size > SMALL_FILE_LIMIT:
                self.fail(f"{pointer}/size", f"over {SMALL_FILE_LIMIT} bytes for a file kept whole")
            return
        previous = -1
        for i, chunk in enumerate(self.array(f"{pointer}/chunks", fields["chunks"])):
            here = f"{pointer}/chunks/{i}"
            if type(chunk) is not list or len(chunk) != 2:
                self.fail(here, "expected [offset, data]")
            offset = self.integer(f"{here}/0", chunk[0], size)
            if offset <= previous:
                self.fail(f"{here}/0", "chunks must be in increasing order of offset")
            previous = offset
            self.base64(f"{here}/1", chunk[1])

    def node(self, pointer: str, path: object, kind: str, nodes: dict[str, tuple[str, str]],
             root_ok: bool = False) -> None:
        self.path(pointer, path)
        assert isinstance(path, str)
        if path == "/" and not root_ok:
            self.fail(pointer, f"the root directory cannot be {kind}")
        if path in nodes:
            self.fail(pointer, f"{path} is listed twice (as {nodes[path][0]} and as {kind})")
        nodes[path] = (kind, pointer)

    def path(self, pointer: str, path: object) -> str:
        """Absolute, normalised, printable, encodable, within the kernel's limits."""
        self.text(pointer, path)
        assert isinstance(path, str)
        if not path.startswith("/") or path.startswith("//") or posixpath.normpath(path) != path:
            self.fail(pointer, "not an absolute, normalised path (no '..', '.', '//' or trailing '/')")
        try:
            parts = path.encode("utf-8", "surrogateescape").split(b"/")
        except UnicodeEncodeError:
            self.fail(pointer, "not encodable as a file name")
        if len(parts) > MAX_DEPTH or any(len(part) > 255 for part in parts):
            self.fail(pointer, f"more than {MAX_DEPTH} components, or one longer than 255 bytes")
        return path

    def link_target(self, pointer: str, target: object) -> None:
        self.text(pointer, target)
        assert isinstance(target, str)
        if not target:
            self.fail(pointer, "an empty symlink target")
        try:
            target.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            self.fail(pointer, "not encodable as a file name")

    def text(self, pointer: str, value: object, limit: int = MAX_TEXT) -> str:
        if type(value) is not str:
            self.fail(pointer, f"expected a string, not {_kind(value)}")
        if len(value) > limit:
            self.fail(pointer, f"longer than {limit} characters")
        if _CONTROL.search(value):
            self.fail(pointer, "contains a control character")
        return value

    def base64(self, pointer: str, value: object) -> None:
        if type(value) is not str or not _BASE64.fullmatch(value) or len(value) % 4:
            self.fail(pointer, "expected base64 text")

    def integer(self, pointer: str, value: object, limit: int) -> int:
        if type(value) is not int:
            self.fail(pointer, f"expected an integer, not {_kind(value)}")
        if not 0 <= value <= limit:
            self.fail(pointer, f"{value} is outside 0..{limit}")
        return value

    def array(self, pointer: str, value: object) -> list:
        if type(value) is not list:
            self.fail(pointer, f"expected an array, not {_kind(value)}")
        return value

    def object(self, pointer: str, value: object) -> dict:
        if type(value) is not dict:
            self.fail(pointer, f"expected an object, not {_kind(value)}")
        return value


def _at(pointer: str, key: str) -> str:
    """A JSON pointer one key further (RFC 6901 escapes)."""
    return f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# -- materialisation: a skeleton root, confined to its directory ----------------------------------
SKELETON_FORMAT = "skeleton-2"  # bump whenever what materialize writes changes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def skeleton_key(profile: dict) -> str:
    """Everything a skeleton is made of (directories, links, files, the ld.so.cache) and how it is made."""
    parts = {k: profile.get(k) for k in ("directories", "links", "files", "ld_so_cache")}
    blob = json.dumps([SKELETON_FORMAT, parts], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def materialize(profile: dict, cache_dir: Path | None, where: str = "profile") -> str | None:
    """The root of the profile's skeleton (sparse files holding only what ld.so reads); None when the profile
    has no files. Built in a private staging directory that is renamed into place when complete, so a
    skeleton in the cache is whole; reused only when the cache and the skeleton pass the cache's trust
    checks. Without a usable cache (cache_dir None: --no-cache, or an untrusted one) it is built in a
    temporary directory that is removed when customops exits. `profile` must have passed `read`."""
    from customops import cachedir, cleanup

    if not profile.get("files"):
        return None
    key = skeleton_key(profile)
    root = cachedir.trusted_root(cache_dir) if cache_dir is not None else None
    parent = None
    if root is not None:
        if _trusted_skeleton(root, key):
            return str(root / "profiles" / key)
        parent = cachedir.open_dir(root, ("profiles",), create=True)
    try:
        staging = tempfile.mkdtemp(prefix="customops-skeleton-" if parent is None else ".staging-",
                                   dir=None if parent is None or root is None else root / "profiles")
        cleanup.register(staging)
        try:
            _build(profile, staging, where)
        except BaseException:
            cleanup.remove(staging)
            raise
        if parent is None or root is None:
            return staging  # removed at exit
        try:
            os.rename(os.path.basename(staging), key, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError:  # another run finished first: theirs if it can be trusted, else ours until exit
            if not _trusted_skeleton(root, key):
                return staging
            cleanup.remove(staging)
        else:
            cleanup.unregister(staging)
        return str(root / "profiles" / key)
    finally:
        if parent is not None:
            os.close(parent)


def _trusted_skeleton(root: Path, key: str) -> bool:
    """A skeleton renamed into place by this user: complete, and (its directory being ours and not writable
    by others, in directories that are the same) unchanged since."""
    from customops import cachedir

    found = cachedir.open_dir(root, ("profiles", key))
    if found is None:
        return False
    os.close(found)
    return True


def _build(profile: dict, staging: str, where: str) -> None:
    """Directories, then files, then symlinks last. Every directory is entered through a descriptor opened
    with O_NOFOLLOW and every file created with O_EXCL|O_NOFOLLOW, so nothing is ever written through a
    symlink, even one the profile itself made; modes lose setuid, setgid, sticky and group/other write."""
    fail = _Validator(where).fail
    tree = _Tree(staging)
    try:
        for directory in sorted(profile.get("directories", []), key=_components):
            tree.directory(directory)
        budget = [safeio.PROFILE_EXPANDED_LIMIT]
        for path, entry in sorted(profile["files"].items(), key=lambda item: _components(item[0])):
            pointer = _at("/files", path)
            parent, name = tree.parent(path)
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
            try:
                if "content" in entry:
                    data = _inflate(entry["content"], SMALL_FILE_LIMIT, f"{pointer}/content", budget, fail)
                    if len(data) != entry["size"]:
                        fail(f"{pointer}/content", f"holds {len(data)} bytes, not the size {entry['size']}")
                    _write_at(fd, data, 0)
                else:
                    os.ftruncate(fd, entry["size"])
                    end = 0
                    for i, (offset, text) in enumerate(entry["chunks"]):
                        if offset < end:
                            fail(f"{pointer}/chunks/{i}", f"overlaps the previous chunk (which ends at {end})")
                        limit = min(entry["size"] - offset, CHUNK_LIMIT)
                        data = _inflate(text, limit, f"{pointer}/chunks/{i}/1", budget, fail)
                        _write_at(fd, data, offset)
                        end = offset + len(data)
                os.fchmod(fd, (entry["mode"] & 0o755) | 0o400)
            finally:
                os.close(fd)
        if profile.get("ld_so_cache") is not None:
            parent, name = tree.parent("/etc/ld.so.cache")
            data = _inflate(profile["ld_so_cache"], safeio.LD_CACHE_LIMIT, "/ld_so_cache", budget, fail)
            fd = os.open(name, _FILE_FLAGS, 0o644, dir_fd=parent)
            try:
                _write_at(fd, data, 0)
            finally:
                os.close(fd)
        for path, target in sorted(profile.get("links", {}).items(), key=lambda item: _components(item[0])):
            parent, name = tree.parent(path)
            os.symlink(target, name, dir_fd=parent)
    except OSError as exc:
        raise InputError(where, f"cannot build the profile's skeleton in {staging}: {safeio.describe(exc)}") from None
    finally:
        tree.close()


def _components(path: str) -> list[str]:
    return path.split("/")


def _inflate(text: str, limit: int, pointer: str, budget: list[int], fail) -> bytes:  # type: ignore[no-untyped-def]
    try:
        data = safeio.inflate(base64.b64decode(text, validate=True), min(limit, budget[0]), pointer)
    except binascii.Error:
        fail(pointer, "expected base64 text")
    except InputError as exc:
        fail(pointer, exc.reason + ("" if limit <= budget[0] else " (all of the profile's data together)"))
    budget[0] -= len(data)
    return data


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class _Tree:
    """Directories of the skeleton, reached from its root one component at a time, never through a symlink;
    descriptors are kept for the current path only (paths come in sorted order), so few are open at once."""

    def __init__(self, root: str) -> None:
        self.stack: list[tuple[str, int]] = [("", os.open(root, _DIR_FLAGS))]

    def directory(self, path: str) -> int:
        parts = [p for p in path.split("/") if p]
        depth = 0
        while depth + 1 < len(self.stack) and depth < len(parts) and self.stack[depth + 1][0] == parts[depth]:
            depth += 1
        for _, fd in self.stack[depth + 1:]:
            os.close(fd)
        del self.stack[depth + 1:]
        for name in parts[depth:]:
            parent = self.stack[-1][1]
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            self.stack.append((name, os.open(name, _DIR_FLAGS, dir_fd=parent)))
        return self.stack[-1][1]

    def parent(self, path: str) -> tuple[int, str]:
        """The descriptor of a path's directory (made where missing) and the path's last component."""
        return self.directory(os.path.dirname(path)), os.path.basename(path)

    def close(self) -> None:
        for _, fd in self.stack:
            os.close(fd)
        self.stack = []
