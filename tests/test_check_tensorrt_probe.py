"""`check --probe` on TensorRT plugin libraries: the server's plugin libraries are probed in its load order
against customops' recording stand-in for libnvinfer (no TensorRT, no GPU here), and TensorRT's rule that the
first registration of a (namespace, name, version) wins becomes CO406 on the library loaded later; a library
whose registrations the probe cannot see is CO410, not a pass. The fixture libraries are compiled against
TensorRT's real headers (fixtures/tensorrt.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops.probe import tensorrt_standin
from fixtures import tensorrt as built

pytestmark = [
    pytest.mark.skipif(not built.available(), reason=f"TensorRT's public headers are not under {built.HEADERS}"),
    pytest.mark.skipif(tensorrt_standin.compiler() is None, reason="no C++ compiler to build the stand-in"),
]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plugins() -> Path:
    return built.build() / "v10.7.0"


def repository(tmp_path: Path, plugins: Path, *libraries: str) -> Path:
    """A TensorRT model and a manifest whose [tensorrt] plugins are `libraries`, in that order."""
    repo = tmp_path / "models"
    (repo / "seg" / "1").mkdir(parents=True)
    (repo / "seg" / "config.pbtxt").write_text('name: "seg"\nplatform: "tensorrt_plan"\nmax_batch_size: 1\n')
    (repo / "seg" / "1" / "model.plan").write_bytes(b"\0" * 16)
    (repo / "seg" / "plugins").mkdir()
    for name in libraries:
        shutil.copy(plugins / name, repo / "seg" / "plugins" / name)
    listed = ", ".join(f'"seg/plugins/{name}"' for name in libraries)
    (repo / "customops.toml").write_text(f'[tensorrt]\nplugins = [{listed}]\nload = "backend-config"\n')
    return repo


def check(repo: Path, container: Path, tmp_path: Path, *extra: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--container-root",
                             str(container), "--probe", "--format", "json", "--cache-dir", str(tmp_path / "cache"),
                             *extra], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def of(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


@pytest.mark.parametrize(("first", "second"), [("libduplicate_a.so", "libduplicate_b.so"),
                                               ("libduplicate_b.so", "libduplicate_a.so")])
def test_the_plugin_library_loaded_second_loses_the_shared_name_to_the_first(plugins, tree, tmp_path, first,
                                                                             second):
    repo = repository(tmp_path, plugins, first, second)
    report = check(repo, tree / "container", tmp_path)
    (duplicate,) = of(report, "CO406")
    assert duplicate["library"] == f"/models/seg/plugins/{second}"
    assert duplicate["symbol"] == "dup_ns::FixtureShared/1"
    assert f"/models/seg/plugins/{first} registered first" in duplicate["message"]
    assert duplicate["predicted"] == "Plugin creator already registered - dup_ns::FixtureShared version 1"
    assert duplicate["file"] == "customops.toml" and duplicate["artifact"] == f"seg/plugins/{second}"
    assert not of(report, "CO102")  # the repository is a valid one: only the collision is found
    assert any("TensorRT plugin libraries against customops' stand-in for libnvinfer.so.10" in n
               for n in report["notes"])


def test_a_plugin_library_that_registers_nothing_is_CO410_not_a_pass(plugins, tree, tmp_path):
    repo = repository(tmp_path, plugins, "libnothing.so", "libstatic_v1.so")
    report = check(repo, tree / "container", tmp_path)
    (unseen,) = of(report, "CO410")
    assert unseen["library"] == "/models/seg/plugins/libnothing.so"
    assert "registered no plugin creator" in unseen["message"]
    assert not of(report, "CO406")


def test_a_plugin_library_of_a_major_without_a_layout_is_CO410(tree, tmp_path):
    needs12 = built.build()
    source = next(needs12.glob("**/needs12/libnothing.so"))
    repo = repository(tmp_path, source.parent, "libnothing.so")
    report = check(repo, tree / "container", tmp_path)
    (unseen,) = of(report, "CO410")
    assert "needs libnvinfer.so.12" in unseen["message"]
