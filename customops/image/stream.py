"""An image archive read as one stream, front to back, never seeking: `docker save IMAGE | customops ... --image
docker-archive:/dev/stdin`, an archive compressed whole (`image.tar.gz`, `image.tar.zst`), a daemon's save
(customops.image.daemon). Its JSON documents are held in memory (bounded); its layers go into the cache as they
pass, each under the digest it has, since the manifest and configuration that say which layers make the image may
come last. They are then read as an archive's are (customops.image.layout): every document checked against the
digest that names it, every layer's digest and diff_id against the manifest's and the configuration's."""

from __future__ import annotations

import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from customops.errors import InputError
from customops.image.layers import (
    INDEX,
    MAGIC_LENGTH,
    UNREADABLE,
    _Prefixed,
    compressed,
    decompressed,
    keep_layer,
    kept_name,
)
from customops.image.layout import JSON_LIMIT, MAX_LAYERS, Image, _Files, described
from customops.image.reference import ImageReference, Transport

DOCUMENTS = ("manifest.json", "index.json", "oci-layout", "repositories")
DOCUMENTS_LIMIT = 64 << 20  # bytes of JSON documents held from one stream
STREAM_LAYERS = 4 * MAX_LAYERS  # layer blobs of one archive (several platforms' images may share one)


def read_whole(ref: ImageReference) -> bool:
    """Whether the archive `ref` names must be read as a stream: it is not a regular file (a pipe, /dev/stdin), or
    it is compressed whole (a tar reader would decompress it again for every member it seeks to)."""
    if ref.transport not in (Transport.DOCKER_ARCHIVE, Transport.OCI_ARCHIVE):
        return False
    try:
        if not stat.S_ISREG(os.stat(ref.path).st_mode):
            return True
        with open(ref.path, "rb") as head:
            magic = head.read(MAGIC_LENGTH)
    except OSError:
        return False  # the archive reader says why, naming the image
    return compressed(magic)


def read_archive_stream(ref: ImageReference, cache: Path, platform: str, keep: tuple[str, ...] = ()) -> Image:
    """The image the archive at `ref.path` holds, read once; its layers kept in `cache`/layers (with `keep`)."""
    layers = cache / "layers"
    layers.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with open(ref.path, "rb") as raw:
            streamed = layers_and_documents(decompressed(raw), layers, str(ref), keep)
    except UNREADABLE as exc:
        raise InputError(str(ref), f"not a readable image archive: {type(exc).__name__}: {exc}") from None
    return image_of(ref, streamed, platform)


def image_of(ref: ImageReference, streamed: Streamed, platform: str) -> Image:
    """The image the documents describe, its layers those the stream kept (customops.image.layout.described); a
    layer it names that the stream could not read is the reason it is refused."""
    image = described(ref, _Files(ref, streamed.documents), platform)
    for layer in image.layers:
        if layer.digest in streamed.refused:
            raise InputError(str(ref), streamed.refused[layer.digest])  # "layer sha256:...: why"
    return image


@dataclass
class Streamed:
    """What an archive's stream held: its JSON documents by name, and the blobs that were neither JSON nor a
    layer (an SBOM, an attestation), by digest, with why: an error only where the image names one as a layer."""

    documents: dict[str, bytes] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


def layers_and_documents(stream: IO[bytes], layers: Path, image: str, keep: tuple[str, ...] = ()) -> Streamed:
    """Read the archive on `stream` to its end: its JSON documents, its layer blobs (kept in `layers`, a blob kept
    before passed by). A layer is a blob (blobs/sha256/HEX) or a tar (`ID/layer.tar`, podman's `HEX.tar`); anything
    else (docker's `ID/VERSION`, links between identical layers) is passed by."""
    streamed = Streamed()
    documents = streamed.documents
    held = layers_seen = 0
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        while (member := archive.next()) is not None:
            archive.members = []  # type: ignore[attr-defined]  # stream mode keeps every member otherwise
            name = member.name.removeprefix("./")
            blob = name.startswith("blobs/sha256/")
            if not member.isfile() or not (blob or name.endswith((".tar", ".json")) or name in DOCUMENTS):
                if member.size > JSON_LIMIT:  # docker's ID/VERSION, ID/json: a few bytes; nothing else is read
                    raise InputError(image, f"{name}: {member.size} bytes of neither a layer nor a document")
                continue
            content = archive.extractfile(member)
            assert content is not None
            head = content.read(1)
            if (not blob and not name.endswith(".tar")) or (head == b"{" and member.size <= JSON_LIMIT):
                held += member.size
                if member.size > JSON_LIMIT or held > DOCUMENTS_LIMIT:
                    raise InputError(image, f"{name}: more JSON than an image's documents ({DOCUMENTS_LIMIT >> 20} MB)")
                documents[name] = head + content.read()
                continue
            layers_seen += 1
            if layers_seen > STREAM_LAYERS:
                raise InputError(image, f"more than {STREAM_LAYERS} layers in one archive")
            digest = "sha256:" + name.rsplit("/", 1)[1] if blob else None
            if digest is not None and (layers / kept_name(digest.split(":")[1], keep) / INDEX).is_file():
                continue  # kept by an earlier check: the stream passes it by
            try:
                keep_layer(_Prefixed(head, content), layers, digest, image, keep)  # type: ignore[arg-type]
            except InputError as exc:
                if digest is None:
                    raise
                streamed.refused[digest] = exc.reason  # the rest of the member is passed by
    return streamed
