"""Messages that send users the right way (#18): one scenario per test, named after the rule it shows, built
as tests/test_check_codes.py builds its scenarios (a small repository in a copy of the fixture container)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from elf_tools import gcc_shared
from oracle import confirm_check
from test_check_codes import Repo, codes, needs_root, only

from customops.codes import CODES
from customops.linker.types import Failure, FailureKind, StepOutcome
from customops.rules import loading
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from customops.triton.modelconfig import did_you_mean
from customops.triton.plan import LoadedBy, LoadStep, Purpose

LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 16184\n")
PYTORCH_OPS = '[pytorch]\nops = ["p/libtorch_op.so"]\n'  # launch then puts backends/pytorch on LD_LIBRARY_PATH


@pytest.fixture
def repo(tree: Path, tmp_path: Path) -> Repo:
    return Repo(tree, tmp_path)


def op_library_model(repo: Repo, backend: str, lib: str) -> Repo:
    return repo.model("m", f'backend: "{backend}"\nmodel_operations {{ op_library_filename: "{lib}" }}\n')


# -- CO501 / CO302 ----------------------------------------------------------------------------------------


def test_co501_a_tensorrt_8_plugin_whose_libnvinfer_is_not_found_is_one_finding(repo):
    repo.model("m", 'platform: "tensorrt_plan"\n', model_file="model.plan")
    repo.model("p", 'backend: "pytorch"\n').manifest(f'{PYTORCH_OPS}[tensorrt]\nplugins = ["m/libplugin.so"]\n')
    repo.library("p/libtorch_op.so", "example/libtorch_op.so")
    repo.library("m/libplugin.so", "example/libtrt8_plugin.so")
    result = repo.check()
    assert codes(result) == {"CO501"}  # not also a CO302 advising to ship libnvinfer.so.8
    finding = only(result, "CO501")
    assert finding.message == ("plugin library /models/m/libplugin.so of model 'm' needs libnvinfer.so.8 (TensorRT 8), "
                               "which is not found: the container has TensorRT 10")
    assert finding.predicted == "libnvinfer.so.8: cannot open shared object file: No such file or directory"
    assert finding.hint == CODES["CO501"].fix
    assert ("tried /opt/tritonserver/backends/pytorch/libnvinfer.so.8 (LD_LIBRARY_PATH, set for the PyTorch op "
            "libraries: not found)") in finding.evidence


@needs_root
def test_co501_a_preloaded_tensorrt_8_plugin_stops_the_server_as_one_finding(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libtrt8_plugin.so"]\n')
    repo.library("m/libtrt8_plugin.so", "example/libtrt8_plugin.so")
    result = repo.check()
    assert codes(result) == {"CO501"}
    finding = only(result, "CO501")
    assert finding.message.startswith("the server cannot start: /models/m/libtrt8_plugin.so (loaded through "
                                      "LD_PRELOAD) needs libnvinfer.so.8 (TensorRT 8), which is not found")
    assert "error while loading shared libraries: libnvinfer.so.8" in finding.predicted
    confirm_check(result, str(repo.root))


def test_co501_a_tensorrt_8_plugin_shipped_with_its_libnvinfer_still_mismatches(repo):
    repo.model("m", 'platform: "tensorrt_plan"\n', model_file="model.plan")
    repo.manifest('[tensorrt]\nplugins = ["m/libplugin.so"]\n')
    repo.library("m/libplugin.so", "example/libtrt8_plugin.so")
    shutil.copy2(repo.tree / "fw/trt8/libnvinfer.so.8", repo.root / "usr/lib/x86_64-linux-gnu/libnvinfer.so.8")
    result = repo.check()
    assert codes(result) == {"CO501"}
    assert only(result, "CO501").message == ("/models/m/libplugin.so needs libnvinfer.so.8 (TensorRT 8); the "
                                             "container has TensorRT 10")


def test_co302_the_search_trace_says_why_the_pytorch_directory_is_on_ld_library_path(repo, tmp_path):
    stub = gcc_shared(tmp_path / "stub" / "libdep.so", "int dep_fn(void) { return 1; }\n")
    lib = repo.models / "m" / "ops" / "libop.so"
    gcc_shared(lib, "int dep_fn(void); int use(void) { return dep_fn(); }\n", f"-L{stub.parent}", "-ldep")
    op_library_model(repo, "tensorflow", "/models/m/ops/libop.so")
    repo.model("p", 'backend: "pytorch"\n').manifest(PYTORCH_OPS)
    repo.library("p/libtorch_op.so", "example/libtorch_op.so")
    finding = only(repo.check(), "CO302")
    assert finding.evidence[0] == ("tried /opt/tritonserver/backends/pytorch/libdep.so (LD_LIBRARY_PATH, set for the "
                                   "PyTorch op libraries: not found)")


# -- CO304 ------------------------------------------------------------------------------------------------

PYTHON_EXTENSION = """
typedef struct _object PyObject;
extern PyObject _Py_NoneStruct;
PyObject *PyModule_Create2(void *definition, int api_version);
PyObject *PyInit_myops(void) { return PyModule_Create2(&_Py_NoneStruct, 1013); }
"""


def test_co304_a_python_extension_module_given_as_an_op_library_misses_cpythons_symbols(repo):
    gcc_shared(repo.models / "m" / "ops" / "myops.so", PYTHON_EXTENSION)  # no libpython in its DT_NEEDED
    result = op_library_model(repo, "tensorflow", "/models/m/ops/myops.so").check()
    finding = only(result, "CO304")
    assert "2 undefined symbols, all CPython's (the Python C API" in finding.message
    assert "Python extension module" in finding.hint and "loaded by a Python interpreter" in finding.hint
    assert finding.predicted.startswith("/models/m/ops/myops.so: undefined symbol: ")


def test_co304_an_op_library_missing_other_symbols_keeps_the_plain_message(repo):
    result = op_library_model(repo, "tensorflow", repo.library("m/ops/libop.so", "f/libu.so")).check()
    finding = only(result, "CO304")
    assert "CPython" not in finding.message and finding.hint == CODES["CO304"].fix


# -- CO504 ------------------------------------------------------------------------------------------------


def test_co504_the_fix_names_the_framework_version_the_container_ships(repo):
    framework = repo.root / "opt/tritonserver/backends/tensorflow"
    (framework / "libtensorflow_framework.so.2").rename(framework / "libtensorflow_framework.so.2.15.0")
    (framework / "libtensorflow_framework.so.2").symlink_to("libtensorflow_framework.so.2.15.0")
    result = op_library_model(repo, "tensorflow", repo.library("m/ops/libop.so", "example/libtf_op_drift.so")).check()
    assert only(result, "CO504").hint == (
        "Rebuild against the framework version shipped in the container: libtensorflow_framework.so.2 version "
        "2.15.0 (/opt/tritonserver/backends/tensorflow/libtensorflow_framework.so.2).")


def test_co504_without_a_version_in_any_file_name_the_fix_names_the_library_file(repo):
    result = op_library_model(repo, "tensorflow", repo.library("m/ops/libop.so", "example/libtf_op_drift.so")).check()
    hint = only(result, "CO504").hint
    assert "/opt/tritonserver/backends/tensorflow/libtensorflow_framework.so.2" in hint
    assert hint != CODES["CO504"].fix


# -- CO303: a Git LFS pointer ----------------------------------------------------------------------------


def test_co303_a_git_lfs_pointer_committed_instead_of_an_op_library(repo):
    lib = repo.models / "m" / "ops" / "libop.so"
    lib.parent.mkdir(parents=True)
    lib.write_text(LFS_POINTER)
    result = op_library_model(repo, "onnxruntime", "/models/m/ops/libop.so").check()
    finding = only(result, "CO303")
    assert finding.message == "op library /models/m/ops/libop.so of model 'm' is a Git LFS pointer, not the library"
    assert finding.hint == "Run `git lfs pull` (or fetch LFS objects in CI: actions/checkout with lfs: true)."
    assert finding.predicted == "/models/m/ops/libop.so: invalid ELF header"  # what dlopen says all the same


def test_co303_a_git_lfs_pointer_in_ld_preload(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libpre.so"]\n')
    (repo.models / "m" / "libpre.so").write_text(LFS_POINTER)
    finding = only(repo.check(), "CO303")
    assert finding.message == ("LD_PRELOAD entry /models/m/libpre.so is a Git LFS pointer, not the library; ld.so "
                               "ignores it and the server starts without it")
    assert "git lfs pull" in finding.hint


# -- CO301: permission denied ----------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions do not keep root from reading")
def test_co301_an_op_library_in_an_unreadable_directory_is_not_reported_missing(repo):
    ops = repo.models / "m" / "ops"
    op_library_model(repo, "onnxruntime", repo.library("m/ops/libop.so", "example/libort_op.so"))
    ops.chmod(0)
    try:
        finding = only(repo.check(), "CO301")
    finally:
        ops.chmod(0o755)
    assert finding.message == "op library /models/m/ops/libop.so of model 'm' cannot be read: permission denied"
    assert finding.predicted == "/models/m/ops/libop.so: cannot open shared object file: Permission denied"


def test_co301_a_permission_denied_outcome_reads_cannot_be_read_not_does_not_exist(repo):
    """As root nothing is unreadable: the linker model's typed outcome, turned into the finding by the rule."""
    repo.model("m", 'backend: "onnxruntime"\n')
    step = LoadStep("/models/m/ops/libop.so", str(repo.models / "m/ops/libop.so"), LoadedBy.ONNXRUNTIME,
                    Purpose.OP_LIBRARY, model="m")
    message = "/models/m/ops/libop.so: cannot open shared object file: Permission denied"
    outcome = StepOutcome("dlopen", step.path, "m:op library", "failed", message, (), (), (), (), (), (),
                          failure=Failure(FailureKind.PERMISSION_DENIED, step.path))
    manifest = load_manifest(None)
    from customops.triton.plan import Context

    ctx = Context(from_root(str(repo.root)), manifest)
    finding = loading.failure_finding(step, outcome, ctx, reader=None)  # type: ignore[arg-type]
    assert (finding.code, finding.message) == ("CO301", "op library /models/m/ops/libop.so of model 'm' cannot be "
                                                        "read: permission denied")
    assert "does not exist" not in finding.message and finding.predicted == message
    assert "chmod" in finding.hint


