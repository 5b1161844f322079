"""`docker-daemon:NAME[:TAG]` and `podman:NAME[:TAG]`: the local daemon's `docker save` (`podman image save`), read as
it streams, never written whole to disk. Its layers go into the cache as they pass, under the digest they have; the
manifest and configuration (which may come last) then say which layers make the image, each checked against the
digest and diff_id they give, as for an archive (customops.image.layout)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO

from customops import safeio
from customops.errors import CustomopsError, InputError
from customops.image.identity import RUNTIMES, inspected_id
from customops.image.layers import INDEX, UNREADABLE
from customops.image.layout import JSON_LIMIT, Image, Layer
from customops.image.reference import DIGEST, ImageReference, Transport
from customops.image.stream import Streamed, image_of, layers_and_documents

DAEMON_WAIT = 30  # seconds a daemon's save may take to end once its archive has been read or refused
TRAILING_LIMIT = 1 << 20  # bytes after the archive's end (padding) read before the save is refused
STDERR_KEPT = 4096  # bytes of the daemon's error output kept for its one-line message
CONFIGS = "configs"  # configurations of the images daemons saved, by digest (what `image inspect` gives as ID)


def command(ref: ImageReference) -> list[str]:
    runtime = RUNTIMES[ref.transport]
    return [runtime, "save", ref.path] if ref.transport is Transport.DOCKER_DAEMON else [runtime, "image", "save",
                                                                                       ref.path]


def cached_daemon_image(ref: ImageReference, cache: Path) -> Image | None:
    """The image the daemon holds under that name, without a save, when an earlier one kept its configuration and
    every layer: `image inspect` gives its ID, which is its configuration's digest in the classic image store (in
    containerd's it names a manifest, and the image is saved again). The kept configuration must have that digest:
    a cache entry is read as untrusted as the image."""
    digest = inspected_id(ref)
    if digest is None:
        return None
    try:  # a regular file only (a FIFO put there would block), read within the JSON bound
        data = safeio.read_bytes(str(cache / CONFIGS / digest.split(":")[1]), JSON_LIMIT, follow=False)
    except (OSError, InputError):
        return None
    if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        return None
    try:
        config = json.loads(data)
        diff_ids = config["rootfs"]["diff_ids"]
        layers = tuple(Layer(d, d, _not_kept) for d in diff_ids if DIGEST.fullmatch(d))
    except (ValueError, TypeError, KeyError):
        return None
    if len(layers) != len(diff_ids) or not all((cache / "layers" / d.split(":")[1] / INDEX).is_file()
                                               for d in diff_ids):
        return None
    return Image(str(ref), digest, config, layers)


class _Tail:
    """The last bytes a stream gave, read by a thread of its own until it ends."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.kept = bytearray()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        while chunk := stream.read(1 << 16):
            self.kept.extend(chunk)
            del self.kept[:-STDERR_KEPT]

    def text(self) -> str:
        """Its last line, once the stream ended (or a few seconds passed)."""
        self.thread.join(timeout=5)
        lines = bytes(self.kept).decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else ""


def _more_than(stream: IO[bytes], limit: int) -> bool:
    """Whether more than `limit` bytes follow (the zero padding after a tar's end is read and dropped)."""
    seen = 0
    while chunk := stream.read(1 << 16):
        seen += len(chunk)
        if seen > limit:
            return True
    return False


def _not_kept() -> IO[bytes]:
    raise OSError("not in customops' cache: check again to save the image anew")


def read_daemon(ref: ImageReference, cache: Path, platform: str = "linux/amd64", keep: tuple[str, ...] = ()) -> Image:
    """The image the daemon saves, its layers kept in `cache`/layers as they stream (with `keep`); CustomopsError
    (exit 2) when no daemon answers, InputError when what it sends is not an image."""
    argv = command(ref)
    if shutil.which(argv[0]) is None:
        raise CustomopsError(f"--image {ref}: no {argv[0]} command here to ask its daemon for the image")
    (cache / "layers").mkdir(parents=True, exist_ok=True, mode=0o700)
    streamed = Streamed()
    failed: BaseException | None = None
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        said = _Tail(proc.stderr)  # read as it comes: a daemon that says much first must not block on it
        try:
            streamed = layers_and_documents(proc.stdout, cache / "layers", str(ref), keep)
            if _more_than(proc.stdout, TRAILING_LIMIT):
                failed = ValueError(f"more than {TRAILING_LIMIT >> 20} MiB after the archive's end")
        except UNREADABLE as exc:
            failed = exc
        finally:
            proc.stdout.close()  # a writer still writing gets EPIPE; one that does not stop is ended
            try:
                proc.wait(timeout=DAEMON_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        message = said.text()
        if proc.returncode != 0 and (failed is not None or not streamed.documents):
            raise CustomopsError(f"--image {ref}: `{' '.join(argv)}` failed: {message or 'no message'}")
        if failed is not None:
            raise InputError(str(ref), f"what `{' '.join(argv)}` sent is not an image archive: {failed}")
    image = image_of(ref, streamed, platform)
    _keep_config(cache, image, streamed.documents)
    return image


def _keep_config(cache: Path, image: Image, documents: dict[str, bytes]) -> None:
    """The configuration's bytes, under their digest, for cached_daemon_image."""
    hexdigest = image.config_digest.split(":")[1]
    for data in documents.values():
        if hashlib.sha256(data).hexdigest() == hexdigest:
            (cache / CONFIGS).mkdir(parents=True, exist_ok=True, mode=0o700)
            staging = cache / CONFIGS / f".{hexdigest}.{os.getpid()}"
            staging.write_bytes(data)
            staging.rename(cache / CONFIGS / hexdigest)
            return
