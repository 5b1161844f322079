"""One layer, read once as a stream: every member's metadata into the layer's index, the content of the files the
check reads (ELF objects, /etc, the small files of /opt/tritonserver, scripts) into the layer's directory in the
cache, keyed by the layer's digest (a second image on the same base reads none of the base's layers again).

The blob's digest and the uncompressed tar's diff_id are computed as it streams and checked at its end: a layer
that lies about either, or ends early, is refused and nothing of it is kept. Member names are normalised inside
the image: an absolute name or one with `..` that would climb above the image's root, a name that is not valid
text, a device node or a FIFO are recorded as what they are and never written; contents are written 0644 or 0755
(no setuid, no owner), never through a link."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import json
import lzma
import os
import posixpath
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, cast

import zstandard

from customops.errors import InputError
from customops.image.layout import Layer

ELF_MAGIC = b"\x7fELF"
SMALL = 1 << 20  # a non-ELF file the check may read (a version file, ld.so.conf, a script) is at most this large
FILE_LIMIT = 8 << 30  # bytes of one member kept (a framework library is at most a few GB)
LAYER_LIMIT = 256 << 30  # uncompressed bytes of one layer (a decompression bomb ends here)
KEPT_LIMIT = 32 << 30  # bytes of contents kept from one layer
MAX_MEMBERS = 1_000_000  # members of one layer (a real one has a few hundred thousand at most)
CHUNK = 1 << 20
# what a blob that is not the compressed tar it claims to be raises as it is read
UNREADABLE = (OSError, EOFError, tarfile.TarError, ValueError, UnicodeError, lzma.LZMAError, zstandard.ZstdError)
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
INDEX = "index.json"
FILES = "files"


@dataclass(frozen=True)
class Entry:
    """One member of a layer, as the image has it."""

    path: str  # normalised, relative to the image's root ("usr/lib/libc.so.6")
    kind: str  # "file", "dir", "symlink", "hardlink", "whiteout", "opaque", "other"
    mode: int = 0o644
    size: int = 0
    link: str = ""  # symlink: its target as written; hardlink: the normalised path it names
    kept: bool = False  # the content is in the layer's directory


def normalised(name: str) -> str | None:
    """A member name inside the image's root (leading `/` and `./` dropped, `..` resolved lexically); None when
    it climbs above the root or is empty."""
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(part)
    return "/".join(parts) or None


def wanted(path: str, head: bytes, size: int, keep: tuple[str, ...] = ()) -> bool:
    """Whether the check may read this file: an ELF object, a small file of /etc or /opt/tritonserver, a small
    script (an entrypoint), or any file under `keep` (the model repositories the image's command line names)."""
    if head.startswith(ELF_MAGIC) or any(path.startswith(prefix) for prefix in keep):
        return True
    if size > SMALL:
        return False
    return path.startswith(("etc/", "opt/tritonserver/", "usr/lib/os-release")) or head.startswith(b"#!")


class _Hashing:
    """A stream that hashes what is read through it."""

    def __init__(self, stream: IO[bytes], limit: int | None = None) -> None:
        self.stream, self.digest, self.count, self.limit = stream, hashlib.sha256(), 0, limit

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            raise ValueError(f"more than {self.limit >> 20} MB uncompressed")
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass

    def hexdigest(self) -> str:
        return "sha256:" + self.digest.hexdigest()


GZIP, ZSTD, XZ, BZIP2 = b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\xfd7zXZ\x00", b"BZh"  # each format's magic bytes
MAGIC_LENGTH = 6


def compressed(head: bytes) -> bool:
    """Whether bytes starting so are one of the compressed forms `decompressed` reads."""
    return head.startswith((GZIP, ZSTD, XZ, BZIP2))


def decompressed(stream: _Hashing | IO[bytes]) -> IO[bytes]:
    """What a blob holds, decompressed as it is read, by its magic bytes: gzip, zstd (every frame: a layer written
    in chunks has several), xz, bzip2, else the bytes as they are. Also an archive's (`docker save | zstd`)."""
    head = stream.read(MAGIC_LENGTH)
    rest = cast(IO[bytes], _Prefixed(head, stream))
    if head.startswith(GZIP):
        return cast(IO[bytes], gzip.GzipFile(fileobj=rest, mode="rb"))
    if head.startswith(ZSTD):
        return zstandard.ZstdDecompressor().stream_reader(rest, read_across_frames=True)
    if head.startswith(XZ):
        return lzma.LZMAFile(rest)
    if head.startswith(BZIP2):
        return bz2.BZ2File(rest)
    return rest


class _Prefixed:
    """`head`, then the rest of a stream it was read from."""

    def __init__(self, head: bytes, rest: _Hashing | IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0:
                data, self.head = self.head + self.rest.read(), b""
                return data
            data, self.head = self.head[:size], self.head[size:]
            return data + (self.rest.read(size - len(data)) if size > len(data) else b"")
        return self.rest.read(size)


DIFF_ID = "diff_id"



def kept_name(hexdigest: str, keep: tuple[str, ...]) -> str:
    """A layer's directory name: its digest, and what beyond the defaults it keeps (the same layer kept for another
    image's model repository is another directory)."""
    return hexdigest + ("+" + hashlib.sha256("\n".join(sorted(keep)).encode()).hexdigest()[:16] if keep else "")


def read_layer(layer: Layer, image: str, cache: Path, keep: tuple[str, ...] = ()) -> Path:
    """The layer's directory in the cache (`cache`/<hex>): its index and the contents kept, read now unless an
    earlier check kept it. InputError naming the image when the layer cannot be read or lies about its digest or
    its diff_id."""
    done = cache / kept_name(layer.digest.split(":", 1)[1], keep)
    if not (done / INDEX).is_file():
        try:
            with layer.open() as raw:
                done = keep_layer(raw, cache, layer.digest, image, keep)
        except OSError as exc:
            raise InputError(image, f"layer {layer.digest}: {exc}") from None
    if (done / DIFF_ID).read_text() != layer.diff_id:
        raise InputError(image, f"layer {layer.digest}: its tar does not have the diff_id {layer.diff_id} the "
                         "configuration gives")
    return done


def keep_layer(raw: IO[bytes], cache: Path, digest: str | None = None, image: str = "the image",
               keep: tuple[str, ...] = (), seen: Callable[[tarfile.TarInfo], None] | None = None,
               limit: int | None = None) -> Path:
    """Read a layer blob from `raw` to its end into the cache, under the digest it has (which must be `digest`
    where one is given), with its diff_id beside its index; its directory. `seen` is shown every member as it
    passes (an execution environment's archive notes the names that would land outside it); `limit`: its
    uncompressed bytes at most (None: LAYER_LIMIT)."""
    staging = cache / f".layer.{os.getpid()}.{id(raw)}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / FILES).mkdir(parents=True, mode=0o700)
    try:
        blob = _Hashing(raw)
        tar_stream = _Hashing(decompressed(blob), LAYER_LIMIT if limit is None else limit)
        entries = _members(tar_stream, staging / FILES, keep, seen)
        tar_stream.drain()
        blob.drain()
        if digest is not None and blob.hexdigest() != digest:
            raise ValueError(f"its content does not have the digest {digest} that names it")
        (staging / INDEX).write_text(json.dumps([asdict(e) for e in entries]))
        (staging / DIFF_ID).write_text(tar_stream.hexdigest())
        done = cache / kept_name(blob.hexdigest().split(":", 1)[1], keep)
        with contextlib.suppress(OSError):  # another check kept it first: this staging goes below
            staging.rename(done)
    except UNREADABLE as exc:
        raise InputError(image, f"layer {digest or '(streamed)'}: {exc}") from None
    finally:  # refused, interrupted (SIGINT, the CLI's SIGTERM) or renamed into place: no staging stays behind
        shutil.rmtree(staging, ignore_errors=True)
    return done


class _Budget:
    """What one layer may cost: its members (an Entry each, in memory and in its index) and the bytes written
    for the contents kept (a sparse member or a decompression bomb makes a small layer claim far more)."""

    def __init__(self) -> None:
        self.members = 0
        self.written = 0

    def member(self, member: tarfile.TarInfo) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise ValueError(f"more than {MAX_MEMBERS} members")
        if member.size > LAYER_LIMIT or member.size < 0:
            raise ValueError(f"{normalised(member.name) or member.name!r} claims {member.size} bytes")

    def write(self, size: int) -> bool:
        """Whether `size` more bytes may be written; counted when they may."""
        if self.written + size > KEPT_LIMIT:
            return False
        self.written += size
        return True


def _members(stream: _Hashing, files: Path, keep: tuple[str, ...],
             seen: Callable[[tarfile.TarInfo], None] | None = None) -> list[Entry]:
    """Every member's entry, in order; the contents kept written as they pass. A member replacing a kept file in
    the same layer removes it first; a hard link to a file kept in this layer is made at once (in the layer's own
    directory), so that a later member of the target's name does not change what it names."""
    entries = []
    budget = _Budget()
    with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8",  # type: ignore[call-overload]
                      errors="strict") as archive:
        while (member := archive.next()) is not None:
            archive.members = []  # stream mode keeps every member otherwise: memory grows with the layer
            budget.member(member)
            if seen is not None:
                seen(member)
            entry = _entry(member)
            if entry is None:
                continue
            _replaced(files, entry)
            if entry.kind == "file":
                entry = _kept(archive, member, entry, files, keep, budget)
            elif entry.kind == "hardlink":
                entry = _linked(files, entry)
            entries.append(entry)
    return entries


def _replaced(files: Path, entry: Entry) -> None:
    """A member of a path this layer kept a file at before replaces it (a directory, a link, another file)."""
    if entry.kind in ("whiteout", "opaque"):
        return
    dest = files / entry.path
    if dest.is_file() and not dest.is_symlink():
        dest.unlink()


def _linked(files: Path, entry: Entry) -> Entry:
    """A hard link whose target this layer kept: the same content, linked now (a later member of the target's
    name replaces the target, not what the link names)."""
    source = files / entry.link
    if not source.is_file() or source.is_symlink():
        return entry  # a target of a lower layer: the layers' merge gives it
    dest = files / entry.path
    try:
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if dest.is_file() and not dest.is_symlink():
            dest.unlink()
        os.link(source, dest)
    except OSError:
        return entry
    return Entry(entry.path, "file", source.stat().st_mode & 0o777, source.stat().st_size, kept=True)


def _entry(member: tarfile.TarInfo) -> Entry | None:
    path = normalised(member.name)
    if path is None:
        return None  # the root itself, or a name above it: nothing of the image
    base = posixpath.basename(path)
    parent = posixpath.dirname(path)
    if base == OPAQUE:
        return Entry(parent, "opaque")
    if base.startswith(WHITEOUT):
        if base == WHITEOUT:
            raise ValueError(f"{path!r}: a whiteout that names nothing")
        return Entry(posixpath.join(parent, base[len(WHITEOUT):]), "whiteout")
    mode = member.mode & 0o777
    if member.isdir():
        return Entry(path, "dir", mode)
    if member.issym():
        return Entry(path, "symlink", mode, link=member.linkname)
    if member.islnk():
        target = normalised(member.linkname)
        return Entry(path, "hardlink", mode, link=target) if target else Entry(path, "other", mode)
    if member.isfile():
        return Entry(path, "file", mode, member.size)
    return Entry(path, "other", mode)  # a device node, a FIFO: never written


def _kept(archive: tarfile.TarFile, member: tarfile.TarInfo, entry: Entry, files: Path,
          keep: tuple[str, ...], budget: _Budget) -> Entry:
    source = archive.extractfile(member)
    if source is None:
        return entry
    head = source.read(4)
    if not wanted(entry.path, head, member.size, keep) or member.size > FILE_LIMIT or member.issparse() \
            or not budget.write(member.size):
        return entry
    dest = files / entry.path
    try:  # only plain directories of its own in the layer's directory: nothing is created through a link
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if dest.is_symlink() or dest.exists():  # a member twice in one layer: the later one wins
            dest.unlink()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(dest, flags, 0o755 if entry.mode & 0o111 else 0o644), "wb") as out:
            out.write(head)
            shutil.copyfileobj(source, out, CHUNK)
    except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError):
        return entry  # a name that is both a directory and a file in one layer: not kept
    return Entry(entry.path, entry.kind, entry.mode, entry.size, kept=True)
