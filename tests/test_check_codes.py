"""One scenario per finding code: a small repository in a copy of the fixture container, checked, and,
where a runtime behaviour exists, confirmed by the real loader running the same plan inside it."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import glibc_release
import pytest
from conftest import needs_toolchain
from oracle import confirm_check, run_in_container

from customops.app.check import run_check
from customops.codes import Severity
from customops.errors import InputError
from customops.triton.container import from_release, from_root, read_profile, write_profile
from customops.triton.manifest import load_manifest

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="the in-container oracle needs root (chroot in a mount namespace)")


class Repo:
    """A model repository at /models inside a private copy of the fixture container."""

    def __init__(self, tree: Path, tmp: Path) -> None:
        self.tree = tree
        self.root = tmp / "root"
        shutil.copytree(tree / "container", self.root, symlinks=True)
        self.models = self.root / "models"
        self.models.mkdir()

    def model(self, name: str, config: str, model_file: str = "", **libs: str) -> Repo:
        """A model whose version 1 holds `model_file` (default: what its backend loads; the core serves a
        backend: "tensorflow" model only when it finds model.graphdef or model.savedmodel)."""
        model_file = model_file or ("model.graphdef" if 'backend: "tensorflow"' in config else "model.bin")
        directory = self.models / name
        (directory / "1").mkdir(parents=True)
        (directory / "config.pbtxt").write_text(config)
        (directory / "1" / model_file).write_text("")
        for place, fixture in libs.items():
            self.library(f"{name}/{place.replace('__', '/')}", fixture)
        return self

    def library(self, place: str, fixture: str) -> str:
        dest = self.models / place
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.tree / fixture, dest)
        return f"/models/{place}"

    def manifest(self, text: str) -> Repo:
        (self.models / "customops.toml").write_text(text)
        return self

    def check(self, container=None):  # type: ignore[no-untyped-def]
        manifest_path = self.models / "customops.toml"
        manifest = load_manifest(str(manifest_path) if manifest_path.exists() else None)
        return run_check([str(self.models)], manifest, container or from_root(str(self.root)), ())


@pytest.fixture
def repo(tree, tmp_path) -> Repo:
    return Repo(tree, tmp_path)


def codes(result) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.code for f in result.findings}


def only(result, code: str):  # type: ignore[no-untyped-def]
    (finding,) = [f for f in result.findings if f.code == code]
    return finding


# -- configuration ------------------------------------------------------------------------------


def test_co101_a_config_that_does_not_parse_names_the_line_and_column(repo):
    result = repo.model("m", 'name: "m"\nbackend: "onnxruntime"\nbogus_field: 1\n').check()
    finding = only(result, "CO101")
    assert (finding.line, finding.column) == (3, 1)
    assert "bogus_field" in finding.message and finding.predicted.startswith("failed to read text proto from")


def test_co102_an_unknown_platform_is_rejected_with_tritons_text(repo):
    result = repo.model("m", 'platform: "caffe2_netdef"\n').check()
    assert only(result, "CO102").predicted == "unexpected platform type 'caffe2_netdef' for m"


def test_co102_a_contradicting_platform_and_backend(repo):
    result = repo.model("m", 'platform: "onnxruntime_onnx"\nbackend: "pytorch"\n').check()
    assert only(result, "CO102").predicted == "unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, pytorch"


def test_the_backend_comes_from_the_model_file_name_when_the_config_says_nothing(repo):
    result = repo.model("m", 'name: "m"\n', model_file="model.onnx").check()
    assert result.models[0].backend == "onnxruntime" and not codes(result)


def test_co103_no_version_directory_under_the_policy(repo):
    result = repo.model("m", 'backend: "onnxruntime"\nversion_policy { specific { versions: 3 } }\n').check()
    assert only(result, "CO103").predicted == "at least one version must be available under the version policy " \
                                              "of model 'm'"


def test_a_version_directory_with_a_leading_zero_is_not_a_version(repo):
    repo.model("m", 'backend: "onnxruntime"\n')
    (repo.models / "m" / "1").rename(repo.models / "m" / "01")
    assert "CO103" in codes(repo.check())


def test_co104_a_relative_op_library_resolves_against_the_server_working_directory(repo):
    repo.model("m", 'backend: "onnxruntime"\nmodel_operations { op_library_filename: "ops/libort_op.so" }\n',
               ops__libort_op_so="example/libort_op.so")
    (repo.models / "m" / "ops" / "libort_op_so").rename(repo.models / "m" / "ops" / "libort_op.so")
    result = repo.check()
    assert {"CO104", "CO301"} <= codes(result)
    assert result.plan.dlopens[-1].path == "/opt/tritonserver/ops/libort_op.so"


def test_co105_model_operations_on_a_backend_that_ignores_them(repo):
    result = repo.model("m", 'backend: "pytorch"\nmodel_operations { op_library_filename: "/models/x.so" }\n').check()
    assert codes(result) == {"CO105"}


def test_co106_a_manifest_with_an_unknown_key_is_bad_input(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest("[tensorrt]\nplugin = []\n")
    with pytest.raises(InputError, match="CO106 unknown key 'plugin'"):
        repo.check()


# -- backends ----------------------------------------------------------------------------------------


def test_co201_a_missing_backend_library_lists_every_path_triton_tries(repo):
    result = repo.model("m", 'backend: "mine"\n').check()
    finding = only(result, "CO201")
    assert finding.predicted == ("unable to find backend library for backend 'mine', try specifying runtime on the "
                                 "model configuration.")
    assert finding.evidence == ("searched: /models/m/1/libtriton_mine.so", "searched: /models/m/libtriton_mine.so",
                                "searched: /opt/tritonserver/backends/mine/libtriton_mine.so")


def test_a_backend_library_in_the_version_directory_wins(repo):
    repo.model("m", 'backend: "mybackend"\n', **{"1__libtriton_mybackend.so": "example/libtriton_mybackend.so",
                                                 "libtriton_mybackend.so": "example/libtriton_noexec.so"})
    result = repo.check()
    assert result.plan.dlopens[0].path == "/models/m/1/libtriton_mybackend.so" and not codes(result)


@needs_root
def test_co202_a_backend_without_the_execute_entry_point(repo):
    repo.model("m", 'backend: "noexec"\n', **{"libtriton_noexec.so": "example/libtriton_noexec.so"})
    result = repo.check()
    assert codes(result) == {"CO202"}
    confirm_check(result, str(repo.root))


def test_co203_the_tensorflow_backend_is_gone_from_25_03(repo):
    result = repo.model("m", 'platform: "tensorflow_savedmodel"\n').check(from_release("25.03"))
    assert codes(result) == {"CO203"}
    assert "not checked: loading and symbol resolution" in " ".join(result.notes)


# -- loading -----------------------------------------------------------------------------------------


@needs_root
def test_co301_a_missing_preload_is_ignored_by_ld_so_and_the_server_starts_without_it(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/nothere.so"]\n')
    result = repo.check()
    finding = only(result, "CO301")
    assert "cannot be preloaded (cannot open shared object file): ignored." in finding.predicted
    confirm_check(result, str(repo.root))


@needs_root
def test_co302_a_preload_whose_dependency_is_missing_stops_the_server(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libpre_needs_missing.so"]\n')
    repo.library("m/libpre_needs_missing.so", "a/libpre_needs_missing.so")
    result = repo.check()
    assert "CO302" in codes(result)
    assert "error while loading shared libraries: libzz.so" in only(result, "CO302").predicted
    confirm_check(result, str(repo.root))


@needs_root
@needs_toolchain("m32")
def test_co303_a_32_bit_op_library(repo):
    lib = repo.library("m/ops/libw.so", "g/badc/libw.so")
    result = repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert only(result, "CO303").predicted == f"{lib}: wrong ELF class: ELFCLASS32"
    confirm_check(result, str(repo.root))


@needs_root
def test_co304_an_op_library_needing_data_that_nothing_defines(repo):
    lib = repo.library("m/ops/libop.so", "f/libu.so")
    result = repo.model("m", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert only(result, "CO304").predicted == f"{lib}: undefined symbol: missing_var"
    confirm_check(result, str(repo.root))


@needs_root
def test_co504_an_op_library_built_against_another_framework_version(repo):
    lib = repo.library("m/ops/libop.so", "example/libtf_op_drift.so")
    result = repo.model("m", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    finding = only(result, "CO504")
    assert finding.symbol.startswith("_ZN10tensorflow12RegisterOpV2")
    assert "another version of libtensorflow_framework.so.2" in finding.message
    confirm_check(result, str(repo.root))


def test_co503_an_op_library_built_with_the_old_string_abi(repo):
    lib = repo.library("m/ops/libop.so", "example/libtf_op_oldabi.so")
    result = repo.model("m", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert "pre-C++11 std::string ABI" in only(result, "CO503").message


def test_co305_a_preloaded_library_with_a_missing_function_fails_only_when_called(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libuf.so"]\n')
    repo.library("m/libuf.so", "f/libuf.so")
    result = repo.check()
    assert codes(result) == {"CO305"} and only(result, "CO305").symbol == "missing_fn"


@needs_root
def test_co304_a_preload_whose_constructor_calls_a_function_defined_nowhere_stops_the_server(repo, tmp_path):
    """Lazily bound, but a constructor makes the first call at load (linker.constructors): the server dies at
    start; the function only a later call reaches stays CO305."""
    source = tmp_path / "ctor.c"
    source.write_text("int missing_fn(void);\nint other_missing(void);\n"
                      "__attribute__((constructor)) static void run(void) { missing_fn(); }\n"
                      "int later(void) { return other_missing(); }\n")
    (repo.models / "m").mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(repo.models / "m/libctor.so")], check=True)
    result = repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libctor.so"]\n').check()
    finding = only(result, "CO304")
    assert finding.symbol == "missing_fn" and "the constructor run of preload /models/m/libctor.so calls " \
        "missing_fn as it loads" in finding.message
    assert "the constructor run (DT_INIT_ARRAY[1]) calls missing_fn" in finding.evidence
    assert finding.predicted.endswith("symbol lookup error: /models/m/libctor.so: undefined symbol: missing_fn")
    assert only(result, "CO305").symbol == "other_missing"
    confirm_check(result, str(repo.root))


def test_co306_from_a_facts_only_profile_a_library_needing_a_newer_glibcxx(repo, tmp_path):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libcxx.so"]\n')
    repo.library("m/libcxx.so", "elf/libcxx11.so")
    profile = tmp_path / "profile.json"
    container = from_root(str(repo.root))
    write_profile(container, str(profile))
    data = json.loads(profile.read_text())
    del data["files"]  # facts only: the glibc/libstdc++ maxima decide
    data["facts"]["glibcxx"] = "GLIBCXX_3.4.9"
    profile.write_text(json.dumps(data))
    result = repo.check(read_profile(str(profile), str(tmp_path / "cache")))
    assert "CO306" in codes(result) and only(result, "CO306").version.startswith("GLIBCXX_3.4.")


def test_co307_a_preload_path_with_a_colon(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/a:b.so"]\n')
    repo.library("m/a:b.so", "b/liba.so")
    assert "CO307" in codes(repo.check())


@needs_root
def test_co308_an_onnxruntime_op_library_without_register_custom_ops(repo):
    lib = repo.library("m/ops/libop.so", "example/libort_noentry.so")
    result = repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert codes(result) == {"CO308"}
    confirm_check(result, str(repo.root))


REFUSED = "cannot enable executable stack as shared object requires: Invalid argument"
TF_OP = 'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{}" }}\n'


def stack_library(repo: Repo, tmp_path: Path, place: str, stack: str) -> str:
    """/models/<place>, built needing an executable stack ("execstack": PF_X in PT_GNU_STACK; "none": no
    PT_GNU_STACK, whose x86-64 default is executable) or not ("noexecstack")."""
    source = tmp_path / "op.c"
    source.write_text("int op(void) { return 1; }\n")
    out = repo.models / place
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = ["-Wl,-z,execstack"] if stack == "execstack" else ["-Wl,-z,noexecstack"]
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(out), *flags], check=True)
    if stack == "none":  # binutils before 2.41 has no -z nognustack: PT_GNU_STACK becomes PT_NULL
        data = bytearray(out.read_bytes())
        phoff, (entsize, count) = int.from_bytes(data[0x20:0x28], "little"), struct.unpack_from("<HH", data, 0x36)
        for at in range(phoff, phoff + entsize * count, entsize):
            if struct.unpack_from("<I", data, at)[0] == 0x6474E551:
                struct.pack_into("<I", data, at, 0)
        out.write_bytes(data)
    return f"/models/{place}"


@needs_root
@pytest.mark.oracle
@pytest.mark.parametrize("stack", ["execstack", "none"])
def test_co309_an_op_library_needing_an_executable_stack_is_refused_by_glibc_2_41(repo, tmp_path, stack):
    """glibc 2.41's dlopen no longer makes the stack executable (NEWS 2.41): the real ld.so of Debian trixie in
    the container refuses the library with the message predicted."""
    glibc_release.install(glibc_release.debian_libc("trixie"), repo.root)
    lib = stack_library(repo, tmp_path, "m/ops/libop.so", stack)
    result = repo.model("m", TF_OP.format(lib)).check()
    assert result.container.facts.glibc == "GLIBC_2.41"
    finding = only(result, "CO309")
    assert finding.severity is Severity.ERROR and finding.predicted == f"{lib}: {REFUSED}"
    assert run_in_container(str(repo.root), result.plan).error_of(lib) == finding.predicted


@needs_root
def test_co309_an_executable_stack_loads_under_an_older_glibc_as_a_warning(repo, tmp_path):
    """Before 2.41 dlopen makes every thread's stack executable and the library loads: a warning naming 2.41."""
    lib = stack_library(repo, tmp_path, "m/ops/libop.so", "execstack")
    result = repo.model("m", TF_OP.format(lib)).check()
    finding = only(result, "CO309")
    assert finding.severity is Severity.WARNING and "from glibc 2.41 on" in finding.message
    assert run_in_container(str(repo.root), result.plan).error_of(lib) is None
    confirm_check(result, str(repo.root))


