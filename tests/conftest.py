"""Shared fixtures: the fixture-library tree (built once, cached by source hash) and the model."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from customops.elf.cache import ElfReader  # noqa: E402
from customops.linker.process import Linker  # noqa: E402
from customops.linker.target import live_target  # noqa: E402
from fixtures.build import Lib, build, select, why_unavailable  # noqa: E402


@pytest.fixture(scope="session")
def tree() -> Path:
    return build()


@pytest.fixture
def container(tree: Path, tmp_path: Path) -> Path:
    """A copy of the fixture container root that the test may change (the attack suites)."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    return root


@pytest.fixture
def example(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the bundled example repository with its libraries installed, and the fixture container."""
    from fixtures.example import install

    repo = tmp_path / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repo, ignore=shutil.ignore_patterns("*.so"))
    return repo, install(repo)


@pytest.fixture(scope="session")
def loader(tree: Path) -> str:
    return str(tree / "bin" / "loader")


@pytest.fixture
def reader(tmp_path: Path) -> ElfReader:
    return ElfReader(cache_dir=tmp_path / "cache")


@pytest.fixture(scope="session")
def linker() -> Linker:
    return Linker(live_target(), ElfReader(use_cache=False))


# What to install when a toolchain cannot build here (fixtures.build leaves its libraries out of the tree).
TOOLCHAIN_PACKAGES = {"native": "gcc and g++", "m32": "gcc-multilib", "s390x": "binutils-s390x-linux-gnu",
                      "aarch64": "binutils-aarch64-linux-gnu"}


def needs_toolchain(name: str) -> pytest.MarkDecorator:
    """Skip when `name` (native | m32 | s390x | aarch64) cannot build and link here, as fixtures.build decides
    (`why_unavailable`: a tiny library really built and linked, not `gcc --version`); the fixture libraries it
    builds are then missing from the tree. Use as a decorator or in `pytest.param(..., marks=...)`."""
    why = why_unavailable(name)
    return pytest.mark.skipif(bool(why), reason=f"needs {TOOLCHAIN_PACKAGES[name]}: {why}")


def toolchains_of(out: str) -> list[str]:
    """The toolchains that the fixture library at tree path `out`, and what it links against, are built with."""
    return sorted({e.toolchain for e in select([out]) if isinstance(e, Lib)})


def needs_fixture(out: str) -> list[pytest.MarkDecorator]:
    """`needs_toolchain` for each non-native toolchain of `toolchains_of(out)`, for `pytest.param(marks=...)`."""
    return [needs_toolchain(t) for t in toolchains_of(out) if t != "native"]


# The suites `./scripts/test.sh --fast` leaves out (the edit loop; .ci/run runs everything). `oracle`: the verdicts
# a real runtime confirms at length (ld.so in a chroot or over thousands of libraries, the frameworks, the Triton
# core, published wheels); the linker's own rule-by-rule suites, which run the fixture loader in milliseconds, stay
# in. `slow`: builds, installs, clones, external validators, the attack suites and the CLI matrices (every
# route, every hostile input) that run the CLI hundreds of times. Measured (2026-12-06, 2 cores, idle): the fast
# lane 593 tests in 60 s (`pytest -n 2 -m "not oracle and not slow"`); the whole suite about 16 minutes.
ORACLE_SUITES = frozenset({
    "test_linker_real", "test_linker_depth", "test_check_real_frameworks", "test_probe_framework_versions",
    "test_triton_core", "test_triton_core_corpus", "test_published_torch_libraries",
    "test_published_tensorflow_libraries", "test_probe", "test_probe_batch", "test_torch_duplicate_registrations",
    "test_check_tensorrt_probe", "test_probe_tensorrt", "test_probe_tensorrt_real", "test_probe_tensorrt_published",
    "test_version_nodes", "test_linker_constructors", "test_protobuf_pools", "test_registrations_in_the_image",
    "test_probe_in_the_container", "test_tensorflow_unregistered_ops", "test_image", "test_image_streams",
    "test_launch_image",
})
SLOW_SUITES = frozenset({
    "test_attacks_probe", "test_attacks_cache", "test_attacks_round2", "test_attacks_profile", "test_hostile_cli",
    "test_attacks_output", "test_attacks_review", "test_attacks_paths", "test_attacks_image", "test_bad_input",
    "test_check_and_launch_agree", "test_launch_habits",
    "test_sarif_github_rules", "test_deployment_files", "test_documented_install", "test_sdist", "test_wheel_install",
    "test_oldest_dependencies", "test_fresh_clone", "test_fresh_machine", "test_benchmark_smoke",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        suite = item.path.stem
        if suite in ORACLE_SUITES:
            item.add_marker(pytest.mark.oracle)
        if suite in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)
