"""--probe against containers of other framework versions than the probe interpreter's (tensorflow-cpu 2.15.0
and torch 2.14.1 wheels fetched with pip, laid out as the container's backends): the container's exact
versions are read from its files, TensorFlow probes run with the container's own libtensorflow_cc.so.2 and
agree with the real TensorFlow of that version, and a load failure seen with another version than the
container's is information beside CO507, not an error."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from glibc_release import replace_glibc

from customops.app.check import run_check
from customops.codes import Severity
from customops.probe.groups import ProbeSettings
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import real_container, wheels
from fixtures.real_container import place

pytestmark = pytest.mark.frameworks
OLD_TENSORFLOW, OTHER_TORCH = "2.15.0", "2.14.1"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=1800)


def wheel(project: str, version: str) -> Path:
    """The wheel of project==version (fixtures.wheels); skipped when the index is not reachable."""
    try:
        return wheels.wheel(project, version)
    except wheels.Unavailable as exc:
        pytest.skip(f"{exc} (is the package index reachable?)")


def wheel_version(path: Path) -> str:
    """The Version: of the wheel's own metadata."""
    with zipfile.ZipFile(path) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return next(line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Version:"))


def site_with(project: str, version: str) -> Path:
    """A directory with project==version and its dependencies installed (pip install --target), cached."""
    site = wheels.CACHE / f"site-{project}-{version}"
    if not (site / project.split("-")[0]).is_dir():
        partial = site.with_name(site.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        got = pip("install", "--no-compile", "--only-binary=:all:", "--target", str(partial), f"{project}=={version}")
        if got.returncode != 0:
            pytest.skip(f"pip install {project}=={version} failed (is the package index reachable?): "
                        f"{(got.stderr.strip().splitlines() or [''])[-1]}")
        shutil.rmtree(site, ignore_errors=True)
        partial.rename(site)
    return site


def root_with(tree: Path, tmp_path_factory, *wheels: Path) -> Path:
    chosen = tmp_path_factory.mktemp("wheels")
    for found in wheels:
        (chosen / found.name).symlink_to(found)
    try:
        return real_container.assemble_with_wheels(tree, tmp_path_factory.mktemp("other") / "root", chosen)
    except LookupError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def installed_root(tree, tmp_path_factory) -> Path:
    try:
        return real_container.assemble(tree, tmp_path_factory.mktemp("installed") / "root")
    except LookupError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tensorflow_root(installed_root, tree, tmp_path_factory) -> Path:
    return root_with(tree, tmp_path_factory, wheel("tensorflow-cpu", OLD_TENSORFLOW))


@pytest.fixture(scope="module")
def torch_root(installed_root, tree, tmp_path_factory) -> Path:
    """A container of torch 2.14.1's wheel, with stubs of the CUDA libraries it needs: the container's own
    libtorch probes on a machine without a CUDA runtime too."""
    root = root_with(tree, tmp_path_factory, wheel("torch", OTHER_TORCH))
    real_container.with_cuda_stubs(root / "opt/tritonserver/backends/pytorch")
    return root


def probing(tmp_path: Path) -> ProbeSettings:
    return ProbeSettings(sys.executable, None, timeout=240, cache_dir=tmp_path / "probe-cache")


def tensorflow_repository(root: Path, libraries: dict[str, Path]) -> Path:
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    for name, library in libraries.items():
        place(library, repo / name / "ops" / library.name)
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            'platform: "tensorflow_savedmodel"\nbackend: "tensorflow"\n'
            f'model_operations {{ op_library_filename: "/models/{name}/ops/{library.name}" }}\n')
    return repo


def test_the_containers_exact_tensorflow_version_is_read_from_its_files(installed_root, tensorflow_root):
    assert from_root(str(installed_root)).facts.tensorflow == importlib.metadata.version("tensorflow-cpu")
    assert from_root(str(tensorflow_root)).facts.tensorflow == wheel_version(wheel("tensorflow-cpu", OLD_TENSORFLOW))
    assert wheel_version(wheel("tensorflow-cpu", OLD_TENSORFLOW)) == OLD_TENSORFLOW


def test_the_containers_exact_torch_version_is_read_from_its_files(installed_root, torch_root):
    assert from_root(str(installed_root)).facts.pytorch == importlib.metadata.version("torch").split("+")[0]
    assert from_root(str(torch_root)).facts.pytorch == wheel_version(wheel("torch", OTHER_TORCH)).split("+")[0]
    assert from_root(str(torch_root)).facts.pytorch == OTHER_TORCH


NEW_C10 = "_ZN3c104impl17FakeTensorModeTLS8activateEv"  # c10::impl::FakeTensorModeTLS::activate(): 2.14, not 2.13


def built_against_newer_torch(root: Path, dest: Path) -> Path:
    """An op library that uses a c10 function torch 2.14 has and 2.13 lacks, linked against the container's."""
    source = dest.with_suffix(".c")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(f"extern void {NEW_C10}(void);\nvoid (*const uses_new_c10)(void) = {NEW_C10};\n")
    pytorch = root / "opt/tritonserver/backends/pytorch"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(dest), str(source), "-Wl,--no-as-needed", f"-L{pytorch}",
                    "-l:libc10.so"], check=True, capture_output=True)
    return dest


