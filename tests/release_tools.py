"""customops as a release builds it: the sdist from a copy of the checkout (so that concurrent builds and edits do not
meet in its egg-info), the wheel from the unpacked sdist (as `python -m build` does), both by setuptools' PEP 517
backend; a fresh virtual environment to install into; and the example check to compare."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# what a checkout holds besides its sources: caches, build outputs, the environment
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", ".fixture-cache", ".fuzz-corpus", ".hypothesis", ".mypy_cache",
                                     ".ruff_cache", ".pytest_cache", "build", "dist", "*.egg-info", "__pycache__")


def run(*argv: str | Path, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kw)


def _builder(work: Path) -> str:
    """An interpreter with [build-system] requires: this one where it has them (no index needed), else a fresh
    environment that pip installs them into, as `python -m build` isolates a build (skipping without an index)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    requires = [Requirement(r) for r in declared]
    if all(_installed(r.name) in r.specifier for r in requires):
        return sys.executable
    python = work / "builder" / "bin" / "python"
    if python.exists():
        return str(python)
    fresh_venv(work / "builder")
    installed = run(python, "-m", "pip", "install", "-q", *map(str, requires))
    if installed.returncode != 0:
        pytest.skip(f"cannot install the build requirements {requires}: {installed.stderr.strip()[-300:]}")
    return str(python)


def _installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "0"


def _backend(hook: str, source: Path, out: Path) -> Path:
    """Call setuptools.build_meta's `hook` in `source`, writing into `out`; the built file."""
    out.mkdir(parents=True, exist_ok=True)
    code = f"import sys; from setuptools import build_meta; print(build_meta.{hook}(sys.argv[1]))"
    built = run(_builder(out.parent), "-c", code, out, cwd=source)
    assert built.returncode == 0, built.stderr[-3000:]
    return out / built.stdout.strip().splitlines()[-1]


def build_sdist(work: Path) -> Path:
    """The sdist of the checkout as it is now, built under `work`."""
    source = work / "checkout"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES, symlinks=True)
    return _backend("build_sdist", source, work / "dist")


def unpack(sdist: Path, dest: Path) -> Path:
    """The sdist's tree, unpacked under `dest`."""
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+ (PEP 706)
            archive.extractall(dest, filter="data")
        else:  # Debian 12's 3.11.2: the same refusals, for the members an sdist holds (files and directories)
            for member in archive.getmembers():
                name = Path(member.name)
                if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                    raise tarfile.TarError(f"refusing sdist member {member.name!r} ({member.type!r})")
                member.mode = (member.mode | 0o600) & 0o755 if member.isfile() else 0o755
            archive.extractall(dest)  # every member checked above
        top = archive.getnames()[0].split("/")[0]
    return dest / top


def build_wheel(work: Path) -> Path:
    """The wheel built from the sdist, under `work`."""
    return _backend("build_wheel", unpack(build_sdist(work), work / "sdist"), work / "wheels")


def fresh_venv(path: Path) -> Path:
    """A new virtual environment at `path` (with pip, without this one's packages); its bin directory."""
    made = run(sys.executable, "-m", "venv", path)
    assert made.returncode == 0, made.stderr
    return path / "bin"


def check_example(customops: list[str], example: tuple[Path, Path], cwd: Path, cache: Path, *options: str,
                  pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`customops check` of the example repository, with `options` (a --format), from `cwd` (reports show paths
    relative to it)."""
    repo, root = example
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache)}
    env.pop("PYTHONPATH", None)
    env.update({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    checked = run(*customops, "check", repo, "--container-root", root, *options, cwd=cwd, env=env)
    assert checked.stdout, checked.stderr
    return checked


def checkout_check(example: tuple[Path, Path], cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """What the checkout's own customops, in this interpreter, reports on the example (with its own cache)."""
    return check_example([sys.executable, "-m", "customops"], example, cwd, cwd / "checkout-cache", *options,
                         pythonpath=ROOT)


def findings(checked: subprocess.CompletedProcess[str]) -> tuple[int, list[dict]]:
    """The exit status and findings of a `--format json` check."""
    return checked.returncode, json.loads(checked.stdout)["findings"]
