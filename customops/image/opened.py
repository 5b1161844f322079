"""An image as a check reads it: named by a reference, read once (a pipe cannot be read twice), and applied into a
root in customops' cache, with the model repositories its command line names where the check reads them from the
image. An archive or layout is read where it lies, layer by layer; a stream (a daemon's save, a pipe, an archive
compressed whole) front to back, its layers kept as they pass, before its configuration says which repositories
the image has: a repository baked into it then takes a second read, which a pipe cannot give."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from customops.errors import CustomopsError
from customops.image.daemon import cached_daemon_image, read_daemon
from customops.image.layers import INDEX, kept_name
from customops.image.layout import Image, read_image
from customops.image.reference import DEFAULT_PLATFORM, ImageReference
from customops.image.root import materialize, repository_keep
from customops.image.stream import read_archive_stream, read_whole


@dataclass(frozen=True)
class Opened:
    ref: ImageReference
    image: Image
    cache: Path  # customops' image cache: layers/, roots/
    platform: str
    streamed: bool  # read front to back: its layers are in the cache, kept as they passed


def open_image(ref: ImageReference, cache: Path, platform: str = DEFAULT_PLATFORM) -> Opened:
    """The image `ref` names; InputError or CustomopsError (exit 2) naming it when it cannot be read."""
    if ref.transport.streamed:
        cached = cached_daemon_image(ref, cache)
        return Opened(ref, cached or read_daemon(ref, cache, platform), cache, platform, True)
    if read_whole(ref):
        return Opened(ref, read_archive_stream(ref, cache, platform), cache, platform, True)
    return Opened(ref, read_image(ref, platform), cache, platform, False)


def root_of(opened: Opened, repositories: bool = False) -> tuple[Opened, Path]:
    """The image's root (and the image as last read), with its model repositories where `repositories` asks (an
    image read where it lies always has them: its layers are read once either way)."""
    keep = repository_keep(opened.image) if repositories or not opened.streamed else ()
    if keep and opened.streamed and not _kept(opened, keep):
        opened = replace(opened, image=_read_again(opened, keep))
    return opened, materialize(opened.image, opened.cache, keep)


def _kept(opened: Opened, keep: tuple[str, ...]) -> bool:
    layers = opened.cache / "layers"
    return all((layers / kept_name(layer.digest.split(":", 1)[1], keep) / INDEX).is_file()
               for layer in opened.image.layers)


def _read_again(opened: Opened, keep: tuple[str, ...]) -> Image:
    """The stream read a second time, its layers keeping the repositories now known; a pipe is refused."""
    ref = opened.ref
    if ref.transport.streamed:
        return read_daemon(ref, opened.cache, opened.platform, keep)
    if not stat.S_ISREG(os.stat(ref.path).st_mode):
        named = ", ".join("/" + k.rstrip("/") for k in keep)
        raise CustomopsError(f"--image {ref}: the model repository baked into the image ({named}) cannot be read from "
                             "a stream read once: give the image as a file, or the repository as a directory")
    return read_archive_stream(ref, opened.cache, opened.platform, keep)
