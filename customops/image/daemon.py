"""`docker-daemon:NAME[:TAG]` and `podman:NAME[:TAG]`: the local daemon's `docker save` (`podman image save`), read as
it streams, never written whole to disk. Its layers go into the cache as they pass, under the digest they have; the
manifest and configuration (which may come last) then say which layers make the image, each checked against the
digest and diff_id they give, as for an archive (customops.image.layout)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import IO

from customops.errors import CustomopsError, InputError
from customops.image.layers import INDEX, _Prefixed, keep_layer
from customops.image.layout import JSON_LIMIT, Image, _docker_archive, _Files, _oci, guarded
from customops.image.reference import ImageReference, Transport

DOCUMENTS = ("manifest.json", "index.json", "oci-layout", "repositories")


def command(ref: ImageReference) -> list[str]:
    return ["docker", "save", ref.path] if ref.transport is Transport.DOCKER_DAEMON else \
        ["podman", "image", "save", ref.path]


def read_daemon(ref: ImageReference, cache: Path, platform: str = "linux/amd64") -> Image:
    """The image the daemon saves, its layers kept in `cache`/layers as they stream; CustomopsError (exit 2) when
    no daemon answers, InputError when what it sends is not an image."""
    argv = command(ref)
    if shutil.which(argv[0]) is None:
        raise CustomopsError(f"--image {ref}: no {argv[0]} command here to ask its daemon for the image")
    (cache / "layers").mkdir(parents=True, exist_ok=True, mode=0o700)
    documents: dict[str, bytes] = {}
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            _stream(proc.stdout, cache / "layers", documents, str(ref))
        except (tarfile.TarError, EOFError, OSError) as exc:
            if proc.wait() == 0:
                raise InputError(str(ref), f"what `{' '.join(argv)}` sent is not an image archive: {exc}") from None
        said = proc.stderr.read(4096).decode("utf-8", "replace").strip().splitlines()
        if proc.wait() != 0:
            raise CustomopsError(f"--image {ref}: `{' '.join(argv)}` failed: {said[-1] if said else 'no message'}")
    files = _Files(ref, documents)
    if "index.json" in documents and "oci-layout" in documents and "manifest.json" not in documents:
        return guarded(ref, lambda: _oci(ref, platform, files))
    return guarded(ref, lambda: _docker_archive(ref, files))


def _stream(stdout: IO[bytes], layers: Path, documents: dict[str, bytes], image: str) -> None:
    with tarfile.open(fileobj=stdout, mode="r|") as archive:
        for member in archive:
            if not member.isfile():
                continue
            name = member.name.removeprefix("./")
            stream = archive.extractfile(member)
            assert stream is not None
            head = stream.read(1)
            if (name in DOCUMENTS or name.endswith(".json") or head == b"{") and member.size <= JSON_LIMIT:
                documents[name] = head + stream.read()
                continue
            digest = "sha256:" + name.rsplit("/", 1)[1] if name.startswith("blobs/sha256/") else None
            if digest is not None and (layers / digest.split(":")[1] / INDEX).is_file():
                continue  # kept by an earlier check: the stream passes it by
            keep_layer(_Prefixed(head, stream), layers, digest, image)  # type: ignore[arg-type]
