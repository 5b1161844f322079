"""An image's layers applied as the runtimes apply them, into a root in customops' cache that the check reads like
an unpacked one: a later layer replaces an earlier one's file (a directory's contents with it when a file takes
its place), a whiteout (`.wh.NAME`) removes NAME and what is below it, an opaque directory (`.wh..wh..opq`) hides
everything lower layers put in it, a hard link names what its target is at that point. Only the contents the
layers kept (customops.image.layers) are there, hard-linked from the layers' directories; everything is created
below the root as plain directories and files first and the image's symbolic links last, so nothing is ever
written through a link (one the image holds may point anywhere: chroot.resolve reads it inside the root)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from customops.image.layers import FILES, INDEX, Entry, kept_name, read_layer
from customops.image.layout import Image

COMPLETE = "complete"


def materialize(image: Image, cache: Path, repositories: bool = True) -> Path:
    """The image's root in `cache` (built unless an earlier check built it): its layers read as needed, with the
    model repositories its command line names (unless `repositories` is False: a daemon's stream, whose layers
    passed before its configuration said which)."""
    keep = tuple(f"{path}/" for path in image.repositories) if repositories else ()
    root_dir = cache / "roots" / kept_name(image.config_digest.split(":", 1)[1], keep)
    if (root_dir / COMPLETE).is_file():
        return root_dir / "root"
    (cache / "layers").mkdir(parents=True, exist_ok=True, mode=0o700)
    layer_dirs = [read_layer(layer, image.reference, cache / "layers", keep) for layer in image.layers]
    merged = merge(layer_dirs)
    staging = cache / "roots" / f".{root_dir.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "root").mkdir(parents=True, mode=0o755)
    build(staging / "root", merged)
    (staging / COMPLETE).write_text(image.reference + "\n")
    try:
        staging.rename(root_dir)
    except OSError:  # another check built it first
        shutil.rmtree(staging, ignore_errors=True)
    return root_dir / "root"


def merge(layer_dirs: list[Path]) -> dict[str, tuple[Entry, Path]]:
    """Every path of the image after its last layer: (its entry, the layer directory holding its content)."""
    merged: dict[str, tuple[Entry, Path]] = {}
    for layer_dir in layer_dirs:
        entries = [Entry(**e) for e in json.loads((layer_dir / INDEX).read_text())]
        for entry in entries:  # a layer's whiteouts and opaque directories hide what the layers below it put
            if entry.kind == "opaque":
                _remove_below(merged, entry.path)
            elif entry.kind == "whiteout":
                merged.pop(entry.path, None)
                _remove_below(merged, entry.path)
        for entry in entries:
            if entry.kind in ("opaque", "whiteout"):
                continue
            earlier = merged.get(entry.path)
            if entry.kind != "dir" and earlier is not None and earlier[0].kind == "dir":
                _remove_below(merged, entry.path)  # a file, a link in a directory's place: its contents go
            if entry.kind == "hardlink":
                target = merged.get(entry.link)
                if target is None or target[0].kind != "file":
                    continue
                held = target[0].link or entry.link  # where the content lies in its layer's directory
                entry, layer_dir_of = Entry(entry.path, "file", target[0].mode, target[0].size,
                                            kept=target[0].kept, link=held), target[1]
                merged[entry.path] = (entry, layer_dir_of)
                continue
            merged[entry.path] = (entry, layer_dir)
    return merged


def _remove_below(merged: dict[str, tuple[Entry, Path]], directory: str) -> None:
    prefix = directory.rstrip("/") + "/"
    for path in [p for p in merged if p.startswith(prefix)]:
        del merged[path]


def build(root: Path, merged: dict[str, tuple[Entry, Path]]) -> None:
    """Directories, then the files kept (hard links into the layers' directories), then the symbolic links;
    a path that cannot be made (its parent is a file or a link in the image) is left out."""
    ordered = sorted(merged.items())
    for path, (entry, _) in ordered:
        if entry.kind == "dir":
            _directory(root, path, entry.mode)
    for path, (entry, layer_dir) in ordered:
        if entry.kind == "file" and entry.kept:
            source = layer_dir / FILES / (entry.link if entry.link else path)
            dest = root / path
            if not _directory(root, os.path.dirname(path), 0o755) or os.path.lexists(dest) or not source.is_file():
                continue
            try:
                os.link(source, dest)
            except OSError:
                shutil.copyfile(source, dest, follow_symlinks=False)
                os.chmod(dest, 0o755 if entry.mode & 0o111 else 0o644)
    for path, (entry, _) in ordered:
        if entry.kind == "symlink":
            dest = root / path
            if _directory(root, os.path.dirname(path), 0o755) and not os.path.lexists(dest):
                os.symlink(entry.link, dest)


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