def test_a_torch_probe_of_another_version_than_the_containers_is_evidence_unless_the_containers_libtorch_fails(
        torch_root, tree, tmp_path):
    newer = built_against_newer_torch(torch_root, tmp_path / "newer" / "libnewer_c10.so")
    aborts = tree / "probe" / "libaborts.so"  # its constructor aborts: it fails to load with any torch
    repo = torch_root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "pt" / "1").mkdir(parents=True)
    (repo / "pt" / "config.pbtxt").write_text('backend: "pytorch"\n')
    for library in (newer, aborts):
        place(library, repo / "pt" / "ops" / library.name)
    (repo / "customops.toml").write_text(f'[pytorch]\nops = ["pt/ops/{newer.name}", "pt/ops/{aborts.name}"]\n')
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(torch_root)), (),
                       probe=probing(tmp_path))
    probed = importlib.metadata.version("torch")
    by_library = {f.library: f for f in result.findings if f.code == "CO409"}
    evidence = by_library[f"/models/pt/ops/{newer.name}"]  # fails with the interpreter's torch, loads in the
    assert evidence.severity == Severity.INFO and "Could not load this library" in evidence.message  # container's
    assert OTHER_TORCH in evidence.message and probed in evidence.message
    assert any(e.startswith(f"probe (the container's torch {OTHER_TORCH}, without Python): loaded")
               for e in evidence.evidence), evidence.evidence
    verdict = by_library[f"/models/pt/ops/{aborts.name}"]  # the container's own libtorch fails too: an error
    assert verdict.severity == Severity.ERROR and f"the container's torch {OTHER_TORCH}" in verdict.message
    assert "SIGABRT" in verdict.message
    (versions,) = [f for f in result.findings if f.code == "CO507"]
    assert probed in versions.message and OTHER_TORCH in versions.message
    assert any(newer.name in e and aborts.name in e and "CO409" in e for e in versions.evidence), versions.evidence

    def really(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    failed = really(f"import torch; torch.ops.load_library({str(newer)!r})")  # the real torch the probe used
    assert failed.returncode != 0 and f"undefined symbol: {NEW_C10}" in failed.stderr
    assert really(f"import torch; torch.ops.load_library({str(aborts)!r})").returncode != 0
    libtorch = torch_root / "opt/tritonserver/backends/pytorch/libtorch_cpu.so"  # the container's, without Python
    assert really(f"import ctypes; ctypes.CDLL({str(libtorch)!r}); ctypes.CDLL({str(newer)!r})").returncode == 0


def test_a_tensorflow_probe_uses_the_containers_own_tensorflow_and_agrees_with_that_version(tensorflow_root,
                                                                                            tmp_path):
    current = real_container.package("tensorflow_text")
    if current is None:
        pytest.skip("tensorflow-text is not installed")
    newer = current / "python" / "ops" / "_ngrams_op.so"  # built for the interpreter's TensorFlow
    older = tmp_path / "text-2.15" / "_ngrams_op.so"  # built for TensorFlow 2.15
    real_container.replace_from_wheel(wheel("tensorflow-text", OLD_TENSORFLOW),
                                      {"tensorflow_text/python/ops/_ngrams_op.so": older})
    repo = tensorflow_repository(tensorflow_root, {"tf_new": newer, "tf_old": older})
    result = run_check([str(repo)], load_manifest(None), from_root(str(tensorflow_root)), (), probe=probing(tmp_path))
    assert not [f for f in result.findings if f.code == "CO507"]  # probed with the container's own TensorFlow
    cc = tensorflow_root / "opt/tritonserver/backends/tensorflow/libtensorflow_cc.so.2"
    assert f"probed 2 tensorflow op libraries with tensorflow {OLD_TENSORFLOW} ({cc})" in result.notes, result.notes

    def probe_says(model: str) -> list[str]:
        served = f"/models/{model}/ops/_ngrams_op.so"
        return [e for f in result.findings if f.library == served and f.level == Severity.ERROR
                for e in f.evidence if e.startswith(f"probe (tensorflow {OLD_TENSORFLOW})")]

    site = site_with("tensorflow-cpu", OLD_TENSORFLOW)

    def really(library: Path) -> tuple[bool, str]:
        code = (f"import sys; sys.path.insert(0, {str(site)!r}); import tensorflow as tf\n"
                f"assert tf.__version__ == {OLD_TENSORFLOW!r}, tf.__version__\n"
                f"tf.load_op_library({str(library)!r})\n")
        proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        return proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]

    loads, _ = really(older)
    assert loads and probe_says("tf_old") == []
    loads, message = really(newer)
    (seen,) = probe_says("tf_new")
    assert not loads and "undefined symbol" in message
    assert message.split("undefined symbol: ")[1] in seen, (seen, message)