@needs_root
@pytest.mark.oracle
@pytest.mark.parametrize("preload", ["execstack", "noexecstack"])
def test_co309_no_finding_for_a_noexecstack_library_or_once_a_preload_made_the_stack_executable(
        repo, tmp_path, preload):
    """ld.so still grants a preload its executable stack at start-up in 2.41; a later dlopen needing one then
    loads. A library that does not need one loads under both."""
    glibc_release.install(glibc_release.debian_libc("trixie"), repo.root)
    lib = stack_library(repo, tmp_path, "m/ops/libop.so", "execstack" if preload == "execstack" else "noexecstack")
    stack_library(repo, tmp_path, "m/libpre.so", preload)
    result = repo.model("m", TF_OP.format(lib)).manifest('[host]\npreload = ["m/libpre.so"]\n').check()
    assert "CO309" not in codes(result)
    assert run_in_container(str(repo.root), result.plan).error_of(lib) is None
    confirm_check(result, str(repo.root))


# -- collisions --------------------------------------------------------------------------------------


@needs_root
def test_co401_a_preload_overrides_a_framework_definition(repo):
    repo.model("m", 'backend: "pytorch"\n').manifest('[host]\npreload = ["m/libc10_interposer.so"]\n')
    repo.library("m/libc10_interposer.so", "example/libc10_interposer.so")
    result = repo.check()
    assert only(result, "CO401").symbol == "c10::check(int)"
    confirm_check(result, str(repo.root))


