"""Reading files customops does not trust: only regular files, never blocking, never without a bound.

Every file customops reads comes from someone else (a model repository, a manifest, a profile, a container
root, its own cache directory when others could write there). A FIFO would block an `open()` forever,
`/dev/zero` or a sparse 10 GB file would be read whole, and a zlib bomb would decompress without limit.
So every read goes through here: the file is opened with O_NONBLOCK (a FIFO opens at once instead of
waiting for a writer) and O_NOCTTY, checked with fstat to be a regular file, and read up to a limit
that real inputs never reach; decompression is bounded the same way. Each failure is an InputError
naming the file and the reason, which the CLI turns into one line and exit status 2.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import zlib

from customops import sigbus
from customops.errors import InputError

MiB = 1 << 20

# Limits (bytes) far above what real inputs need: Triton's own configs are a few KB, a container's
# ld.so.cache well under 1 MB, a profile of a container with torch, TensorFlow and ONNX Runtime ~23 MB.
CONFIG_LIMIT = 4 * MiB  # config.pbtxt (protobuf text)
MANIFEST_LIMIT = 1 * MiB  # customops.toml
SMALL_TEXT_LIMIT = 1 * MiB  # TRITON_VERSION, ld.so.conf and its includes, model.py
LD_CACHE_LIMIT = 64 * MiB  # etc/ld.so.cache
PROFILE_LIMIT = 256 * MiB  # customops-profile.json as stored
PROFILE_EXPANDED_LIMIT = 4096 * MiB  # all of a profile's chunks, decompressed
CACHE_ENTRY_LIMIT = 256 * MiB  # one entry of customops' own cache
MODEL_FILE_LIMIT = 2048 * MiB  # an ONNX model or TensorFlow graph read for its op types
ARCHIVE_MEMBER_LIMIT = 64 * MiB  # one member of a TorchScript archive, decompressed
LIBRARY_LIMIT = 8192 * MiB  # a shared library read whole (hashing identical copies)


def open_regular(path: str, *, follow: bool = True) -> int:
    """A read-only descriptor of `path`, which must be a regular file. Never blocks: a FIFO is opened
    non-blocking and then refused; with follow=False a symlink is refused too (O_NOFOLLOW)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise InputError(path, "is a symbolic link, refused here") from None
        raise InputError(path, describe(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(path, f"not a regular file ({kind(st.st_mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str, limit: int, *, follow: bool = True) -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    fd = open_regular(path, follow=follow)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise InputError(path, too_large(size, limit))
        chunks = []
        total = 0
        while True:  # the size can change while reading: never read past the limit
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InputError(path, too_large(total, limit))
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(path, describe(exc)) from None
    finally:
        os.close(fd)


def read_text(path: str, limit: int, *, errors: str = "strict") -> str:
    """A regular file's content decoded as UTF-8 (a leading byte-order mark is kept, as protobuf sees it)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None


def is_regular(path: str) -> bool:
    """True for a regular file (symlinks followed); False for anything else or what cannot be stat()ed."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def inflate(data: bytes, limit: int, where: str) -> bytes:
    """zlib-decompress `data` into at most `limit` bytes; a bomb or corrupt stream is an InputError."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InputError(where, f"corrupt compressed data ({exc})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise InputError(where, f"decompresses to more than {limit} bytes (limit)")
    if not inflater.eof:
        raise InputError(where, "truncated compressed data")
    return out


def too_large(size: int, limit: int) -> str:
    return f"{size} bytes, over the limit of {limit} bytes for this kind of file"


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def describe(exc: OSError) -> str:
    """An OSError as the shell says it ("Permission denied", "Is a directory")."""
    return exc.strerror or str(exc)


def map_regular(path: str, limit: int) -> mmap.mmap | bytes:
    """A read-only map of a regular file of at most `limit` bytes (an empty file maps to b"")."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise InputError(path, too_large(size, limit))
        sigbus.before_mapping()
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as exc:
        raise InputError(path, describe(exc)) from None
    finally:
        os.close(fd)


def sha256(path: str, limit: int) -> str:
    """The SHA-256 of a regular file of at most `limit` bytes, read in chunks."""
    import hashlib

    fd = open_regular(path)
    digest = hashlib.sha256()
    total = 0
    try:
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise InputError(path, too_large(total, limit))
            digest.update(chunk)
    except OSError as exc:
        raise InputError(path, describe(exc)) from None
    finally:
        os.close(fd)
    return digest.hexdigest()
