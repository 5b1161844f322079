"""An image's layers applied as the runtimes apply them, into a root in customops' cache that the check reads like
an unpacked one: a later layer replaces an earlier one's file (a directory's contents with it when a file takes
its place), a whiteout (`.wh.NAME`) removes NAME and what is below it, an opaque directory (`.wh..wh..opq`) hides
everything lower layers put in it, a hard link names what its target is at that point. Only the contents the
layers kept (customops.image.layers) are there, hard-linked from the layers' directories; everything is created
below the root as plain directories and files first and the image's symbolic links last, so nothing is ever
written through a link (one the image holds may point anywhere: chroot.resolve reads it inside the root)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from customops.image.layers import FILES, INDEX, Entry, kept_name, read_layer
from customops.image.layout import Image

COMPLETE = "complete"
UNMADE = (OSError, ValueError)  # a name too long, a NUL in a link's target: left out, as the image cannot have it


def repository_keep(image: Image) -> tuple[str, ...]:
    """What a layer keeps beyond the defaults for the model repositories the image's command line names."""
    return tuple(f"{path}/" for path in image.repositories)


def materialize(image: Image, cache: Path, keep: tuple[str, ...] = ()) -> Path:
    """The image's root in `cache` (built unless an earlier check built it): its layers read as needed, each
    keeping `keep` (repository_keep, or nothing: a stream whose layers passed before its configuration said
    which repositories it has)."""
    root_dir = cache / "roots" / kept_name(image.config_digest.split(":", 1)[1], keep)
    if (root_dir / COMPLETE).is_file():
        return root_dir / "root"
    (cache / "layers").mkdir(parents=True, exist_ok=True, mode=0o700)
    layer_dirs = [read_layer(layer, image.reference, cache / "layers", keep) for layer in image.layers]
    merged = merge(layer_dirs)
    staging = cache / "roots" / f".{root_dir.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (staging / "root").mkdir(parents=True, mode=0o755)
        build(staging / "root", merged)
        (staging / COMPLETE).write_text(image.reference + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        staging.rename(root_dir)
    except OSError:  # another check built it first
        shutil.rmtree(staging, ignore_errors=True)
    return root_dir / "root"


def merge(layer_dirs: list[Path]) -> dict[str, tuple[Entry, Path]]:
    """Every path of the image after its last layer: (its entry, the layer directory holding its content). A
    member's parent directories are resolved through the links the layers below (and this one, before it) made,
    inside the image's root, as extracting a layer into a root does: a file put under a linked directory lands
    in the directory the link names."""
    merged: dict[str, tuple[Entry, Path]] = {}
    for layer_dir in layer_dirs:
        entries = [Entry(**e) for e in json.loads((layer_dir / INDEX).read_text())]
        for entry in entries:  # a layer's whiteouts and opaque directories hide what the layers below it put
            if entry.kind == "opaque":
                _remove_below(merged, _through_links(entry.path, merged, whole=True))
            elif entry.kind == "whiteout":
                path = _through_links(entry.path, merged)
                merged.pop(path, None)
                _remove_below(merged, path)
        for entry in entries:
            if entry.kind in ("opaque", "whiteout"):
                continue
            path = _through_links(entry.path, merged)
            earlier = merged.get(path)
            if entry.kind == "dir" and earlier is not None and earlier[0].kind == "dir":
                continue  # a directory again: what is in it stays
            if earlier is not None and earlier[0].kind == "dir":
                _remove_below(merged, path)  # a file, a link in a directory's place: its contents go
            if entry.kind == "hardlink":
                target = merged.get(_through_links(entry.link, merged))  # a link to a link: that link
                if target is None or target[0].kind not in ("file", "symlink"):
                    merged.pop(path, None)
                    continue
                if target[0].kind == "symlink":  # a hard link to a link is that link
                    merged[path] = (Entry(path, "symlink", target[0].mode, link=target[0].link), target[1])
                    continue
                held = target[0].link or target[0].path  # where the content lies in its layer's directory
                merged[path] = (Entry(path, "file", target[0].mode, target[0].size, kept=target[0].kept,
                                      link=held), target[1])
                continue
            content = entry.link or entry.path if entry.kind == "file" else entry.link
            merged[path] = (Entry(path, entry.kind, entry.mode, entry.size, link=content, kept=entry.kept), layer_dir)
    return merged


def _through_links(path: str, merged: dict[str, tuple[Entry, Path]], whole: bool = False) -> str:
    """`path` with its parent directories (and itself, with `whole`) resolved through the image's symbolic links,
    inside its root (`..` stops at the root, an absolute target starts from it); 40 links at most, as Linux."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        if part == ".":
            continue
        candidate = "/".join((*done, part))
        found = merged.get(candidate)
        if found is not None and found[0].kind == "symlink" and (parts or whole) and hops < 40:
            hops += 1
            link = found[0].link
            parts = [p for p in link.split("/") if p] + parts
            if link.startswith("/"):
                done = []
            continue
        done.append(part)
    return "/".join(done)


def _remove_below(merged: dict[str, tuple[Entry, Path]], directory: str) -> None:
    if not directory:  # the root itself: everything below it
        merged.clear()
        return
    prefix = directory.rstrip("/") + "/"
    for path in [p for p in merged if p.startswith(prefix)]:
        del merged[path]


def build(root: Path, merged: dict[str, tuple[Entry, Path]]) -> None:
    """Directories, then the files kept (hard links into the layers' directories), then the symbolic links;
    a path that cannot be made (its parent is a file or a link in the image, a name the file system refuses)
    is left out."""
    ordered = sorted(merged.items())
    for path, (entry, _) in ordered:
        if entry.kind == "dir":
            with contextlib.suppress(*UNMADE):
                _directory(root, path, entry.mode)
    for path, (entry, layer_dir) in ordered:
        if entry.kind == "file" and entry.kept:
            with contextlib.suppress(*UNMADE):
                _file(root, path, entry, layer_dir)
    for path, (entry, _) in ordered:
        if entry.kind == "symlink":
            with contextlib.suppress(*UNMADE):
                _symlink(root, path, entry.link)


def _file(root: Path, path: str, entry: Entry, layer_dir: Path) -> None:
    source = layer_dir / FILES / (entry.link or path)
    dest = root / path
    if not _directory(root, os.path.dirname(path), 0o755) or os.path.lexists(dest) or not source.is_file():
        return
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest, follow_symlinks=False)
        os.chmod(dest, 0o755 if entry.mode & 0o111 else 0o644)


def _symlink(root: Path, path: str, target: str) -> None:
    dest = root / path
    if target and _directory(root, os.path.dirname(path), 0o755) and not os.path.lexists(dest):
        os.symlink(target, dest)


def _directory(root: Path, path: str, mode: int) -> bool:
    """root/path as a directory made of plain directories only (none of it a link); whether it is one."""
    current = root
    for part in [p for p in path.split("/") if p]:
        current = current / part
        if os.path.islink(current):
            return False
        if not current.exists():
            os.mkdir(current, 0o755)
        elif not current.is_dir():
            return False
    if path:
        os.chmod(current, (mode & 0o777) | 0o700)
    return True
