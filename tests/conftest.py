"""Shared fixtures: the fixture-library tree (built once, cached by source hash) and the model."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from customops.scanners.elfcache import ElfReader  # noqa: E402
from customops.scanners.linker import Linker  # noqa: E402
from customops.scanners.target import live_target  # noqa: E402
from fixtures.build import build, toolchain_available  # noqa: E402


@pytest.fixture(scope="session")
def tree() -> Path:
    return build()


@pytest.fixture
def container(tree: Path, tmp_path: Path) -> Path:
    """A copy of the fixture container root that the test may change (the attack suites)."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    return root


@pytest.fixture(scope="session")
def loader(tree: Path) -> str:
    return str(tree / "bin" / "loader")


@pytest.fixture
def reader(tmp_path: Path) -> ElfReader:
    return ElfReader(cache_dir=tmp_path / "cache")


@pytest.fixture(scope="session")
def linker() -> Linker:
    return Linker(live_target(), ElfReader(use_cache=False))


def needs_toolchain(name: str):  # type: ignore[no-untyped-def]
    return pytest.mark.skipif(not toolchain_available(name), reason=f"{name} toolchain not installed")
