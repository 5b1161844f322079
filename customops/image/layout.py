"""An image's manifest, configuration and layers, read from a `docker save` archive, an OCI image layout or an OCI
archive without a daemon and without unpacking anything: every JSON document is checked against the digest that
names it (a manifest or configuration that lies about its digest is refused), a layer's digest is checked as it is
streamed (customops.image.layers). Multi-platform indexes choose linux/amd64 (or `platform`)."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import posixpath
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from customops.errors import InputError
from customops.image.reference import DIGEST, ImageReference, Transport

JSON_LIMIT = 16 << 20  # bytes of one manifest, index or configuration
MAX_LAYERS = 500  # more is refused: Docker allows 127, an OCI image in practice fewer
MAX_DEPTH = 8  # nested indexes followed (an index that lists itself ends here)
INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}


@dataclass(frozen=True)
class Layer:
    digest: str  # of the blob as stored (compressed or not): "sha256:<hex>"
    diff_id: str  # of the uncompressed tar, from the configuration's rootfs.diff_ids
    open: Callable[[], IO[bytes]]  # the blob's bytes, from its start


@dataclass(frozen=True)
class Image:
    reference: str  # as the user named it
    config_digest: str
    config: dict[str, Any]
    layers: tuple[Layer, ...]

    @property
    def settings(self) -> dict[str, Any]:
        """The configuration's `config` object (Env, Entrypoint, Cmd, WorkingDir); empty when it is not one."""
        found = self.config.get("config")
        return found if isinstance(found, dict) else {}

    @property
    def environment(self) -> dict[str, str]:
        """The configuration's Env, as the runtimes give it to the entrypoint."""
        found = {}
        listed = self.settings.get("Env")
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, str) and "=" in entry:
                name, value = entry.split("=", 1)
                found[name] = value
        return found

    @property
    def working_directory(self) -> str:
        """Where its processes start: the configuration's WorkingDir (absolute, normalised), else `/`, as the
        runtimes start them."""
        found = self.settings.get("WorkingDir")
        return posixpath.normpath("/" + found.lstrip("/")) if isinstance(found, str) and found.strip() else "/"

    @property
    def server_args(self) -> tuple[str, ...] | None:
        """The arguments its Entrypoint and Cmd give `tritonserver` (through an entrypoint script that execs its
        arguments, as NVIDIA's does), or None where they do not start it."""
        argv = [a for key in ("Entrypoint", "Cmd") if isinstance(self.settings.get(key), list)
                for a in self.settings[key] if isinstance(a, str)]
        at = next((i for i, a in enumerate(argv) if os.path.basename(a) == "tritonserver"), None)
        return None if at is None else tuple(argv[at + 1:])

    @property
    def repositories(self) -> tuple[str, ...]:
        """The model repositories its command line names, relative to the image's root ("models")."""
        found = []
        for arg in self.server_args or ():
            name, _, value = arg.partition("=")
            if name in ("--model-repository", "--model-store") and value.startswith("/"):
                path = posixpath.normpath(value).lstrip("/")
                if path and not path.startswith(".."):
                    found.append(path)
        return tuple(found)


def read_image(ref: ImageReference, platform: str = "linux/amd64") -> Image:
    """The image `ref` names; InputError (exit 2) naming the image and the reason when it cannot be read."""
    if ref.transport is Transport.OCI:
        return guarded(ref, lambda: _oci(ref, platform))
    return described(ref, _Files(ref), platform)


