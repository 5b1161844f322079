"""The facts of the target system that the dynamic linker's search depends on.

A target is a filesystem root ("/" when checking the machine customops runs on, or a directory
holding a container's unpacked filesystem) plus what its ld.so was built with: the default system
directories, the hwcaps subdirectories it tries inside every search directory, and the values of
$LIB and $PLATFORM. For the live system these are read from the running loader itself
(`ld.so --list-diagnostics`, and one `LD_DEBUG=libs` dry run for the exact subdirectory list); for a
container root they are derived from its files, and the target says which facts were assumed. The machine
and ELF class are those of the target's own programs (elf/dl-cache.c matches ld.so.cache entries by them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from customops import chroot, safeio
from customops.elf.constants import EM_AARCH64, EM_X86_64
from customops.errors import InputError
from customops.linker.ldconf import read_conf

if TYPE_CHECKING:  # what reads a root's files is imported when one is read: launch's cached start reads none
    from customops.linker.ldcache import LdCache


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
    machine: int = EM_X86_64  # e_machine of the target's own programs (machine_of), what ld.so.cache entries need
    elf_class: int = 64  # their ELF class, in bits

    def with_mounts(self, mounts: tuple[tuple[str, str], ...]) -> LinkerTarget:
        from dataclasses import replace

        return replace(self, mounts=tuple(sorted(mounts, key=lambda m: -len(m[0]))))

    @property
    def is_live(self) -> bool:
        return self.root == "/"

    # -- paths inside the target -------------------------------------------------------------
    def host_path(self, path: str) -> str | None:
        """Where a target path lies on this machine, resolved inside the target (chroot semantics, mounts
        included); None if absent."""
        if self.is_live and not self.mounts:
            return path if os.path.exists(path) else None  # the kernel resolves it where it runs
        found = chroot.resolve(self.root, self.mounts, path)
        return None if found is None else found[1]

    def resolve(self, path: str) -> str | None:
        """The real path inside the target (symlinks resolved inside the root and mounts), or None."""
        if self.is_live and not self.mounts:
            try:
                return os.path.realpath(path, strict=True)
            except (OSError, ValueError):
                return None
        found = chroot.resolve(self.root, self.mounts, path)
        return None if found is None else found[0]


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
        system_dirs = _default_system_dirs("/", f"{os.uname().machine}-linux-gnu")
        assumptions.append("system directories assumed from the filesystem layout (no ld.so --list-diagnostics)")
    if subdirs is None:
        hw = _first(r'dl_hwcaps_subdirs="([^"]*)"', diag)
        subdirs = tuple(f"glibc-hwcaps/{s}" for s in hw.split(":") if s) if hw else ()
        assumptions.append("legacy hwcaps subdirectories not probed")
    lib_token = _lib_token(system_dirs)
    machine, elf_class = machine_of("/") or _host_machine()
    return LinkerTarget(
        root="/",
        system_dirs=system_dirs,
        search_subdirs=subdirs,
        lib_token=lib_token,
        platform=platform or os.uname().machine,
        cache=_read_cache("/", "/etc/ld.so.cache"),
        conf_dirs=(),
        assumptions=tuple(assumptions),
        machine=machine,
        elf_class=elf_class,
    )


def target_for_root(root: str) -> LinkerTarget:
    """A container filesystem unpacked under `root`; nothing in it is executed."""
    if not os.path.isdir(root):
        raise InputError(root, "container root is not a directory")
    root = os.path.abspath(root)
    if root == "/":
        return live_target()
    machine, elf_class = machine_of(root) or _host_machine()
    name, triplet = _names(machine)
    system_dirs = _default_system_dirs(root, triplet)
    cache_ = _read_cache(root, "/etc/ld.so.cache")
    return LinkerTarget(
        root=root,
        system_dirs=system_dirs,
        search_subdirs=(),
        lib_token=_lib_token(system_dirs),
        platform=name,
        cache=cache_,
        conf_dirs=() if cache_ else read_conf(root),
        assumptions=(
            "glibc-hwcaps subdirectories are not searched: they depend on the CPU the container runs on",
            "$PLATFORM assumed to be the machine name",
        ),
        machine=machine,
        elf_class=elf_class,
    )


# The programs whose ELF header says what machine a root is for: the server, else the shell every image has
MACHINE_WITNESSES = ("/opt/tritonserver/bin/tritonserver", "/bin/sh")


def machine_of(root: str) -> tuple[int, int] | None:
    """(e_machine, ELF class in bits) of the root's own programs, read from their ELF header; None where
    none of MACHINE_WITNESSES is an ELF file inside the root."""
    from customops.elf.header import ElfHeaderError, read_header

    for path in MACHINE_WITNESSES:
        found = chroot.resolve(root, (), path)
        if found is None:
            continue
        try:
            fd = safeio.open_regular(found[1])
        except InputError:
            continue
        try:
            header = read_header(os.read(fd, 64), found[1])
        except (OSError, ElfHeaderError):
            continue
        finally:
            os.close(fd)
        return header.machine, header.bits
    return None


def _host_machine() -> tuple[int, int]:
    """This machine's (e_machine, class), where the root has nothing to read it from (a profile's skeleton keeps
    only library directories)."""
    return {"aarch64": (EM_AARCH64, 64)}.get(os.uname().machine, (EM_X86_64, 64))


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    import subprocess  # only a live target runs anything; a container root is read, not run (~8 ms to import)

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


MACHINE_NAMES = {EM_X86_64: "x86_64", EM_AARCH64: "aarch64"}  # e_machine -> uname's name (also $PLATFORM)


def _names(machine: int) -> tuple[str, str]:
    """The uname name and the Debian multiarch triplet of a target's machine (this machine's for one whose
    name is not known here)."""
    name = MACHINE_NAMES.get(machine, os.uname().machine)
    return name, f"{name}-linux-gnu"


def _default_system_dirs(root: str, triplet: str) -> tuple[str, ...]:
    """Debian/Ubuntu multiarch (the layout of every Triton image) or the Red Hat lib64 layout."""
    base = root.rstrip("/")
    if os.path.isdir(f"{base}/usr/lib/{triplet}"):
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib")
    return ("/lib64", "/usr/lib64")


def _lib_token(system_dirs: tuple[str, ...]) -> str:
    first = system_dirs[0] if system_dirs else "/lib"
    return first[len("/"):] if first.startswith("/lib") else "lib"


def _read_cache(root: str, path: str) -> LdCache | None:
    """The root's ld.so.cache (a symlink is followed inside the root); None if it has none."""
    from customops.linker.ldcache import parse_ld_cache

    found = chroot.resolve(root, (), path)
    if found is None:
        return None
    host = found[1]
    return parse_ld_cache(safeio.read_bytes(host, safeio.LD_CACHE_LIMIT), host)
