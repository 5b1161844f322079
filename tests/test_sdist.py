"""The sdist is a tree whose tests run (issue #19): unpacked, its own customops is the one imported, its whole suite
is collected without an error, and a real part of it passes there, the Triton-oracle tests skipping, saying why,
without the ../shared sources that only a checkout beside them has."""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import pytest
from release_tools import build_sdist, run, unpack

QUICK = ["tests/test_check_example.py", "tests/test_code_docs.py", "tests/test_triton_core.py"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked sdist (this module's own: the conftest's `tree` is the fixture libraries)."""
    work = tmp_path_factory.mktemp("sdist")
    return unpack(build_sdist(work), work / "unpacked")


def _in(tree: Path, *argv: str, **env: str) -> str:
    """Run this interpreter with `argv` in the unpacked tree, nothing of the checkout on its path; the output."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUSTOMOPS_TRITON_CORE")}
    done = run(sys.executable, *argv, cwd=tree, env={**environment, **env})
    if done.returncode != 0:
        said = done.stdout[-4000:] + done.stderr[-2000:]
        pytest.fail(f"{argv} in the unpacked sdist exited {done.returncode}:\n{said}", pytrace=False)
    return done.stdout


def test_the_sdist_leaves_out_caches_and_build_outputs(tree):
    with tarfile.open(next(tree.parent.parent.glob("dist/*.tar.gz"))) as sdist:
        names = sdist.getnames()
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so")) or "/.fixture-cache" in n
                or "/.hypothesis" in n or "/.fuzz-corpus" in n or "/build/" in n]


def test_the_unpacked_sdist_imports_its_own_customops(tree):
    assert Path(_in(tree, "-c", "import customops; print(customops.__file__)").strip()).is_relative_to(tree)


def test_the_whole_suite_is_collected_from_the_unpacked_sdist(tree):
    out = _in(tree, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert "error" not in out.lower().splitlines()[-1] and " collected" in out.splitlines()[-1], out[-2000:]


def test_the_tests_that_need_a_git_checkout_skip_in_the_unpacked_sdist_saying_why(tree):
    """pre-commit try-repo builds the hook from a checkout's HEAD, and the documented install clones one: an sdist
    has no .git, so they skip instead of failing."""
    out = _in(tree, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_documented_install.py",
              "tests/test_deployment_files.py::test_pre_commit_try_repo_runs_the_check_on_a_scratch_repository")
    assert "failed" not in out and "passed" not in out and " skipped" in out.splitlines()[-1], out[-2000:]
    assert "needs git and a git checkout to clone" in out, out[-2000:]
    assert "needs git and a git checkout: pre-commit try-repo" in out, out[-2000:]


def test_a_part_of_the_suite_passes_in_the_unpacked_sdist_and_the_oracle_tests_skip(tree):
    home = tree.parent / "home"  # no Triton core built in a cache, no sources beside the tree
    out = _in(tree, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *QUICK, HOME=str(home),
              CUSTOMOPS_TRITON_SOURCES=str(tree.parent / "shared" / "oracles" / "triton"))
    assert "failed" not in out and "error" not in out.splitlines()[-1], out[-2000:]
    assert "skipped" in out.splitlines()[-1] and "the Triton core is not built" in out, out[-2000:]