def unloadable_here(root: Path, library: Path) -> None:
    """Give the container a newer glibc (Debian trixie's 2.41) and replace the (hard-linked) library by a copy that
    needs a system library built for it (strlcpy, GLIBC_2.38), as a container built on a newer system has: the
    container loads it, this machine's older glibc cannot, even with the container's files handed to the probe."""
    libc = replace_glibc(root, "trixie")
    system = root / "usr/lib/x86_64-linux-gnu/libzz.so.1"
    source = root.parent / "zz.c"
    source.write_text("#include <stddef.h>\nsize_t strlcpy(char *, const char *, size_t);\n"
                      "size_t zz_copy(char *d, const char *s, size_t n) { return strlcpy(d, s, n); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(system), "-Wl,-soname,libzz.so.1", str(source),
                    libc], check=True, capture_output=True)
    data = bytearray(library.read_bytes())
    at = data.index(b"\0librt.so.1\0")
    data[at + 1:at + 11] = b"libzz.so.1"
    library.unlink()
    library.write_bytes(bytes(data))


def test_a_tensorflow_probe_falls_back_to_the_interpreters_tensorflow_and_a_failure_there_is_evidence(
        tensorflow_root, tmp_path):
    current = real_container.package("tensorflow_text")
    if current is None:
        pytest.skip("tensorflow-text is not installed")
    root = tmp_path / "root"
    shutil.copytree(tensorflow_root, root, symlinks=True, copy_function=os.link,
                    ignore=shutil.ignore_patterns("models"))
    unloadable_here(root, root / "opt/tritonserver/backends/tensorflow/libtensorflow_cc.so.2")
    older = tmp_path / "text-2.15" / "_ngrams_op.so"  # built for TensorFlow 2.15, the container's
    real_container.replace_from_wheel(wheel("tensorflow-text", OLD_TENSORFLOW),
                                      {"tensorflow_text/python/ops/_ngrams_op.so": older})
    repo = tensorflow_repository(root, {"tf_old": older})
    result = run_check([str(repo)], load_manifest(None), from_root(str(root)), (), probe=probing(tmp_path))
    assert from_root(str(root)).facts.tensorflow == OLD_TENSORFLOW
    probed = importlib.metadata.version("tensorflow-cpu")
    (note,) = [n for n in result.notes if n.startswith("probed 1 tensorflow op library")]
    assert f"with tensorflow {probed} (the container's libtensorflow_cc.so.2 did not load here: " in note, note
    assert "libzz.so.1" in note
    (versions,) = [f for f in result.findings if f.code == "CO507"]
    assert probed in versions.message and OLD_TENSORFLOW in versions.message
    served = f"/models/tf_old/ops/{older.name}"
    assert any(served in e and "CO409" in e for e in versions.evidence), versions.evidence
    about = [f for f in result.findings if f.library == served]
    assert not [f for f in about if f.level == Severity.ERROR], about  # the failure with 2.21 is no error
    (seen,) = [f for f in about if f.code == "CO409"]
    assert seen.severity == Severity.INFO and "undefined symbol" in seen.message
    proc = subprocess.run([sys.executable, "-c", f"import tensorflow as tf; tf.load_op_library({str(older)!r})"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode != 0 and "undefined symbol" in proc.stderr  # what TensorFlow {probed} does with it
