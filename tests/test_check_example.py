"""The bundled example repository: one finding of each main kind and clean models, every load it predicts
confirmed by the real loader running inside the fixture container (chroot, as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from oracle import confirm_check

from customops.app.check import run_check
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures.example import install

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
EXPECTED = {
    "detector_ort": {"CO308"},
    "drift_tf": {"CO504"},
    "legacy": {"CO202"},
    "segmenter_trt": {"CO501"},  # libnvinfer.so.8 is not found: said by the CO501, no CO302 besides
    "tokenizer_ort": {"CO301", "CO104"},
    "preprocess_py": {"CO306"},  # its environment's libstdc++ is older than the one the Python backend's stub needs
    None: {"CO304", "CO401", "CO602"},  # reranker_pt's op library stops the server at start: its registration calls
}                              # what the container's torch lacks (the rest is found as if the server started without
# it); the three preloads reach preprocess_py's stub too
CLEAN = {"custom", "ranker_pt", "reranker_pt", "text_tf", "upscaler_trt"}
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="the in-container oracle needs root (chroot in a mount namespace)")


@pytest.fixture
def container_with_example(tree, tmp_path):
    """A copy of the fixture container with the example repository at /models."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    shutil.copytree(EXAMPLE, root / "models", ignore=shutil.ignore_patterns("*.so"))
    install(root / "models")
    return root


def codes_by_model(result) -> dict:  # type: ignore[no-untyped-def]
    found: dict = {}
    for f in result.findings:
        found.setdefault(f.model, set()).add(f.code)
    return found


def test_the_example_repository_has_one_finding_of_each_main_kind(container_with_example):
    root = container_with_example
    repo = str(root / "models")
    result = run_check([repo], load_manifest(str(root / "models" / "customops.toml")), from_root(str(root)), ())
    assert codes_by_model(result) == EXPECTED
    assert {m.name for m in result.models} - {m for m in EXPECTED if m} == CLEAN


@needs_root
def test_every_load_of_the_example_is_confirmed_by_the_real_loader(container_with_example):
    """The server dies at start as predicted (the old op library's static initializer); without that library,
    every load of the rest is as predicted too."""
    root = container_with_example
    repo = str(root / "models")
    manifest = root / "models" / "customops.toml"
    result = run_check([repo], load_manifest(str(manifest)), from_root(str(root)), ())
    dies = confirm_check(result, str(root))
    assert dies.returncode == 127 and result.prediction.exit_message and "symbol lookup error" in dies.stderr
    manifest.write_text(manifest.read_text().replace('"reranker_pt/ops/libtorch_op_old.so"', ""))
    result = run_check([repo], load_manifest(str(manifest)), from_root(str(root)), ())
    oracle = confirm_check(result, str(root))
    assert len(oracle.dlopens) == len(result.plan.dlopens) > 5


ROOT = EXAMPLE.parent.parent
README = ROOT / "README.md"
FENCE = "```text\n"


def example_output() -> str:
    """The README's example command (scripts/example.sh) run for real, at 80 columns, from the checkout root;
    the fixture tree's hash and the checkout's own path replaced by what the README shows."""
    container = install()
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    env.pop("FORCE_COLOR", None)
    result = subprocess.run([sys.executable, "-m", "customops", "check", "examples/model_repository",
                             "--container-root", str(container)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 1, result.stderr
    shown = os.path.relpath(container, ROOT).replace(container.parent.name, "tree-…")
    return result.stdout.replace(str(container), shown).replace(str(ROOT) + "/", "")


UPGRADE = ("--triton-release", "24.12,25.02,25.03,25.08")  # the README's "Can we upgrade?" command


def upgrade_output() -> str:
    """The README's upgrade matrix of the example, run for real (the release table's facts only)."""
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "customops", "check", "examples/model_repository", *UPGRADE,
                             "--no-cache"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 1, result.stderr
    return result.stdout


def readme_sample(text: str, which: int = 0) -> tuple[int, int]:
    """Where a sample output lies in the README: its `which`th ```text block."""
    start = -1
    for _ in range(which + 1):
        start = text.index(FENCE, start + 1)
    start += len(FENCE)
    return start, text.index("```\n", start)


def test_the_readme_shows_the_real_output_of_the_example():
    """Regenerate with `PYTHONPATH=. .venv/bin/python tests/test_check_example.py --write`."""
    text = README.read_text()
    start, end = readme_sample(text)
    assert text[start:end] == example_output()


def test_the_readmes_upgrade_matrix_is_the_real_output_of_the_example():
    text = README.read_text()
    start, end = readme_sample(text, 1)
    assert f"--triton-release {UPGRADE[1]}" in text[:start] and text[start:end] == upgrade_output()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    text = README.read_text()
    start, end = readme_sample(text)
    text = text[:start] + example_output() + text[end:]
    start, end = readme_sample(text, 1)
    README.write_text(text[:start] + upgrade_output() + text[end:])
