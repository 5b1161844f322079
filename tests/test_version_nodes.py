"""A version node that nobody defines (glibc elf/dl-version.c match_symbol): a non-weak need its provider does
not define refuses the object, whatever brought it in and however lazily it is bound; a weak one does not.
Stand-ins built here with gcc and version scripts, each verdict the real ld.so's: the fixture loader for the
linker model, the container's tritonserver (the fixture loader, chrooted) for `customops check`."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import needs_toolchain
from oracle import agree, confirm_check, run_in_container
from test_check_codes import Repo, codes, only

from customops.cli import main
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.linker.types import Dlopen, Environment, Scenario

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="the in-container oracle needs root (chroot in a mount namespace)")
pytestmark = [pytest.mark.oracle, needs_toolchain("native")]
SHT_GNU_VERNEED, VER_FLG_WEAK = 0x6FFFFFFE, 0x2
ORT_STUB = "const void *OrtGetApiBase(void) { static int base; return &base; }\n"
ORT_OP = ("extern const void *OrtGetApiBase(void);\n"
          "void *RegisterCustomOps(void *o, const void *a) { (void)o; (void)a; return (void *)OrtGetApiBase(); }\n")


def _gcc(out: Path, source: str, *flags: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name.split(".so")[0] + ".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    src.unlink()
    return out


def _provider(directory: Path, soname: str, node: str, source: str, *flags: str) -> Path:
    """A library named `soname` defining its functions under the one version node `node`."""
    script = directory / f"{node}.map"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"{node} {{ global: *; }};\n")
    return _gcc(directory / soname, source, f"-Wl,-soname,{soname}", f"-Wl,--version-script={script}", *flags)


def _mark_weak(path: Path, node: str) -> None:
    """Set VER_FLG_WEAK on `path`'s need of `node`: binutils 2.40 never sets vna_flags' weak bit itself (a weak
    undefined reference still gets a plain need), so the byte is patched in a built copy (ELF64 little-endian)."""
    data = bytearray(path.read_bytes())
    (shoff,), (shentsize, shnum) = struct.unpack_from("<Q", data, 0x28), struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        _, kind, _, _, offset, _, link, count = struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize)
        if kind != SHT_GNU_VERNEED:
            continue
        strings = struct.unpack_from("<Q", data, shoff + link * shentsize + 0x18)[0]
        need = offset
        for _ in range(count):
            _, entries, _, aux, following = struct.unpack_from("<HHIII", data, need)
            entry = need + aux
            for _ in range(entries):
                _, flags, _, name, step = struct.unpack_from("<IHHII", data, entry)
                if bytes(data[strings + name:]).split(b"\0", 1)[0] == node.encode():
                    struct.pack_into("<H", data, entry + 4, flags | VER_FLG_WEAK)
                entry += step
            need += following
    path.write_bytes(data)
    assert any(v.is_weak for n in ElfReader(use_cache=False).read(str(path)).version_needs for v in n.versions
               if v.name == node), "the weak bit is read back as readelf -V shows it (Flags: WEAK)"


@pytest.fixture
def ort(tmp_path: Path) -> tuple[Path, Path]:
    """An op library linked against a libfakeort.so.1 of release 1.15.1, and the directory of the one the
    process has, release 1.32.0: each defines only its own node, as ONNX Runtime's libraries do."""
    old = _provider(tmp_path / "old", "libfakeort.so.1", "VERS_1.15.1", ORT_STUB)
    _provider(tmp_path / "new", "libfakeort.so.1", "VERS_1.32.0", ORT_STUB)
    return _gcc(tmp_path / "libop.so", ORT_OP, "-Wl,--no-as-needed", str(old)), tmp_path / "new"


def test_a_missing_version_node_refuses_the_dlopen(linker, loader, ort):
    op, new = ort
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=str(new)), (Dlopen(str(op)),)))
    assert oracle.dlopens == [(str(op), f"{new}/libfakeort.so.1: version `VERS_1.15.1' not found "
                                        f"(required by {op})")]
    assert prediction.outcomes[-1].message == oracle.dlopens[0][1]


