"""Every input a fuzz campaign crashed on (tests/fuzz/regressions/<target>-<hash>), kept as a test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from customops.elf.parse import parse_elf
from customops.elf.records import FileIdentity
from customops.errors import ElfError, InputError
from customops.inspect.onnxmodel import model_ops
from customops.inspect.tfmodel import model_ops as tf_model_ops
from customops.linker.ldcache import parse_ld_cache
from customops.triton.manifest import load_manifest
from customops.triton.repository import read_model

REGRESSIONS = sorted((Path(__file__).parent / "fuzz" / "regressions").glob("*"))


def replay(target: str, data: bytes, tmp_path: Path) -> None:
    if target == "manifest":
        (tmp_path / "customops.toml").write_bytes(data)
        with pytest.raises(InputError, match="CO106"):
            load_manifest(str(tmp_path / "customops.toml"))
    elif target == "elf":
        with pytest.raises(ElfError):
            parse_elf("fuzzed.so", data, FileIdentity(0, 0, len(data), 0))
    elif target == "ldcache":
        with pytest.raises(InputError):
            parse_ld_cache(data)
    elif target == "config":
        (tmp_path / "m" / "1").mkdir(parents=True)
        (tmp_path / "m" / "config.pbtxt").write_bytes(data)
        assert read_model(str(tmp_path / "m"), "m").problems
    elif target == "onnx":
        (tmp_path / "model.onnx").write_bytes(data)
        with pytest.raises(ValueError):
            model_ops(str(tmp_path / "model.onnx"))
    elif target == "savedmodel":
        (tmp_path / "model.savedmodel").mkdir()
        (tmp_path / "model.savedmodel" / "saved_model.pb").write_bytes(data)
        with pytest.raises(ValueError):
            tf_model_ops(str(tmp_path / "model.savedmodel"))
    else:
        raise AssertionError(f"unknown fuzz target {target!r}")
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.name for p in REGRESSIONS])
def test_a_fuzz_crash_stays_fixed(path, tmp_path):
    replay(path.name.split("-", 1)[0], path.read_bytes(), tmp_path)