def described(ref: ImageReference, files: _Files, platform: str) -> Image:
    """The image an archive describes: by manifest.json as `docker load` reads it, by index.json as an OCI
    archive is read (`oci-archive:`, or no manifest.json). An archive holding both (docker 25 writes both) must
    describe one image with them: two descriptions naming different configurations are refused, so that how the
    archive is given (a file, compressed, on a pipe) never changes which image is checked."""
    docker = files.has("manifest.json")
    use_oci = ref.transport is Transport.OCI_ARCHIVE or not docker
    chosen = guarded(ref, lambda: _oci(ref, platform, files) if use_oci else _docker_archive(ref, files))
    if docker and files.has("index.json") and files.has("oci-layout"):
        try:
            other = (_docker_archive(ref, files) if use_oci else _oci(ref, platform, files)).config_digest
        except (InputError, OSError, tarfile.TarError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            other = None  # the other description names nothing readable: the one read stands
        if other is not None and other != chosen.config_digest:
            raise InputError(str(ref), f"its manifest.json and its index.json describe different images "
                             f"({chosen.config_digest[:19]} and {other[:19]}): not read")
    return chosen


def guarded(ref: ImageReference, read: Callable[[], Image]) -> Image:
    """`read()`, whose JSON documents may have any shape: what does not have the one the specification gives is
    one InputError naming the image (a manifest whose layers are not a list, a digest that is not a string)."""
    try:
        return read()
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError) as exc:
        raise InputError(str(ref), f"not a readable image: {type(exc).__name__}: {exc}") from None


class _Files:
    """The files of a layout: a directory's, an archive's members (read in place, never extracted), or the
    documents a daemon's stream held (customops.image.daemon: its layers are in the cache already)."""

    def __init__(self, ref: ImageReference, documents: dict[str, bytes] | None = None) -> None:
        self.ref, self.documents = ref, documents
        self.archive = None if documents is not None or os.path.isdir(ref.path) else \
            tarfile.open(ref.path, "r:*")  # noqa: SIM115 (read from while the image is)
        self.members = {m.name.removeprefix("./"): m for m in self.archive.getmembers()} if self.archive else {}

    def has(self, name: str) -> bool:
        if self.documents is not None:
            return name in self.documents
        if self.archive is None:
            return os.path.isfile(os.path.join(self.ref.path, name))
        return name in self.members

    def open(self, name: str) -> IO[bytes]:
        if self.documents is not None:
            if name not in self.documents:
                raise InputError(str(self.ref), f"{name}: not in what the stream held")
            return io.BytesIO(self.documents[name])
        if self.archive is None:
            path = os.path.join(self.ref.path, name)
            if os.path.islink(path) or not os.path.isfile(path):
                raise InputError(str(self.ref), f"{name}: not a regular file of the image")
            return open(path, "rb")
        member = self.members.get(name)
        if member is None or not member.isfile():
            raise InputError(str(self.ref), f"{name}: not in the archive")
        found = self.archive.extractfile(member)
        assert found is not None
        return found

    def json(self, name: str, digest: str | None = None) -> Any:
        with self.open(name) as stream:
            data = stream.read(JSON_LIMIT + 1)
        if len(data) > JSON_LIMIT:
            raise InputError(str(self.ref), f"{name}: more than {JSON_LIMIT >> 20} MB of JSON")
        if digest is not None and f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
            raise InputError(str(self.ref), f"{name}: its content does not have the digest {digest} that names it")
        return json.loads(data)

    def blob(self, digest: str) -> str:
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise InputError(str(self.ref), f"not a sha256 digest: {str(digest)[:80]!r}")
        return "blobs/sha256/" + digest.split(":", 1)[1]


def _config(files: _Files, name: str, digest: str) -> tuple[dict[str, Any], list[str]]:
    config = files.json(name, digest)
    if not isinstance(config, dict):
        raise InputError(str(files.ref), "its configuration is not a JSON object")
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list):
        raise InputError(str(files.ref), "its configuration has no rootfs.diff_ids list")
    if not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in diff_ids):
        raise InputError(str(files.ref), "its configuration's rootfs.diff_ids are not sha256 digests")
    return config, diff_ids


