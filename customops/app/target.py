"""Which container a check runs against: a container root, a profile, a release's built-in facts, or, when
none is named and this machine is no Triton container, the profile the repository keeps for CI."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from customops import chroot
from customops.app.shown import shown
from customops.errors import CustomopsError, InputError, printable
from customops.image.reference import DEFAULT_PLATFORM
from customops.triton.container import Container, from_release, from_root, read_profile
from customops.triton.manifest import Manifest, checkout_root, discover
from customops.triton.serverargs import DEFAULT_BACKEND_DIRECTORY

if TYPE_CHECKING:
    from customops.elf.cache import ElfReader
    from customops.image.layout import Image
    from customops.image.opened import Opened

PROFILE_NAME = "customops-profile.json"
TRITON_HOME = "/opt/tritonserver"  # the NGC images' Triton: its presence means "checking from inside"
NO_CONTAINER = ("no container to check against: pass --container-root DIR, --profile FILE or --triton-release "
                "YY.MM, or run inside the Triton image")


@dataclass(frozen=True)
class ContainerChoice:
    """What the options name; at most one of root, profile and release (the parser makes them exclusive)."""

    root: str | None = None
    profile: str | None = None
    release: str | None = None
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY
    image: str | None = None  # --image REF
    platform: str = DEFAULT_PLATFORM  # --platform: of an image's multi-platform index

    @property
    def named(self) -> bool:
        return bool(self.root or self.profile or self.release or self.image)

    @property
    def discovers(self) -> bool:
        """Nothing named and no Triton here: the repository's own profile is looked for."""
        return not self.named and not os.path.isdir(TRITON_HOME)


def root_warnings(choice: ContainerChoice) -> list[str]:
    """A --container-root directory without opt/tritonserver is most likely the wrong one (the directory above the
    unpacked root, an empty one): said before the findings it causes (every backend missing, no loads modelled).
    Not of `/`: this machine, named as such."""
    home = TRITON_HOME.lstrip("/")
    root = choice.root
    if root and os.path.abspath(root) != "/" and os.path.isdir(root) and not os.path.lexists(os.path.join(root, home)):
        return [f"--container-root {shown(root)} has no {home}: is it the container's unpacked root?"]
    return []


def profile_for(choice: ContainerChoice, manifest: Manifest, repositories: list[str]) -> tuple[str | None, list[str]]:
    """The profile the check reads (the one named, else the one beside the repository when discovering), and
    the note that says so."""
    if choice.discovers:
        profile = beside_repository(manifest, repositories)
        if not profile:
            raise CustomopsError(NO_CONTAINER)
        return profile, [f"using the profile {shown(profile)} (no container root given and no {TRITON_HOME} here)"]
    return choice.profile, [f"using the profile {shown(choice.profile)}"] if choice.profile else []


def read_container(choice: ContainerChoice, profile: str | None, reader: ElfReader,
                   cache_dir: str | os.PathLike[str] | None) -> Container:
    """The container: a profile's (its skeleton kept in `cache_dir`; None: a temporary one), a release's facts,
    else the root's files (`/` when none is named: this machine is the container)."""
    if profile:
        return read_profile(profile, cache_dir)
    if choice.release:
        return from_release(choice.release)
    if choice.image:
        return image_container(choice.image, choice.backend_directory, reader, cache_dir, choice.platform)
    return from_root(choice.root or "/", choice.backend_directory, reader)


_OPENED: dict[tuple[str, str | None, str], Opened] = {}  # per run: a pipe can be read once


def image_root(text: str, cache_dir: str | os.PathLike[str] | None, platform: str = DEFAULT_PLATFORM,
               repositories: bool = False) -> tuple[Image, Path]:
    """The image `text` names and its root in customops' cache (one of its own that goes at exit with --no-cache),
    with the model repositories its command line names where `repositories` asks; read once per run."""
    import tempfile

    from customops import cleanup
    from customops.cachedir import trusted_root
    from customops.image.opened import open_image, root_of
    from customops.image.reference import parse

    key = (text, None if cache_dir is None else os.fspath(cache_dir), platform)
    if key not in _OPENED:
        cache = trusted_root(os.fspath(cache_dir)) if cache_dir is not None else None
        if cache is None:  # --no-cache: a directory of its own, removed however the run ends
            cache = Path(tempfile.mkdtemp(prefix="customops-image-"))
            cleanup.register(str(cache))
        _OPENED[key] = open_image(parse(text), cache / "images", platform)
    _OPENED[key], root = root_of(_OPENED[key], repositories)
    return _OPENED[key].image, root


def image_container(text: str, backend_directory: str, reader: ElfReader,
                    cache_dir: str | os.PathLike[str] | None, platform: str = DEFAULT_PLATFORM) -> Container:
    """The container an image is: its layers applied into a root in customops' cache, named by the image and its
    configuration's digest, with its Env and the server command line its Entrypoint and Cmd give."""
    from customops.image.entrypoint import effect

    image, root = image_root(text, cache_dir, platform)
    container = from_root(str(root), backend_directory, reader)
    args = image.server_args
    entry = image.settings.get("Entrypoint")
    started = effect(str(root), [a for a in entry if isinstance(a, str)] if isinstance(entry, list) else [],
                     image.environment) if args is not None else None  # what its script does, where it starts it
    return replace(container, image=f"{image.reference} ({image.config_digest[:19]})",
                   environment=tuple(sorted((started.environment if started else image.environment).items())),
                   server_args=args if args is not None else container.server_args,
                   notes=tuple(started.notes) if started else (), working_directory=image.working_directory)


def baked_repositories(text: str, cache_dir: str | os.PathLike[str] | None,
                       platform: str = DEFAULT_PLATFORM) -> list[str]:
    """The model repositories inside the image that its command line names (`--model-repository=/models`), as
    directories of its root in the cache (resolved inside the root: a link there never leads out of it); a usage
    error when there is none."""
    image, root = image_root(text, cache_dir, platform, repositories=True)
    found = [resolved[1] for path in image.repositories
             if (resolved := chroot.resolve(str(root), (), "/" + path)) and os.path.isdir(resolved[1])]
    if not found:
        named = ", ".join("/" + p for p in image.repositories) or "none"
        raise CustomopsError(f"--image {text}: no model repository given, and the image has none its command line "
                             f"names (--model-repository: {named}); name one, or give the server's command line "
                             "after --")
    return found


def beside_repository(manifest: Manifest, repositories: list[str]) -> str | None:
    """The manifest's [check] profile, else customops-profile.json next to the manifest, or in a repository
    or a directory above it up to its checkout's root (one that is a symbolic link out of that checkout is
    refused, as a manifest is: customops.triton.manifest.discover)."""
    if manifest.profile:
        real = os.path.realpath(manifest.profile)
        top = os.path.realpath(checkout_root(manifest.directory or repositories[0]))
        if not real.startswith(top.rstrip("/") + "/"):  # `profile = "/etc/..."` in a pull request's manifest
            raise InputError(str(manifest.profile), f"the manifest's [check] profile lies outside the checkout "
                             f"(at {printable(real)}), not read (pass --profile to use a profile kept elsewhere)")
        return str(manifest.profile)
    return discover(([manifest.directory] if manifest.directory else []) + repositories, PROFILE_NAME,
                    "a profile", "--profile")


def discovered_profile(choice: ContainerChoice, repositories: list[str]) -> str | None:
    """The profile file discovery finds above the repositories when no container is named (for a cache key:
    a change to it is outside the repositories' fingerprint)."""
    return None if choice.named else discover(repositories, PROFILE_NAME, "a profile", "--profile")
