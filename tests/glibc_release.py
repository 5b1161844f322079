"""A real glibc of another release for the oracle: Debian's libc6 of a suite, extracted with mmdebstrap
(--variant=extract) into ~/.cache/customops-glibc/<suite>/ once and reused afterwards; without mmdebstrap or
a reachable mirror the test skips and says why. Its ld.so and libc replace a container root's copies, so
that the check reads that glibc's facts and the fixture loader (built against the host's older glibc) runs
under it in the chroot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CACHE = Path.home() / ".cache" / "customops-glibc"
MIRROR = "http://deb.debian.org/debian"
LIBDIR = "usr/lib/x86_64-linux-gnu"
LIBRARIES = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")  # one release's, together


def debian_libc(suite: str) -> Path:
    """The root holding `suite`'s libc6 (trixie: glibc 2.41)."""
    root = CACHE / suite
    if (root / LIBDIR / "libc.so.6").exists():
        return root
    if not shutil.which("mmdebstrap"):
        pytest.skip("needs mmdebstrap to fetch Debian's libc6 (apt-get install mmdebstrap)")
    partial = CACHE / f"{suite}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(["mmdebstrap", "--variant=extract", "--include=libc6", suite, str(partial), MIRROR],
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{MIRROR} did not answer in 10 minutes")
    if proc.returncode != 0 or not (partial / LIBDIR / "libc.so.6").exists():
        pytest.skip(f"no libc6 of Debian {suite} from {MIRROR}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    partial.rename(root)
    return root


def install(libc: Path, container: Path) -> None:
    """Replace the container root's ld.so and libc (and the libraries of the same release) with `libc`'s."""
    for name in LIBRARIES:
        shutil.copy(libc / LIBDIR / name, container / "lib/x86_64-linux-gnu" / name)
    shutil.copy(libc / LIBDIR / "ld-linux-x86-64.so.2", container / "lib64/ld-linux-x86-64.so.2")


def replace_glibc(container: Path, suite: str) -> str:
    """Give a container root (a copy whose files may be hard links to cached fixtures) `suite`'s glibc: each glibc
    file is unlinked, never written in place, then installed; the path of its libc.so.6 (to link against)."""
    libc = debian_libc(suite)
    for name in (*LIBRARIES, "ld-linux-x86-64.so.2"):
        for found in (container / "lib/x86_64-linux-gnu" / name, container / "lib64" / name):
            if found.is_file() and not found.is_symlink():
                found.unlink()
    install(libc, container)
    return str(container / "lib/x86_64-linux-gnu/libc.so.6")