def test_a_defined_version_node_loads(linker, loader, ort, tmp_path):
    op, _ = ort
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=str(tmp_path / "old")),
                                                (Dlopen(str(op), calls=("RegisterCustomOps",)),)))
    assert oracle.dlopens == [(str(op), None)] and prediction.outcomes[-1].ok


def test_a_weak_missing_version_node_does_not_refuse_the_dlopen(linker, loader, tmp_path):
    old = _provider(tmp_path / "old", "libfakeort.so.1", "VERS_1.15.1", ORT_STUB)
    _provider(tmp_path / "new", "libfakeort.so.1", "VERS_1.32.0", ORT_STUB)
    op = _gcc(tmp_path / "libop.so", "extern const void *OrtGetApiBase(void) __attribute__((weak));\n"
              "long use(void) { return OrtGetApiBase ? 1 : 0; }\n", "-Wl,--no-as-needed", str(old))
    _mark_weak(op, "VERS_1.15.1")
    prediction, oracle = agree(linker, Scenario(loader, Environment(library_path=str(tmp_path / "new")),
                                                (Dlopen(str(op), calls=("use",)),)))
    assert oracle.dlopens == [(str(op), None)] and oracle.calls == [("use", "0")]
    assert prediction.outcomes[-1].ok


@pytest.fixture
def repo(tree, tmp_path) -> Repo:
    return Repo(tree, tmp_path)


def _future_glibc(directory: Path) -> Path:
    """A library that needs GLIBC_2.99 of libc.so.6: linked against a stand-in libc.so.6 defining that node
    (no glibc defines it), with nothing of the real one."""
    stub = _provider(directory / "stub", "libc.so.6", "GLIBC_2.99", "int future_fn(void) { return 99; }\n",
                     "-nostdlib")
    return _gcc(directory / "libfuture.so", "extern int future_fn(void);\nint use(void) { return future_fn(); }\n",
                "-nostdlib", "-Wl,-soname,libfuture.so", str(stub))


@needs_root
@pytest.mark.parametrize("manifest", ['[host]\npreload = ["m/libfuture.so"]\n',
                                      '[pytorch]\nops = ["m/libfuture.so"]\n',
                                      '[tensorflow]\npreload = ["m/libfuture.so"]\n',
                                      '[tensorrt]\nplugins = ["m/libfuture.so"]\nload = "preload"\n'],
                         ids=["host-preload", "pytorch-ops", "tensorflow-preload", "tensorrt-preload"])
def test_co306_a_preload_needing_a_glibc_version_the_container_lacks_stops_the_server(repo, tmp_path, manifest):
    repo.model("m", 'backend: "onnxruntime"\n').manifest(manifest)
    shutil.copy2(_future_glibc(tmp_path / "build"), repo.models / "m" / "libfuture.so")
    result = repo.check()
    finding = only(result, "CO306")
    assert "CO304" not in codes(result) and finding.severity is Severity.ERROR
    assert finding.library == "/models/m/libfuture.so" and finding.version == "GLIBC_2.99"
    assert finding.predicted == ("/opt/tritonserver/bin/tritonserver: /lib/x86_64-linux-gnu/libc.so.6: version "
                                 "`GLIBC_2.99' not found (required by /models/m/libfuture.so)")
    oracle = confirm_check(result, str(repo.root))
    assert oracle.returncode == 1 and oracle.stderr.strip() == finding.predicted  # exits 1 before any model


