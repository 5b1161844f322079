"""Container profiles: the facts of a Triton container plus a compact skeleton of its libraries, so that
CI without the image checks loading against the exact container.

For every ELF file under the container's library directories (the system directories, everything below
/opt/tritonserver, the directories its ld.so.cache points into) the profile keeps only the byte ranges the
dynamic linker reads: headers, PT_DYNAMIC, the dynamic symbol and string tables, the hash and version
tables (scanners.elf.loader_ranges), zlib-compressed; relocations are left out, since the container's own
libraries are not on trial. It also keeps symlinks, the backend directory layout, TRITON_VERSION and the
binary ld.so.cache. `materialize` rebuilds a sparse skeleton root from it (cached by content), on which
`customops check` runs exactly as on the container itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import zlib
from dataclasses import asdict
from pathlib import Path

from customops import schemas
from customops.errors import ElfError, InputError
from customops.scanners.elf import loader_ranges

PROFILE_SCHEMA = schemas.PROFILE
EXTRA_DIRS = ("/opt/tritonserver", "/lib64")
SMALL_FILES = ("model.py", "TRITON_VERSION")


def _encode(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def _decode(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def create(container, server_args: tuple[str, ...] = ()) -> dict:  # type: ignore[no-untyped-def]
    """The profile of a container read from its root (customops.container.from_root)."""
    target = container.target
    root = target.root.rstrip("/") if not target.is_live else ""
    dirs = set(target.system_dirs) | set(EXTRA_DIRS) | set(target.conf_dirs)
    if target.cache is not None:
        dirs |= {os.path.dirname(e.path) for e in target.cache.entries}
    files: dict[str, dict] = {}
    links: dict[str, str] = {}
    directories: set[str] = set()
    for top in sorted(dirs):
        host_top = root + top
        if not os.path.isdir(host_top):
            continue
        recursive = top.startswith("/opt/tritonserver")
        for current, subdirs, names in os.walk(host_top, followlinks=False):
            container_dir = current[len(root):] or "/"
            directories.add(container_dir)
            if not recursive:
                subdirs[:] = []
            for name in (*names, *subdirs):
                host = os.path.join(current, name)
                path = os.path.join(container_dir, name)
                if os.path.islink(host):
                    links[path] = os.readlink(host)
                elif os.path.isfile(host) and path not in files:
                    entry = _file_entry(host, name)
                    if entry is not None:
                        files[path] = entry
    cache = None
    cache_path = root + "/etc/ld.so.cache"
    if os.path.isfile(cache_path):
        with open(cache_path, "rb") as f:
            cache = _encode(f.read())
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


def _file_entry(host: str, name: str) -> dict | None:
    try:
        st = os.stat(host)
        with open(host, "rb") as f:
            magic = f.read(4)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if magic == b"\x7fELF":
        try:
            ranges = loader_ranges(host)
            with open(host, "rb") as f:
                image = {offset: bytearray(_read_at(f, offset, length)) for offset, length in ranges}
            image.update(_relocation_summary(host, image))
        except ElfError:
            return None
        return {"size": st.st_size, "mode": mode,
                "chunks": [[offset, _encode(bytes(data))] for offset, data in sorted(image.items())]}
    if name in SMALL_FILES and st.st_size < 1 << 20:
        with open(host, "rb") as f:
            return {"size": st.st_size, "mode": mode, "content": _encode(f.read())}
    return None


def _read_at(f, offset: int, length: int) -> bytes:  # type: ignore[no-untyped-def]
    f.seek(offset)
    return f.read(length)


def _relocation_summary(host: str, image: dict[int, bytearray]) -> dict[int, bytearray]:
    """One synthetic relocation per symbol the library relocates (its class and first position kept),
    written where the original tables were, with DT_RELASZ/DT_PLTRELSZ patched to match: the linker model
    sees the same references, at a fraction of the size. 64-bit little-endian RELA only; other files keep
    no relocations (their references are then not modelled)."""
    import struct

    import numpy as np

    from customops.scanners.elf import (
        COPY_BY_MACHINE,
        DT_JMPREL,
        DT_PLTRELSZ,
        DT_RELA,
        DT_RELASZ,
        JUMP_SLOT_BY_MACHINE,
        RELOC_COPY,
        RELOC_LAZY,
        RELOC_NOW,
    )
    from customops.scanners.elfcache import ElfReader

    info = ElfReader(use_cache=False).read(host)
    if info.elf_class != 64 or info.byte_order != "little":
        return {}
    with open(host, "rb") as f:
        header = f.read(64)
        phoff, = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        f.seek(phoff)
        phdrs = [struct.unpack_from("<IIQQQQQQ", f.read(phentsize)) for _ in range(phnum)]
    loads = [(p[3], p[2], p[5]) for p in phdrs if p[0] == 1]  # vaddr, offset, filesz
    dynamic = next(((p[2], p[5]) for p in phdrs if p[0] == 2), None)
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
    with open(path, "w") as f:
        json.dump(profile, f, separators=(",", ":"))
        f.write("\n")


def read(path: str) -> dict:
    try:
        with open(path) as f:
            profile = json.load(f)
    except OSError as exc:
        raise InputError(path, exc.strerror or str(exc)) from None
    except ValueError as exc:
        raise InputError(path, f"not a customops profile (invalid JSON: {exc})") from None
    if not isinstance(profile, dict) or profile.get("schema") != PROFILE_SCHEMA:
        raise InputError(path, f"not a customops profile (expected schema {PROFILE_SCHEMA})")
    return profile


def materialize(profile: dict, cache_dir: Path) -> str | None:
    """The profile's skeleton root (sparse files holding only what ld.so reads); None without files."""
    if not profile.get("files"):
        return None
    key = hashlib.sha256(json.dumps(profile["files"], sort_keys=True).encode()).hexdigest()[:20]
    root = cache_dir / "profiles" / key
    if (root / ".complete").exists():
        return str(root)
    staging = Path(str(root) + f".tmp-{os.getpid()}")
    for directory in profile.get("directories", []):
        (staging / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, entry in profile["files"].items():
        dest = staging / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as f:
            if "content" in entry:
                f.write(_decode(entry["content"]))
            else:
                f.truncate(entry["size"])
                for offset, chunk in entry["chunks"]:
                    f.seek(offset)
                    f.write(_decode(chunk))
        os.chmod(dest, entry.get("mode", 0o644))
    for path, link in profile.get("links", {}).items():
        dest = staging / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists() and not dest.is_symlink():
            dest.symlink_to(link)
    if profile.get("ld_so_cache"):
        (staging / "etc").mkdir(exist_ok=True)
        (staging / "etc" / "ld.so.cache").write_bytes(_decode(profile["ld_so_cache"]))
    (staging / ".complete").write_text("")
    try:
        staging.rename(root)
    except OSError:  # another run finished first
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return str(root)
