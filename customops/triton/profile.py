"""Container profiles: the facts of a Triton container plus a compact skeleton of its libraries, so that
CI without the image checks loading against the exact container.

For every ELF file under the container's library directories (the system directories, everything below
/opt/tritonserver, the directories its ld.so.cache points into) the profile keeps only the byte ranges the
dynamic linker reads: headers, PT_DYNAMIC, the dynamic symbol and string tables, the hash and version
tables (elf.ranges.loader_ranges), zlib-compressed (level 1: level 6 took 2.7 of the 3.9 s a profile of the
real-framework container took, for a file 15% smaller); relocations are left out, since the container's own
libraries are not on trial. It also keeps symlinks, the backend directory layout, TRITON_VERSION and the
binary ld.so.cache. `customops.triton.skeleton.materialize` rebuilds a sparse skeleton root from it (cached
by content), on which `customops check` runs exactly as on the container itself.

A profile is untrusted input: a committed `customops-profile.json` is used by a plain `customops check`, so a
pull request can edit it. `read` checks every key, type and value against the schema (paths absolute and
normalised, nothing nested under a file or a symlink, sizes and offsets bounded, data decompressed within
limits: customops.triton.profile_schema) and refuses anything else with the JSON pointer of the problem.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import stat
import struct
import zlib

from customops import chroot, outputs, safeio, schemas
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
from customops.elf.ranges import loader_ranges
from customops.errors import CustomopsError, ElfError, InputError
from customops.frameworks import PYTHON
from customops.triton.manifest import CONTROL
from customops.triton.profile_schema import ENVIRONMENT_KEYS, SMALL_FILE_LIMIT, Validator

PROFILE_SCHEMA = schemas.PROFILE
EXTRA_DIRS = ("/opt/tritonserver", "/lib64")
SMALL_FILES = (PYTHON.model_file, "TRITON_VERSION")  # a Python-based backend's model.py


def _encode(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 1)).decode("ascii")


def create(container, server_args: tuple[str, ...] = (), image: str | None = None) -> dict:
    """The profile of a container read from its root (customops.triton.container.from_root); `image`: the
    reference of the image it was made from, as the user names it (nothing inside an image says it)."""
    target = container.target
    root = target.root.rstrip("/") if not target.is_live else ""
    environment = _loader_environment(container.environment)
    dirs = set(target.system_dirs) | set(EXTRA_DIRS) | set(target.conf_dirs)
    dirs |= _searched(environment, container.working_directory)
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
        "facts": container.facts.record(),
        "image": image,
        "backend_dir": container.backend_dir,
        "server": container.server,
        "server_args": list(server_args),
        **({"environment": environment} if environment else {}),
        **({"working_directory": container.working_directory} if container.working_directory else {}),
        "target": {"system_dirs": list(target.system_dirs), "lib_token": target.lib_token,
                   "platform": target.platform},
        "directories": sorted(directories),
        "links": dict(sorted(links.items())),
        "files": dict(sorted(files.items())),
        "ld_so_cache": cache,
    }


def _loader_environment(environment: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The loader variables of the image a profile is made from (its Env, its entrypoint's exports): a check
    against the profile searches what the server in that image searches."""
    found = {name: value for name, value in environment if name in ENVIRONMENT_KEYS}
    for name, value in found.items():
        if CONTROL.search(value):
            raise CustomopsError(f"the image's {name} contains a control character: not recorded in a profile")
    return found


def _searched(environment: dict[str, str], working_directory: str | None) -> set[str]:
    """The directories the loader variables name, as ld.so reads them (LD_LIBRARY_PATH split at `:` and `;`,
    LD_PRELOAD at `:` and spaces; a relative entry, an empty one included, from the server's working directory),
    without a $ token: recorded as the system ones are."""
    where = working_directory or "/"
    entries = re.split("[:;]", environment.get("LD_LIBRARY_PATH", "")) if "LD_LIBRARY_PATH" in environment else []
    entries += [posixpath.dirname(p) for p in re.split("[: ]", environment.get("LD_PRELOAD", "")) if p]
    return {posixpath.normpath(posixpath.join(where, e)) for e in entries if "$" not in e}


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
    import numpy as np

    from customops.elf.cache import ElfReader
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
        chosen = np.isin(classes, wanted)
        entries = _synthetic_relocations(order[chosen].tolist(), classes[chosen].tolist(), info.machine_code)
        if entries:
            out[where] = entries
        if size_tag in tags:
            struct.pack_into("<Q", dyn, tags[size_tag] + 8, len(entries))
    merged = bytearray(image[chunk])
    merged[start:start + dyn_size] = dyn
    out[chunk] = merged
    return out


def _synthetic_relocations(symbols: list[int], classes: list[int], machine: int) -> bytearray:
    """One Elf64_Rela per symbol, of a type with the class ld.so gives it: JUMP_SLOT (lazy), COPY, or any
    other (needed at load)."""
    entries = bytearray()
    for index, cls in zip(symbols, classes, strict=True):
        if cls == RELOC_LAZY:
            kind = JUMP_SLOT_BY_MACHINE.get(machine, 0)
        elif cls == RELOC_COPY:
            kind = COPY_BY_MACHINE.get(machine, 0)
        else:
            kind = 0xFF  # any type but JUMP_SLOT and COPY reads as "needed at load"
        entries += struct.pack("<QQq", 0, (index << 32) | kind, 0)
    return entries


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
    Validator(path).profile(profile)
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
