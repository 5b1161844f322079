"""`docker-daemon:NAME[:TAG]` and `podman:NAME[:TAG]`: the local daemon's `docker save` (`podman image save`), read as
it streams, never written whole to disk. Its layers go into the cache as they pass, under the digest they have; the
manifest and configuration (which may come last) then say which layers make the image, each checked against the
digest and diff_id they give, as for an archive (customops.image.layout)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from customops.errors import CustomopsError, InputError
from customops.image.layers import UNREADABLE
from customops.image.layout import Image
from customops.image.reference import ImageReference, Transport
from customops.image.stream import image_of, layers_and_documents


def command(ref: ImageReference) -> list[str]:
    return ["docker", "save", ref.path] if ref.transport is Transport.DOCKER_DAEMON else \
        ["podman", "image", "save", ref.path]


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
    return image_of(ref, documents, platform)