# -- CO101 / CO102: did you mean -------------------------------------------------------------------------


def test_co101_a_misspelled_field_gets_did_you_mean_from_the_schema_at_that_point(repo):
    config = 'backend: "onnxruntime"\nmodel_operations { op_libary_filename: "/models/m/libop.so" }\n'
    finding = only(repo.model("m", config).check(), "CO101")
    assert finding.message.endswith("has no field named \"op_libary_filename\"; did you mean 'op_library_filename'?")
    assert (finding.line, finding.column) == (2, 20)


def test_co101_a_misspelled_top_level_field(repo):
    finding = only(repo.model("m", 'platfrom: "onnxruntime_onnx"\n').check(), "CO101")
    assert finding.message.endswith("did you mean 'platform'?")


def test_co101_an_unknown_field_close_to_nothing_gets_no_guess(repo):
    finding = only(repo.model("m", 'backend: "onnxruntime"\nbogus_field: 1\n').check(), "CO101")
    assert "did you mean" not in finding.message


def test_co102_a_platform_suggestion_comes_from_the_known_platform_values():
    from customops.triton.autocomplete import PLATFORM_TYPE as PLATFORM_BACKEND

    assert did_you_mean("onnxruntime_onx", PLATFORM_BACKEND) == "did you mean 'onnxruntime_onnx'?"
    assert did_you_mean("caffe2_netdef", PLATFORM_BACKEND) == ""


def test_co102_a_misspelled_platform_gets_did_you_mean_and_keeps_tritons_message(repo):
    finding = only(repo.model("m", 'platform: "onnxruntime_onx"\n').check(), "CO102")
    assert finding.message == "unexpected platform type 'onnxruntime_onx' for m; did you mean 'onnxruntime_onnx'?"
    assert finding.predicted == "unexpected platform type 'onnxruntime_onx' for m"
