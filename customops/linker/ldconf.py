"""A container root's /etc/ld.so.conf and the files its `include` globs name, read as ldconfig reads them
(ld.so itself reads only the cache; these matter where a root has none): every path resolved inside the
root, each file read once, includes followed depth first in the order written.

A root is untrusted, so the reading is bounded as ldconfig effectively is: a glob through directory
symlinks that lead back up (8 links, 7 levels: millions of names for one directory) expands each directory
once, by its (device, inode); includes are followed with an explicit stack, not recursion (a chain of 3,000
files); and the files read, the include depth, the paths one glob yields, the directories listed (each is
searched for every library) and the time taken are capped, with
a one-line error naming the root's ld.so.conf beyond the caps (exit 2)."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import time
from collections.abc import Iterator

from customops import chroot, safeio
from customops.errors import InputError

CONF = "/etc/ld.so.conf"
MAX_FILES = 1000  # files read (a real image has tens)
MAX_DEPTH = 100  # includes within includes
MAX_MATCHES = 10_000  # paths one glob yields
MAX_DIRS = 10_000  # directories listed (each is searched for every library: a real image lists tens)
MAX_SECONDS = 10.0


def read_conf(root: str) -> tuple[str, ...]:
    """The directories the root's ld.so.conf lists, in ldconfig's order."""
    reading = _Reading(root)
    dirs: list[str] = []
    stack: list[tuple[str | None, Iterator[str]]] = [(None, iter([CONF]))]  # (file's directory, lines) or files
    while stack:
        directory, items = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
        elif directory is None:  # a file to read
            opened = reading.open(item, depth=sum(d is not None for d, _ in stack))
            if opened is not None:
                stack.append(opened)
        else:
            line = item.split("#", 1)[0].strip()
            if line.startswith("include "):
                pattern = line.split(None, 1)[1].strip()
                stack.append((None, iter(reading.glob(pattern if pattern.startswith("/") else
                                                      f"{directory}/{pattern}"))))
            elif line:
                dirs.append(line.rstrip("/"))
                if len(dirs) > MAX_DIRS:
                    raise reading.refuse(f"it lists more than {MAX_DIRS} directories")
    return tuple(dirs)


class _Reading:
    """The state of one reading: what was read, and the bounds."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: set[object] = set()
        self.deadline = time.monotonic() + MAX_SECONDS

    def refuse(self, reason: str) -> InputError:
        return InputError(os.path.join(self.root, CONF.lstrip("/")), f"{reason}: not read further (ldconfig's "
                                                                      "bounds; a real image stays far below)")

    def open(self, path: str, depth: int) -> tuple[str, Iterator[str]] | None:
        """(the file's directory, its lines), None for a path that is missing, a directory or read before."""
        found = chroot.resolve(self.root, (), path)
        if found is None:
            return None
        identity = _identity(found[1]) or found[0]
        if identity in self.seen or os.path.isdir(found[1]):
            return None
        self.seen.add(identity)
        if len(self.seen) > MAX_FILES:
            raise self.refuse(f"its includes name more than {MAX_FILES} files")
        if depth >= MAX_DEPTH:
            raise self.refuse(f"its includes nest more than {MAX_DEPTH} deep")
        self.in_time()
        text = safeio.read_text(found[1], safeio.SMALL_TEXT_LIMIT, errors="replace")
        return os.path.dirname(found[0]), iter(text.splitlines())

    def in_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise self.refuse(f"reading its includes takes more than {MAX_SECONDS:g} s")

    def glob(self, pattern: str) -> list[str]:
        """The container paths a glob pattern matches, expanded one component at a time inside the root (as
        glob(3) would in the container: `..` stops at its `/`, symlinks resolve inside it), each directory a
        wildcard reaches expanded once."""
        matches = ["/"]
        for part in (p for p in pattern.split("/") if p not in ("", ".")):
            expanded: list[str] = []
            reached: set[object] = set()
            for base in matches:
                self.in_time()
                if part == ".." or not any(c in part for c in "*?["):
                    expanded.append(posixpath.normpath(posixpath.join(base, part)) if part == ".."
                                    else posixpath.join(base, part))
                    continue
                found = chroot.resolve(self.root, (), base)
                if found is None or (_identity(found[1]) or base) in reached:
                    continue
                reached.add(_identity(found[1]) or base)
                try:
                    names = sorted(os.listdir(found[1]))
                except OSError:
                    names = []
                expanded += [posixpath.join(base, n) for n in names
                             if fnmatch.fnmatchcase(n, part) and (part.startswith(".") or not n.startswith("."))]
                if len(expanded) > MAX_MATCHES:
                    raise self.refuse(f"an include glob ({pattern}) matches more than {MAX_MATCHES} paths")
            matches = expanded
        return [m for m in matches if chroot.resolve(self.root, (), m) is not None]


def _identity(host_path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(host_path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
