"""The facts of the target system that the dynamic linker's search depends on.

A target is a filesystem root ("/" when checking the machine customops runs on, or a directory
holding a container's unpacked filesystem) plus what its ld.so was built with: the default system
directories, the hwcaps subdirectories it tries inside every search directory, and the values of
$LIB and $PLATFORM. For the live system these are read from the running loader itself
(`ld.so --list-diagnostics`, and one `LD_DEBUG=libs` dry run for the exact subdirectory list), as
linker.md §7.2 recommends; for a container root they are derived from its files, and the target
says which facts were assumed.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from functools import cache

from customops.errors import InputError
from customops.scanners.ldcache import LdCache, parse_ld_cache

MAX_SYMLINKS = 40  # Linux's limit before ELOOP


@dataclass(frozen=True)
class LinkerTarget:
    root: str
    system_dirs: tuple[str, ...]
    search_subdirs: tuple[str, ...]  # tried inside every search directory, before the directory itself
    lib_token: str  # $LIB
    platform: str  # $PLATFORM
    cache: LdCache | None
    conf_dirs: tuple[str, ...] = ()  # from ld.so.conf, used only when there is no cache
    assumptions: tuple[str, ...] = field(default=())
    mounts: tuple[tuple[str, str], ...] = ()  # (container directory, host directory), like docker -v

    def with_mounts(self, mounts: tuple[tuple[str, str], ...]) -> LinkerTarget:
        from dataclasses import replace

        return replace(self, mounts=tuple(sorted(mounts, key=lambda m: -len(m[0]))))

    def _mounted(self, path: str) -> str | None:
        """The host path of a target path under a mount (the longest container prefix wins)."""
        for container_dir, host_dir in self.mounts:
            if path == container_dir or path.startswith(container_dir.rstrip("/") + "/"):
                return host_dir.rstrip("/") + path[len(container_dir.rstrip("/")):]
        return None

    @property
    def is_live(self) -> bool:
        return self.root == "/"

    # -- paths inside the target -------------------------------------------------------------
    def host_path(self, path: str) -> str | None:
        """Where a target path lies on this machine, following symlinks inside the root; None if absent."""
        mounted = self._mounted(path)
        if mounted is not None:
            return mounted if os.path.exists(mounted) else None
        if self.is_live:
            return path if os.path.exists(path) else None
        resolved = self.resolve(path)
        return None if resolved is None else self.root.rstrip("/") + resolved

    def resolve(self, path: str) -> str | None:
        """The real path inside the target (symlinks resolved against the root), or None."""
        mounted = self._mounted(path)
        if mounted is not None:
            return path if os.path.exists(mounted) else None
        if self.is_live:
            try:
                return os.path.realpath(path, strict=True)
            except OSError:
                return None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        done: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = self.root.rstrip("/") + "/" + "/".join([*done, part])
            if os.path.islink(candidate):
                hops += 1
                if hops > MAX_SYMLINKS:
                    return None
                link = os.readlink(candidate)
                if link.startswith("/"):
                    done = []
                parts = [p for p in link.split("/") if p not in ("", ".")] + parts
                continue
            if not os.path.lexists(candidate):
                return None
            done.append(part)
        return "/" + "/".join(done)


def live_target() -> LinkerTarget:
    """The machine customops runs on, calibrated from its own ld.so."""
    return _live_target()


@cache
def _live_target() -> LinkerTarget:
    interp = _live_interpreter()
    diag = _run([interp, "--list-diagnostics"]) if interp else ""
    system_dirs = tuple(d.rstrip("/") or "/" for d in re.findall(r'path\.system_dirs\[0x[0-9a-f]+\]="([^"]*)"', diag))
    platform = _first(r'dl_platform="([^"]*)"', diag)
    assumptions = []
    subdirs = _probe_subdirs(interp) if interp else None
    if not system_dirs:
        system_dirs = _default_system_dirs("/")
        assumptions.append("system directories assumed from the filesystem layout (no ld.so --list-diagnostics)")
    if subdirs is None:
        hw = _first(r'dl_hwcaps_subdirs="([^"]*)"', diag)
        subdirs = tuple(f"glibc-hwcaps/{s}" for s in hw.split(":") if s) if hw else ()
        assumptions.append("legacy hwcaps subdirectories not probed")
    lib_token = _lib_token(system_dirs)
    return LinkerTarget(
        root="/",
        system_dirs=system_dirs,
        search_subdirs=subdirs,
        lib_token=lib_token,
        platform=platform or os.uname().machine,
        cache=_read_cache("/", "/etc/ld.so.cache"),
        conf_dirs=(),
        assumptions=tuple(assumptions),
    )


def target_for_root(root: str) -> LinkerTarget:
    """A container filesystem unpacked under `root`; nothing in it is executed."""
    if not os.path.isdir(root):
        raise InputError(root, "container root is not a directory")
    root = os.path.abspath(root)
    if root == "/":
        return live_target()
    system_dirs = _default_system_dirs(root)
    cache_ = _read_cache(root, "/etc/ld.so.cache")
    return LinkerTarget(
        root=root,
        system_dirs=system_dirs,
        search_subdirs=(),
        lib_token=_lib_token(system_dirs),
        platform=os.uname().machine,
        cache=cache_,
        conf_dirs=() if cache_ else _read_conf(root),
        assumptions=(
            "glibc-hwcaps subdirectories are not searched: they depend on the CPU the container runs on",
            "$PLATFORM assumed to be the machine name",
        ),
    )


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def _live_interpreter() -> str | None:
    for candidate in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux.so.2"):
        if os.path.exists(candidate):
            return candidate
    return None


def _probe_subdirs(interp: str) -> tuple[str, ...] | None:
    """The exact subdirectories ld.so tries in a search directory, from one dry run of its own search."""
    probe_dir = "/nonexistent-customops-probe"
    env = {"LD_DEBUG": "libs", "LD_LIBRARY_PATH": probe_dir, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    out = _run([interp, "--list", "/bin/true"], env=env)
    match = re.search(r"search path=(\S*)\s+\(LD_LIBRARY_PATH\)", out)
    if not match:
        return None
    subdirs = []
    for entry in match.group(1).split(":"):
        if entry.startswith(probe_dir + "/"):
            subdirs.append(entry[len(probe_dir) + 1:])
    return tuple(subdirs)


def _first(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else ""


def _default_system_dirs(root: str) -> tuple[str, ...]:
    """Debian/Ubuntu multiarch (the layout of every Triton image) or the Red Hat lib64 layout."""
    base = root.rstrip("/")
    machine = os.uname().machine
    triplet = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine, f"{machine}-linux-gnu")
    if os.path.isdir(f"{base}/usr/lib/{triplet}"):
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib")
    return ("/lib64", "/usr/lib64")


def _lib_token(system_dirs: tuple[str, ...]) -> str:
    first = system_dirs[0] if system_dirs else "/lib"
    return first[len("/"):] if first.startswith("/lib") else "lib"


def _read_cache(root: str, path: str) -> LdCache | None:
    host = root.rstrip("/") + path
    try:
        with open(host, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return parse_ld_cache(data, host)


def _read_conf(root: str) -> tuple[str, ...]:
    """ld.so.conf and its include globs; ld.so itself reads only the cache, ldconfig reads these."""
    import glob

    dirs: list[str] = []
    seen: set[str] = set()

    def read(path: str) -> None:
        host = root.rstrip("/") + path
        if host in seen:
            return
        seen.add(host)
        try:
            with open(host, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include "):
                pattern = line.split(None, 1)[1]
                if not pattern.startswith("/"):
                    pattern = os.path.dirname(path) + "/" + pattern
                for match in sorted(glob.glob(root.rstrip("/") + pattern)):
                    read(match[len(root.rstrip("/")):])
            elif line:
                dirs.append(line.rstrip("/"))

    read("/etc/ld.so.conf")
    return tuple(dirs)