@needs_root
def test_co306_a_dependency_of_a_preload_needing_a_glibc_version_the_container_lacks_is_the_preloads(repo, tmp_path):
    """ld.so names the dependency that needs the version; the finding is on the preload the user wrote."""
    future = _future_glibc(tmp_path / "build")
    top = _gcc(tmp_path / "build" / "libtop.so", "int top(void) { return 1; }\n", "-Wl,--no-as-needed", str(future),
               "-Wl,-rpath,$ORIGIN")
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libtop.so"]\n')
    for built in (future, top):
        shutil.copy2(built, repo.models / "m" / built.name)
    result = repo.check()
    finding = only(result, "CO306")
    assert finding.library == "/models/m/libtop.so" and "/models/m/libfuture.so, which it needs" in finding.message
    assert finding.predicted.endswith("version `GLIBC_2.99' not found (required by /models/m/libfuture.so)")
    assert confirm_check(result, str(repo.root)).returncode == 1


def _ort_op_for_release(repo: Repo, directory: Path, node: str) -> str:
    """An ONNX Runtime op library linked against a stand-in libonnxruntime.so.1 of the release `node` names,
    at /models/m/ops/libop.so of a model that loads it."""
    ort = _provider(directory / "ort", "libonnxruntime.so.1", node, ORT_STUB)
    op = _gcc(directory / "libop.so", ORT_OP, "-Wl,--no-as-needed", str(ort))
    (repo.models / "m" / "ops").mkdir(parents=True)
    shutil.copy2(op, repo.models / "m" / "ops" / "libop.so")
    repo.model("m", 'backend: "onnxruntime"\nmodel_operations { op_library_filename: "/models/m/ops/libop.so" }\n')
    return "/models/m/ops/libop.so"


@needs_root
def test_co505_an_op_library_linked_against_an_older_onnxruntime_fails_through_the_backends_copy(repo, tmp_path):
    """The op library's libonnxruntime.so.1 is the backend's copy, already in the process (VERS_1.20.0 in the
    fixture container): ld.so checks that one, and refuses the op library."""
    lib = _ort_op_for_release(repo, tmp_path / "build", "VERS_1.15.1")
    result = repo.check()
    finding = only(result, "CO505")
    assert finding.severity is Severity.ERROR and finding.version == "VERS_1.15.1"
    assert finding.predicted == ("/opt/tritonserver/backends/onnxruntime/libonnxruntime.so.1: version "
                                 f"`VERS_1.15.1' not found (required by {lib})")
    confirm_check(result, str(repo.root))
    status = main(["check", str(repo.models), "--container-root", str(repo.root), "--no-cache", "--format", "json"])
    assert status == 1


@needs_root
def test_an_op_library_linked_against_the_containers_onnxruntime_release_loads(repo, tmp_path):
    _ort_op_for_release(repo, tmp_path / "build", "VERS_1.20.0")
    result = repo.check()
    assert not codes(result)
    confirm_check(result, str(repo.root))


@needs_root
def test_a_weak_missing_version_node_of_a_preload_is_only_a_warning_of_ld_so(repo, tmp_path):
    """ld.so prints `weak version ... not found` at start (its check is verbose there, silent in dlopen) and the
    server goes on: no finding."""
    stub = _provider(tmp_path / "stub", "libc.so.6", "GLIBC_2.99", "int future_fn(void) { return 99; }\n",
                     "-nostdlib")
    lib = _gcc(tmp_path / "libweakfuture.so", "extern int future_fn(void) __attribute__((weak));\n"
               "int use(void) { return future_fn ? future_fn() : 0; }\n", "-nostdlib", "-Wl,--no-as-needed", str(stub))
    _mark_weak(lib, "GLIBC_2.99")
    repo.model("m", 'backend: "onnxruntime"\n').manifest('[host]\npreload = ["m/libweakfuture.so"]\n')
    shutil.copy2(lib, repo.models / "m" / "libweakfuture.so")
    result = repo.check()
    assert not codes(result) and result.prediction.exit_message is None
    oracle = run_in_container(str(repo.root), result.plan)
    assert oracle.returncode == 0 and oracle.stderr.strip() == (
        "/opt/tritonserver/bin/tritonserver: /lib/x86_64-linux-gnu/libc.so.6: weak version `GLIBC_2.99' not found "
        "(required by /models/m/libweakfuture.so)")
    assert [path for path, _ in oracle.dlopens] == [s.path for s in result.plan.dlopens]
