"""Probes run what the container has (issue #38 §5): `check --probe` loads each op library against the
container's own files, not the checker's, and says when it cannot reproduce the container.

- What an op library needs is loaded from the container's files, as the container's loader finds them, before
  the library: a library whose dependency only the container has loads in the probe as it loads in the container
  (the real ld.so in a chroot), where a probe that searched this machine failed.
- Torch: every library is loaded with the container's own libtorch too (without Python): a library that loads
  with the checker's torch and fails with the container's is an error, with the container's message.
- A probe on another glibc than the container's cannot reproduce it: a failure it sees is evidence, not a
  verdict, and the notes say which glibc each side has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_toolchain
from glibc_release import replace_glibc
from oracle import confirm_check, run_in_container
from test_probe_framework_versions import OTHER_TORCH, probing, root_with, wheel

from customops.app.check import run_check
from customops.codes import Severity
from customops.probe.frameworks import probe_group
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import real_container
from fixtures.real_container import place

pytestmark = [pytest.mark.frameworks, pytest.mark.oracle, needs_toolchain("native")]
HELPER = "/opt/helper/lib"  # a directory only the container has


@pytest.fixture(scope="module")
def real_root(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return real_container.assemble(tree, tmp_path_factory.mktemp("real") / "root")
    except LookupError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def torch_root(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A container of another torch than the checker's (torch 2.14.1's wheel), CUDA libraries stubbed."""
    root = root_with(tree, tmp_path_factory, wheel("torch", OTHER_TORCH))
    real_container.with_cuda_stubs(root / "opt/tritonserver/backends/pytorch")
    return root


def gcc(dest: Path, source: str, *flags: str) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    code = dest.with_suffix(".c")
    code.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(dest), str(code), *flags], check=True, capture_output=True)
    return dest


def needs_a_helper_only_the_container_has(root: Path, work: Path) -> Path:
    """An ONNX Runtime op library that needs libhelper.so, found through its RUNPATH in a directory of the container
    (not of this machine), and binds a function of it at load."""
    helper = gcc(root / HELPER.lstrip("/") / "libhelper.so", "int helper_value(void) { return 7; }\n",
                 "-Wl,-soname,libhelper.so")
    return gcc(work / "libneeds_helper.so",
               "extern int helper_value(void);\nint (*const uses_helper)(void) = helper_value;\n"
               "void *RegisterCustomOps(void *options, const void *api) { (void)options; (void)api; return 0; }\n",
               f"-L{helper.parent}", "-lhelper", f"-Wl,-rpath,{HELPER}")


def onnxruntime_repository(root: Path, library: Path) -> Path:
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    place(library, repo / "onnx_m" / "ops" / library.name)
    (repo / "onnx_m" / "1").mkdir(parents=True)
    (repo / "onnx_m" / "config.pbtxt").write_text(
        f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "/models/onnx_m/ops/{library.name}" }}\n')
    return repo


def test_a_probe_loads_what_an_op_library_needs_from_the_containers_files(real_root, tmp_path):
    assert not os.path.exists(HELPER)  # this machine has no such directory: only the container finds libhelper.so
    library = needs_a_helper_only_the_container_has(real_root, tmp_path)
    repo = onnxruntime_repository(real_root, library)
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    served = f"/models/onnx_m/ops/{library.name}"
    assert not [f for f in result.findings if f.library == served and f.level == Severity.ERROR], result.findings
    assert "the onnxruntime probes loaded what 1 of its library need from the container's files, as its loader " \
           "finds them" in result.notes, result.notes
    oracle = confirm_check(result, str(real_root))  # the real ld.so in the container loads it
    assert (served, None) in oracle.dlopens
    # searched on this machine, as a probe did before, the same library fails: the test tells the two apart
    (searched,) = probe_group((str(repo / "onnx_m" / "ops" / library.name),), framework="onnxruntime",
                              runtime=str(next((real_root / "opt/tritonserver/backends/onnxruntime").glob(
                                  "libonnxruntime.so.1.*"))), timeout=240)
    assert searched.status.value == "failed" and "libhelper.so: cannot open shared object file" in searched.message


