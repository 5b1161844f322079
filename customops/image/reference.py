"""What `--image REF` names, in skopeo's transport names (so users move between the tools): `docker-archive:PATH`
(a `docker save` / `podman save` archive, `:NAME:TAG` to choose one of several images), `oci:DIR[:TAG]` (an OCI
image layout), `oci-archive:FILE[:TAG]` (one as a tar), `docker-daemon:NAME[:TAG]` and `podman:NAME[:TAG]` (the
local daemon's save, streamed). A bare path is read as what it is: a directory holding `oci-layout` is `oci:`, a
file `docker-archive:` (or `oci-archive:` when it holds `oci-layout`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from customops.errors import CustomopsError
from customops.textenum import TextEnum

if TYPE_CHECKING:
    from tarfile import TarFile, TarInfo


DEFAULT_PLATFORM = "linux/amd64"  # of a multi-platform index, unless --platform names another


class Transport(TextEnum):
    DOCKER_ARCHIVE = "docker-archive"
    OCI = "oci"
    OCI_ARCHIVE = "oci-archive"
    DOCKER_DAEMON = "docker-daemon"  # the local daemon's `docker save`, streamed
    PODMAN = "podman"  # the local `podman image save`, streamed

    @property
    def streamed(self) -> bool:
        return self in (Transport.DOCKER_DAEMON, Transport.PODMAN)


@dataclass(frozen=True)
class ImageReference:
    transport: Transport
    path: str
    selector: str = ""  # docker-archive: "name:tag"; oci: the tag (org.opencontainers.image.ref.name)

    def __str__(self) -> str:
        return f"{self.transport.value}:{self.path}" + (f":{self.selector}" if self.selector else "")


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")  # how an image names its blobs, configuration and ID
PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?")  # os/architecture[/variant], as an index lists them


def platform(text: str) -> str:
    """--platform's value; CustomopsError (exit 2) for one that is no os/architecture."""
    if not PLATFORM.fullmatch(text):
        raise CustomopsError(f"--platform {text!r}: expected OS/ARCH[/VARIANT], e.g. linux/amd64 or linux/arm64/v8")
    return text


def readable(text: str) -> bool:
    """Whether `text` names an image customops can read (a transport:path, or a path), not only a registry name."""
    transport, _, rest = text.partition(":")
    return (transport in {t.value for t in Transport} and bool(rest)) or os.path.exists(text)


def parse(text: str) -> ImageReference:
    """The reference `--image` was given; CustomopsError (exit 2) when it names no readable image."""
    transport, _, rest = text.partition(":")
    if transport in {t.value for t in Transport} and rest:
        kind = Transport(transport)
        if kind.streamed:
            if rest.startswith("-"):  # no image name starts so: it would be an option to the daemon's command
                raise CustomopsError(f"--image {text}: not an image name (it starts with '-')")
            return ImageReference(kind, rest)  # NAME[:TAG], as the daemon knows it
        path, selector = _split(rest, kind)
        return ImageReference(kind, path, selector)
    if os.path.isdir(text):
        return ImageReference(Transport.OCI, text)
    if os.path.exists(text):
        return ImageReference(Transport.OCI_ARCHIVE if _holds_layout(text) else Transport.DOCKER_ARCHIVE, text)
    raise CustomopsError(f"--image {text}: no such file or directory, and not a transport:path reference "
                         f"({', '.join(t.value + ':' for t in Transport)})")


def _split(rest: str, kind: Transport) -> tuple[str, str]:
    """(path, selector): the longest prefix that exists is the path (a path may hold ':')."""
    parts = rest.split(":")
    for cut in range(len(parts), 0, -1):
        path = ":".join(parts[:cut])
        if os.path.exists(path):
            return path, ":".join(parts[cut:])
    raise CustomopsError(f"--image {kind.value}:{rest}: no such file or directory")


def _holds_layout(path: str) -> bool:
    import tarfile

    if not os.path.isfile(path):
        return False  # a pipe is read once, as an archive: never looked into here
    try:
        with tarfile.open(path, "r:") as archive:
            return any(m.name.lstrip("./") == "oci-layout" for m in _first(archive, 64))
    except (OSError, tarfile.TarError, ValueError):
        return False


def _first(archive: TarFile, count: int) -> list[TarInfo]:
    found = []
    for member in archive:
        found.append(member)
        if len(found) >= count:
            break
    return found
