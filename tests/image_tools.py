"""What the image tests share: the fixture container and the example repository, the layers every form of the test
image is made of, a walk of a root to compare with umoci's, op libraries whose dependency only an image's
environment finds, a `docker` command of the tests' own (no daemon runs here), and customops run as a user runs
it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images
from fixtures.example import install

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"
LIBDIR = "usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fixture container's root, a copy of the example repository with its libraries)."""
    copy = tmp_path_factory.mktemp("example") / "model_repository"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("*.so"))
    return install(copy), copy


@pytest.fixture(scope="module")
def container(example: tuple[Path, Path]) -> Path:
    return example[0]


def changes(container: Path) -> list[list[images.Member]]:
    """Two layers over the fixture container's tree: a whiteout, an opaque directory, a hard link to a file of the
    layer below, a file where a directory was, a symbolic link replaced; then a layer that puts a whited-out file
    back with other content."""
    libc = (container / "lib/x86_64-linux-gnu/libc.so.6").resolve()
    second = [("whiteout", f"{LIBDIR}/libnvinfer.so.10"),
              ("dir", "opt/tritonserver/backends/tensorrt"), ("opaque", "opt/tritonserver/backends/tensorrt"),
              ("file", "opt/tritonserver/backends/tensorrt/README", b"emptied\n", 0o644),
              ("dir", "opt/extra"), ("hardlink", "opt/extra/libc-copy.so.6", "lib/x86_64-linux-gnu/libc.so.6"),
              ("file", "opt/tritonserver/include", b"a file where a directory was\n", 0o644),
              ("file", "opt/extra/run.sh", b"#!/bin/sh\nexec tritonserver \"$@\"\n", 0o755),
              ("file", "etc/ld.so.conf.d/extra.conf", b"/opt/extra\n", 0o644)]
    third = [("file", f"{LIBDIR}/libnvinfer.so.10", libc, 0o755)]  # back, as another file
    return [images.tree(container), second, third]


def walk(root: Path) -> dict[str, tuple[str, str | bytes]]:
    """Every path under root: ("dir", ""), ("symlink", target) or ("file", content)."""
    found: dict[str, tuple[str, str | bytes]] = {}
    for current, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(current) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("symlink", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir", "")
            elif path.is_file():
                found[key] = ("file", path.read_bytes())
    return found


def op_library_needing(root_tree: Path, work: Path) -> tuple[Path, Path]:
    """An ONNX Runtime op library needing libextra.so, which lies in /opt/extra/lib, a directory only the image's
    LD_LIBRARY_PATH names (no RUNPATH, not in ld.so.conf)."""
    extra = work / "libextra.so"
    source = work / "extra.c"
    source.write_text("int extra_value(void) { return 3; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(extra), str(source), "-Wl,-soname,libextra.so"], check=True)
    op = work / "libneeds_extra.so"
    source = work / "op.c"
    source.write_text("extern int extra_value(void);\nint (*const uses)(void) = extra_value;\n"
                      "void *RegisterCustomOps(void *o, const void *a) { (void)o; (void)a; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(op), str(source), f"-L{work}", "-lextra",
                    "-Wl,--no-as-needed"], check=True)
    return extra, op


def onnxruntime_repository(repo: Path, op: Path) -> Path:
    """A repository of one ONNX Runtime model, `m`, whose op library is `op` (at /models/m/ops/ when mounted)."""
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "ops").mkdir()
    shutil.copy(op, repo / "m" / "ops" / op.name)
    (repo / "m" / "config.pbtxt").write_text(
        f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "/models/m/ops/{op.name}" }}\n')
    return repo


def customops(*args: str, cwd: Path = ROOT, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """customops ARGS as a user runs it; `cache`: its default cache (for commands without --cache-dir)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"CUSTOMOPS_CACHE_DIR": str(cache)} if cache else {})}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def fake_daemon(bin_dir: Path, script: str) -> dict[str, str]:
    """A `docker` command of the test's own on PATH (no daemon runs here): what `docker save` does is `script`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "docker").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "docker").chmod(0o755)
    return {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def raw_layer(build) -> bytes:  # type: ignore[no-untyped-def]
    """A layer tar written by `build(archive)` (members of any kind the test makes)."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        build(archive)
    return out.getvalue()
