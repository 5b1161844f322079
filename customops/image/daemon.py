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
from pathlib import Path
from typing import IO

from customops.errors import CustomopsError, InputError
from customops.image.identity import RUNTIMES, inspected_id
from customops.image.layers import INDEX, UNREADABLE
from customops.image.layout import DIGEST, JSON_LIMIT, Image, Layer
from customops.image.reference import ImageReference, Transport
from customops.image.stream import image_of, layers_and_documents

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
    try:
        with open(cache / CONFIGS / digest.split(":")[1], "rb") as kept:
            data = kept.read(JSON_LIMIT + 1)
    except OSError:
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


def _not_kept() -> IO[bytes]:
    raise OSError("not in customops' cache: check again to save the image anew")


def read_daemon(ref: ImageReference, cache: Path, platform: str = "linux/amd64", keep: tuple[str, ...] = ()) -> Image:
    """The image the daemon saves, its layers kept in `cache`/layers as they stream (with `keep`); CustomopsError
    (exit 2) when no daemon answers, InputError when what it sends is not an image."""
    argv = command(ref)
    if shutil.which(argv[0]) is None:
        raise CustomopsError(f"--image {ref}: no {argv[0]} command here to ask its daemon for the image")
    (cache / "layers").mkdir(parents=True, exist_ok=True, mode=0o700)
    documents: dict[str, bytes] = {}
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            documents = layers_and_documents(proc.stdout, cache / "layers", str(ref), keep)
        except UNREADABLE as exc:
            if proc.wait() == 0:
                raise InputError(str(ref), f"what `{' '.join(argv)}` sent is not an image archive: {exc}") from None
        said = proc.stderr.read(4096).decode("utf-8", "replace").strip().splitlines()
        if proc.wait() != 0:
            raise CustomopsError(f"--image {ref}: `{' '.join(argv)}` failed: {said[-1] if said else 'no message'}")
    image = image_of(ref, documents, platform)
    _keep_config(cache, image, documents)
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