def checkers_own(checker: Path, container: Path) -> str:
    """A function the checker's libtorch_cpu.so exports and the container's (another torch) does not, one of
    torch's own namespaces (at::, torch::) where there is one."""
    def functions(path: Path) -> set[str]:  # binutils' view of the dynamic symbol table: T, a defined function
        listed = subprocess.run(["nm", "-D", "--defined-only", "-P", str(path)], capture_output=True, text=True,
                                check=True).stdout
        return {fields[0] for fields in (line.split() for line in listed.splitlines())
                if len(fields) > 1 and fields[1] == "T" and "@" not in fields[0]}

    only = sorted(functions(checker) - functions(container))
    return next((name for name in only if name.startswith(("_ZN2at", "_ZN5torch"))), only[0])


def test_a_torch_library_that_loads_with_the_checkers_torch_and_not_the_containers_is_an_error(torch_root, tmp_path):
    torch = real_container.package("torch")
    assert torch is not None
    libtorch = torch_root / "opt/tritonserver/backends/pytorch/libtorch_cpu.so"  # the container's
    symbol = checkers_own(torch / "lib" / "libtorch_cpu.so", libtorch)
    library = gcc(tmp_path / "libchecker_torch.so", f"extern void {symbol}(void);\n"
                  f"void (*const uses_torch)(void) = {symbol};\n", "-Wl,--no-as-needed", f"-L{torch / 'lib'}",
                  "-l:libtorch_cpu.so")
    repo = torch_root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    place(library, repo / "pt" / "ops" / library.name)
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["pt/ops/{library.name}"]\n')
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(torch_root)), (),
                       probe=probing(tmp_path))
    served = f"/models/pt/ops/{library.name}"
    errors = [f for f in result.findings if f.library == served and f.level == Severity.ERROR]
    said = f"probe (the container's torch {OTHER_TORCH}, its libtorch without Python): failed when loaded alone"
    seen = [e for f in errors for e in f.evidence if e.startswith(said)]
    assert seen and f"undefined symbol: {symbol}" in seen[0], [f.evidence for f in errors]

    def really(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    assert really(f"import torch; torch.ops.load_library({str(library)!r})").returncode == 0  # the checker's: loads
    failed = really(f"import ctypes; ctypes.CDLL({str(libtorch)!r}); ctypes.CDLL({str(library)!r})")
    assert failed.returncode != 0 and f"undefined symbol: {symbol}" in failed.stderr


def aborting_repository(root: Path, work: Path) -> Path:
    """An ONNX Runtime op library whose constructor aborts: nothing static predicts that, only a load shows it."""
    library = gcc(work / "libaborting_ops.so", "#include <stdlib.h>\n"
                  "__attribute__((constructor)) static void dies(void) { abort(); }\n"
                  "void *RegisterCustomOps(void *options, const void *api) { (void)options; (void)api; return 0; }\n")
    return onnxruntime_repository(root, library)


def test_a_failure_the_probe_sees_on_the_containers_glibc_is_an_error(real_root, tmp_path):
    repo = aborting_repository(real_root, tmp_path)
    result = run_check([str(repo)], load_manifest(None), from_root(str(real_root)), (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO409"]
    assert finding.severity == Severity.ERROR and "SIGABRT" in finding.message
    assert not [n for n in result.notes if n.startswith("the probes ran on this machine's glibc")]
    aborted = run_in_container(str(real_root), result.plan)  # the real ld.so in the container: the same abort
    assert aborted.returncode != 0 and aborted.dlopens[-1:] != [("/models/onnx_m/ops/libaborting_ops.so", None)]


def test_a_failure_the_probe_sees_on_another_glibc_than_the_containers_is_evidence(real_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(real_root, root, symlinks=True, copy_function=os.link, ignore=shutil.ignore_patterns("models"))
    replace_glibc(root, "trixie")  # glibc 2.41; this machine's is older
    theirs = from_root(str(root)).facts.glibc
    assert theirs == "GLIBC_2.41"
    repo = aborting_repository(root, tmp_path)
    result = run_check([str(repo)], load_manifest(None), from_root(str(root)), (), probe=probing(tmp_path))
    (finding,) = [f for f in result.findings if f.code == "CO409"]
    assert finding.severity == Severity.INFO and "SIGABRT" in finding.message
    here = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    assert any(e.startswith(f"the probe ran on this machine's glibc {here}, the container has glibc 2.41: this "
                            "failure is evidence") for e in finding.evidence), finding.evidence
    assert (f"the probes ran on this machine's glibc {here}, the container has glibc 2.41: a load failure they see "
            "is evidence for the container, not a verdict") in result.notes
    assert not [f for f in result.findings if f.level == Severity.ERROR]