def _layers(files: _Files, names: list[str], digests: list[str], diff_ids: list[str]) -> tuple[Layer, ...]:
    if len(names) > MAX_LAYERS:
        raise InputError(str(files.ref), f"{len(names)} layers (more than {MAX_LAYERS})")
    if len(diff_ids) != len(names):
        raise InputError(str(files.ref), f"{len(names)} layers but {len(diff_ids)} diff_ids in its configuration")
    return tuple(Layer(digest, diff_id, functools.partial(files.open, name))
                 for name, digest, diff_id in zip(names, digests, diff_ids, strict=True))


def _docker_archive(ref: ImageReference, files: _Files | None = None) -> Image:
    """manifest.json: [{Config, RepoTags, Layers}]; a layer is an uncompressed tar (its digest is its diff_id) or,
    in newer archives, an OCI blob."""
    files = files or _Files(ref)
    entries = files.json("manifest.json")
    if not isinstance(entries, list) or not entries:
        raise InputError(str(ref), "manifest.json lists no image")
    chosen = [e for e in entries if ref.selector in (e.get("RepoTags") or [])] if ref.selector else entries
    if len(chosen) != 1:
        tags = sorted(t for e in entries for t in (e.get("RepoTags") or []))
        raise InputError(str(ref), f"{'no' if not chosen else len(chosen)} images match: choose one with "
                         f"docker-archive:PATH:NAME:TAG ({', '.join(tags) or 'no tags'})")
    entry = chosen[0]
    config_name = entry["Config"]
    config_hex = os.path.basename(config_name).removesuffix(".json")
    config, diff_ids = _config(files, config_name, f"sha256:{config_hex}")
    names = list(entry["Layers"])
    digests = [f"sha256:{os.path.basename(n)}" if n.startswith("blobs/sha256/") else diff_id
               for n, diff_id in zip(names, diff_ids, strict=False)]
    return Image(str(ref), f"sha256:{config_hex}", config, _layers(files, names, digests, diff_ids))


def _oci(ref: ImageReference, platform: str, files: _Files | None = None) -> Image:
    """index.json, then the manifest the tag (or the only one, or the platform's) names."""
    files = files or _Files(ref)
    layout = files.json("oci-layout")
    if not isinstance(layout, dict) or "imageLayoutVersion" not in layout:
        raise InputError(str(ref), "oci-layout does not name an imageLayoutVersion")
    manifest = _choose(files, files.json("index.json"), ref.selector, platform, 0)
    config_digest = manifest["config"]["digest"]
    config, diff_ids = _config(files, files.blob(config_digest), config_digest)
    layers = manifest.get("layers") or []
    digests = [layer["digest"] for layer in layers]
    return Image(str(ref), config_digest, config,
                 _layers(files, [files.blob(d) for d in digests], digests, diff_ids))


def _choose(files: _Files, index: Any, tag: str, platform: str, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise InputError(str(files.ref), f"indexes nested more than {MAX_DEPTH} deep (an index that lists itself?)")
    listed = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(listed, list) or not listed:
        raise InputError(str(files.ref), "an index lists no manifest")
    if tag and depth == 0:
        listed = [m for m in listed if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag]
        if not listed:
            raise InputError(str(files.ref), f"no manifest tagged {tag!r}")
    if len(listed) > 1:
        os_name, _, arch = platform.partition("/")
        listed = [m for m in listed if (m.get("platform") or {}).get("os") == os_name
                  and (m.get("platform") or {}).get("architecture") == arch] or listed
    if len(listed) != 1:
        raise InputError(str(files.ref), f"{len(listed)} manifests for {platform}: name one by its tag")
    chosen = listed[0]
    document = files.json(files.blob(chosen["digest"]), chosen["digest"])
    if chosen.get("mediaType") in INDEX_TYPES or document.get("mediaType") in INDEX_TYPES:
        return _choose(files, document, tag, platform, depth + 1)
    if not isinstance(document, dict) or "config" not in document:
        raise InputError(str(files.ref), f"{chosen['digest']}: not an image manifest")
    return document