def test_co402_two_preloaded_libraries_define_the_same_strong_symbol(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/liba.so", "m/libb.so"]\n')
    repo.library("m/liba.so", "b/liba.so")
    repo.library("m/libb.so", "b/libb.so")
    finding = only(repo.check(), "CO402")
    assert finding.library == "/models/m/liba.so" and finding.symbol == "foo"


def test_co403_two_preloads_define_one_data_object_with_different_sizes(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libtable4.so", "m/libtable8.so"]\n')
    repo.library("m/libtable4.so", "example/libtable4.so")
    repo.library("m/libtable8.so", "example/libtable8.so")
    finding = only(repo.check(), "CO403")
    assert finding.symbol == "shared_table" and "size 16" in finding.message and "size 32" in finding.message


def test_co404_an_op_library_bundling_its_own_copy_of_a_framework_function(repo):
    lib = repo.library("m/ops/libop.so", "example/libtf_op_bundled.so")
    result = repo.model("m", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    finding = only(result, "CO404")
    assert finding.library == lib and finding.symbol.startswith("tensorflow::RegisterOp")


def test_co405_gnu_unique_state_is_shared_between_two_op_libraries(repo):
    a = repo.library("a/ops/libua.so", "d/libua.so")
    b = repo.library("b/ops/libub.so", "d/libub.so")
    repo.model("a", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{a}" }}\n')
    repo.model("b", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{b}" }}\n')
    finding = only(repo.check(), "CO405")
    assert finding.library == a and finding.symbol == "counter()::c"


def test_co407_two_different_files_with_one_soname(repo):
    a = repo.library("a/ops/libv.so", "e/v12/libv.so")
    b = repo.library("b/ops/libv.so", "e/v1only/libv.so")
    repo.model("a", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{a}" }}\n')
    repo.model("b", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{b}" }}\n')
    assert "CO407" in codes(repo.check())


def test_co406_two_copies_of_one_tensorrt_plugin_library(repo):
    repo.model("m", 'platform: "tensorrt_plan"\n', model_file="model.plan")
    repo.manifest('[tensorrt]\nplugins = ["m/a/libplugin.so", "m/b/libplugin.so"]\n')
    repo.library("m/a/libplugin.so", "example/libtrt10_plugin.so")
    repo.library("m/b/libplugin.so", "example/libtrt10_plugin.so")
    finding = only(repo.check(), "CO406")
    assert finding.library == "/models/m/b/libplugin.so" and finding.predicted == "Could not register plugin creator"


def test_co406_one_onnxruntime_op_library_listed_twice_for_one_model(repo):
    first = repo.library("m/a/libop.so", "example/libort_op.so")
    second = repo.library("m/b/libop.so", "example/libort_op.so")
    repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: ["{first}", "{second}"] }}\n')
    assert only(repo.check(), "CO406").library == second


def test_different_onnxruntime_op_libraries_for_one_model_do_not_collide(repo):
    first = repo.library("m/a/libop.so", "example/libort_op.so")
    second = repo.library("m/b/libop.so", "example/libort_op_new_api.so")
    repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: ["{first}", "{second}"] }}\n')
    assert "CO406" not in codes(repo.check())


# -- versions and hygiene ----------------------------------------------------------------------------


def test_co501_a_plugin_built_for_another_tensorrt_major(repo):
    repo.model("m", 'platform: "tensorrt_plan"\n', model_file="model.plan")
    repo.manifest('[tensorrt]\nplugins = ["m/libplugin.so"]\n')
    repo.library("m/libplugin.so", "example/libtrt8_plugin.so")
    result = repo.check()
    assert codes(result) == {"CO501"}  # libnvinfer.so.8 is then not found: said by the CO501, no CO302 besides
    assert "libnvinfer.so.8 (TensorRT 8), which is not found" in only(result, "CO501").message
    assert result.plan.server_args == ("--backend-config=tensorrt,plugins=/models/m/libplugin.so",)


def test_co502_an_op_library_built_for_another_cuda_major(repo):
    lib = repo.library("m/ops/libop.so", "example/libcuda11_op.so")
    result = repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert "CUDA 11" in only(result, "CO502").message and "12.040" not in only(result, "CO502").message
    assert "CO302" not in codes(result)  # libcudart.so.11 is then not found: said by the CO502
    assert only(result, "CO502").predicted.endswith("libcudart.so.11: cannot open shared object file: No such file or "
                                                    "directory")


@needs_root
def test_co505_an_onnxruntime_op_library_needing_a_newer_api_version(repo):
    lib = repo.library("m/ops/libop.so", "example/libort_op_new_api.so")
    result = repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    finding = only(result, "CO505")
    assert finding.version == "VERS_1.30.0" and finding.severity is Severity.ERROR  # ld.so refuses the library
    assert finding.predicted.endswith(f"version `VERS_1.30.0' not found (required by {lib})")
    confirm_check(result, str(repo.root))


def test_a_plugin_for_the_containers_tensorrt_loads_cleanly(repo):
    repo.model("m", 'platform: "tensorrt_plan"\n', model_file="model.plan")
    repo.manifest('[tensorrt]\nplugins = ["m/libplugin.so"]\n')
    repo.library("m/libplugin.so", "example/libtrt10_plugin.so")
    assert not codes(repo.check())


def test_co601_a_library_writable_by_others(repo):
    lib = repo.library("m/ops/libop.so", "example/libort_op.so")
    os.chmod(repo.models / "m" / "ops" / "libop.so", 0o666)
    result = repo.model("m", f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{lib}" }}\n').check()
    assert "CO601" in codes(result)


# -- suppression and severity ------------------------------------------------------------------------


def test_an_ignore_entry_suppresses_by_code_and_symbol_glob(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest(
        '[host]\npreload = ["m/liba.so", "m/libb.so"]\n[check]\nignore = [{ code = "CO402", symbol = "fo*" }]\n')
    repo.library("m/liba.so", "b/liba.so")
    repo.library("m/libb.so", "b/libb.so")
    result = repo.check()
    assert "CO402" not in codes(result) and [f.code for f in result.suppressed] == ["CO402"]


def test_the_manifest_sets_the_failing_level(repo):
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[check]\nfail-on = "warning"\n')
    assert load_manifest(str(repo.models / "customops.toml")).fail_on == Severity.WARNING


def test_a_python_based_backend_is_served_by_libtriton_python_and_runs_in_the_python_backends_stub(repo):
    """A Python-based backend (<backend_dir>/mypy/model.py): the core loads the Python backend's library for it, and
    the backend runs the model in its own stub (mypy's directory has none), importing mypy's model.py."""
    backend = repo.root / "opt/tritonserver/backends"
    (backend / "mypy").mkdir()
    (backend / "mypy" / "model.py").write_text("# a Python-based backend\n")
    result = repo.model("m", 'backend: "mypy"\n').check()
    assert result.plan.dlopens[0].path == "/opt/tritonserver/backends/python/libtriton_python.so"
    assert not codes(result)
    (run,) = result.stubs
    assert run.stub.program == "/opt/tritonserver/backends/python/triton_python_backend_stub"
    assert run.python is not None and "/opt/tritonserver/backends/mypy" in run.python.sys_path


def test_a_profile_checks_loading_exactly_as_the_container_does(repo, tmp_path):
    """The profile keeps only what ld.so reads of each library; its skeleton gives the same verdicts."""
    lib = repo.library("m/ops/libop.so", "example/libtf_op_drift.so")
    repo.model("m", f'backend: "tensorflow"\nmodel_operations {{ op_library_filename: "{lib}" }}\n')
    repo.model("n", 'backend: "noexec"\n', **{"libtriton_noexec.so": "example/libtriton_noexec.so"})
    repo.model("o", 'backend: "pytorch"\n').manifest('[host]\npreload = ["o/libc10_interposer.so"]\n')
    repo.library("o/libc10_interposer.so", "example/libc10_interposer.so")
    direct = repo.check()
    profile = tmp_path / "profile.json"
    container = from_root(str(repo.root))
    write_profile(container, str(profile))
    moved = tmp_path / "checkout"
    shutil.move(str(repo.models), moved)  # CI has a checkout and the profile, not the container
    shutil.rmtree(repo.root)
    from customops.app.check import default_mounts

    via_profile = read_profile(str(profile), str(tmp_path / "cache"))
    result = run_check([str(moved)], load_manifest(str(moved / "customops.toml")), via_profile,
                       default_mounts([str(moved)], via_profile))
    assert [(f.code, f.model, f.predicted) for f in result.findings] == \
        [(f.code, f.model, f.predicted) for f in direct.findings]
    assert {f.code for f in direct.findings} == {"CO504", "CO202", "CO401"}
    size = profile.stat().st_size
    assert size < 2_000_000, f"profile of the fixture container is {size} bytes"


def test_co602_ld_preload_reaches_the_python_backend_stubs(repo):
    repo.model("py", 'backend: "python"\n', model_file="model.py")
    repo.model("m", 'backend: "pytorch"\n').manifest('[pytorch]\nops = ["m/libtorch_op.so"]\n')
    repo.library("m/libtorch_op.so", "example/libtorch_op.so")
    assert "py" in only(repo.check(), "CO602").message


def test_co603_a_library_from_outside_the_repository_and_the_image(repo, tmp_path):
    outside = tmp_path / "elsewhere" / "libop.so"
    outside.parent.mkdir()
    shutil.copy2(repo.tree / "example/libort_op.so", outside)
    config = f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{outside}" }}\n'
    result = repo.model("m", config).check()
    assert only(result, "CO603").library == str(outside)


def test_co307_a_set_user_id_server_ignores_preload_paths(repo):
    server = repo.root / "opt/tritonserver/bin/tritonserver"
    server.chmod(0o4755)
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/liba.so"]\n')
    repo.library("m/liba.so", "b/liba.so")
    assert "set-user-ID" in only(repo.check(), "CO307").message
