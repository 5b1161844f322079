"""A Python backend execution environment's archive (EXECUTION_ENV_PATH), unpacked as the backend unpacks it, into
customops' cache: read once as a stream, bounded like an image's layer (customops.image.layers), applied as a
one-layer root (customops.image.root), so nothing is written outside the cache and nothing through a link.

The backend (pb_env.cc) reads gzip'd or plain tar only, and extracts every member where its name says: before
26.06 a member named with `..` or from `/` is written outside the extraction directory, from 26.06 on it is
refused and the model fails to load. Here such a member is never written; its name is returned, for the finding."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from customops import safeio
from customops.errors import InputError
from customops.image.layers import GZIP, keep_layer
from customops.image.root import COMPLETE, build, merge

TAR_MAGIC_AT, TAR_MAGIC = 257, b"ustar"
ESCAPING = "escaping.json"  # the member names that climb out of the extraction directory, or start at /
MAX_SHOWN = 20  # escaping names kept for the finding
ALL = ("",)  # every member's content is kept: the check reads the environment's libraries, sources and scripts
ENVIRONMENT_LIMIT = 32 << 30  # uncompressed bytes of one environment (conda-pack'ed CUDA frameworks: a few GB)
STREAMED = "layer (streamed): "  # how keep_layer names what it reads
WRITE_ERRORS = (errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # the cache's fault, not the archive's


def readable(head: bytes) -> bool:
    """Whether the backend's libarchive (its gzip filter and tar format only) opens a file starting so: gzip
    (the tar inside is read as it passes), or a plain tar (`ustar` at 257)."""
    return head.startswith(GZIP) or head[TAR_MAGIC_AT:TAR_MAGIC_AT + len(TAR_MAGIC)] == TAR_MAGIC


@dataclass(frozen=True)
class Unpacked:
    root: Path  # the environment's files, as the backend's extraction directory holds them
    escaping: tuple[str, ...]  # member names the backend writes outside it (before 26.06) or refuses (from 26.06)


def head_of(path: str) -> bytes:
    """The first bytes of the archive, enough to tell its format."""
    fd = safeio.open_regular(path)
    try:
        return os.read(fd, TAR_MAGIC_AT + len(TAR_MAGIC))
    finally:
        os.close(fd)


def unpacked(path: str, cache: Path) -> Unpacked:
    """The archive at `path` (a file of this machine, gzip'd or plain tar) unpacked under `cache`, keyed by its
    content's digest; unpacked again where an earlier entry is incomplete or not as this writes it. InputError
    naming the archive when it cannot be read to its end or exceeds the bounds of a layer."""
    digest = safeio.sha256(path, safeio.LIBRARY_LIMIT)
    done = cache / "environments" / digest.removeprefix("sha256:")
    escaping = _escaping_of(done)
    if escaping is not None:
        return Unpacked(done / "root", escaping)
    (cache / "environments").mkdir(parents=True, exist_ok=True, mode=0o700)
    names: list[str] = []

    def seen(member: tarfile.TarInfo) -> None:
        if (member.name.startswith("/") or ".." in member.name.split("/")) and len(names) < MAX_SHOWN:
            names.append(member.name)

    staging = cache / "environments" / f".{done.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(mode=0o700)
        try:
            with open(safeio.open_regular(path), "rb", closefd=True) as raw:
                layer = keep_layer(raw, staging, None, path, ALL, seen, ENVIRONMENT_LIMIT)
        except InputError as exc:
            cause = exc.__context__  # keep_layer's: what failed, the archive or writing its files
            if isinstance(cause, OSError) and cause.errno in WRITE_ERRORS:
                raise InputError(path, f"cannot be unpacked into {cache}: {os.strerror(cause.errno or 0)}") from None
            raise InputError(path, f"cannot be read as an archive: {exc.reason.removeprefix(STREAMED)}") from None
        (staging / "root").mkdir(mode=0o755)
        build(staging / "root", merge([layer]))
        shutil.rmtree(layer, ignore_errors=True)  # its contents are linked into the root
        (staging / ESCAPING).write_text(json.dumps(names))
        (staging / COMPLETE).write_text(path + "\n")
        shutil.rmtree(done, ignore_errors=True)  # an entry not as this writes it (incomplete, tampered with)
        with contextlib.suppress(OSError):  # another check unpacked it first
            staging.rename(done)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Unpacked(done / "root", tuple(names))


def _escaping_of(done: Path) -> tuple[str, ...] | None:
    """What an earlier unpacking recorded, or None where there is none to trust (incomplete, or not a list of
    names: a cache entry is read as untrusted input)."""
    if not (done / COMPLETE).is_file() or not (done / "root").is_dir():
        return None
    try:
        names = json.loads(safeio.read_text(str(done / ESCAPING), safeio.SMALL_TEXT_LIMIT))
    except (OSError, ValueError, UnicodeError):
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(names) > MAX_SHOWN:
        return None
    return tuple(names)
