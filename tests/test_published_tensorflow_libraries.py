"""Published TensorFlow op libraries preloaded into the server ([tensorflow] preload: LD_PRELOAD, then the
backend loads libtensorflow_framework.so.2 and libtensorflow_cc.so.2), checked against a container root
holding the TensorFlow release they were built for, and loaded the same way by the real thing.

Both libraries below override hundreds of the framework's definitions (CO401), protobuf descriptor tables
among them; one aborts every process it is preloaded into and the other loads:
- tensorflow-text 2.21.1 under TensorFlow 2.21.0: its op libraries export the tensorflow/*.proto descriptor
  tables but keep private copies of the google/protobuf/*, tsl and xla tables those import, so the framework
  registers google/protobuf/any.proto a second time and aborts (CO406);
- tensorflow-decision-forests 1.12.0 under TensorFlow 2.19.0: it exports the google/protobuf/* tables it
  replaces together with everything they import, so each file is registered once (CO401 only).

The wheels are downloaded with pip into ~/.cache/customops-wheels/ (reused afterwards); without the index
the tests skip and say so.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from customops.app.check import run_check
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.findings import Finding
from customops.inspect.protobuf_descriptors import embedded_imports, proto_file, table_symbol, tables
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import published_tensorflow as published
from fixtures import wheels
from fixtures.real_container import package, place

pytestmark = pytest.mark.frameworks
LOAD_ERRORS = {"CO301", "CO302", "CO303", "CO304", "CO306", "CO307", "CO308"}
TEXT_NGRAMS = "tensorflow_text/python/ops/_ngrams_op.so"
TFDF_INFERENCE = "tensorflow_decision_forests/tensorflow/ops/inference/inference.so"


def installed(distribution: str, version: str, module: str) -> Path | None:
    """The installed package's directory when this environment has exactly that release."""
    try:
        if importlib.metadata.version(distribution) != version:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    return package(module)


def framework(version: str) -> Path:
    """The directory holding tensorflow-cpu==version's two framework libraries."""
    found = installed("tensorflow-cpu", version, "tensorflow")
    if found is not None and all((found / name).is_file() for name in published.FRAMEWORK):
        return found
    try:
        return published.framework(version)
    except wheels.Unavailable as exc:
        pytest.skip(f"no tensorflow-cpu {version} wheel: {exc}")


def library(project: str, version: str, member: str) -> Path:
    module = member.split("/")[0]
    found = installed(project, version, module)
    if found is not None and (found.parent / member).is_file():
        return found.parent / member
    try:
        return published.extract(project, version, (member,))[Path(member).name]
    except wheels.Unavailable as exc:
        pytest.skip(f"no {project} {version} wheel: {exc}")


def check_preloaded(tree: Path, root: Path, libraries: Path, op_library: Path) -> list[Finding]:
    """customops check of one TensorFlow model whose manifest preloads `op_library`."""
    published.tensorflow_root(tree, root, libraries)
    repo = root / "models"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "tf" / "1").mkdir(parents=True)
    (repo / "tf" / "config.pbtxt").write_text('backend: "tensorflow"\n')
    (repo / "tf" / "1" / "model.graphdef").write_bytes(b"")  # the core serves it as tensorflow_graphdef
    place(op_library, repo / "tf" / "ops" / op_library.name)
    (repo / "customops.toml").write_text(f'[tensorflow]\npreload = ["tf/ops/{op_library.name}"]\n')
    result = run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(root)), ())
    return [f for f in result.findings if f.library == f"/models/tf/ops/{op_library.name}"]


def preloaded_into_tensorflow(op_library: Path, libraries: Path) -> subprocess.CompletedProcess[str]:
    """The real thing: a process started with the library in LD_PRELOAD (and the framework's directory on
    LD_LIBRARY_PATH, as `customops launch` sets it), which then loads the framework libraries the way the
    TensorFlow backend does, dlopen(RTLD_LOCAL)."""
    code = ("import ctypes, sys\n"
            f"for name in {published.FRAMEWORK!r}:\n"
            f"    ctypes.CDLL({str(libraries)!r} + '/' + name, ctypes.RTLD_LOCAL)\n"
            "print('loaded')\n")
    env = {**os.environ, "LD_PRELOAD": str(op_library), "LD_LIBRARY_PATH": str(libraries),
           "TF_CPP_MIN_LOG_LEVEL": "0"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def test_a_preloaded_library_whose_descriptor_tables_import_private_copies_aborts_the_server(tree, tmp_path):
    libraries = framework("2.21.0")
    ngrams = library("tensorflow-text", "2.21.1", TEXT_NGRAMS)
    findings = check_preloaded(tree, tmp_path / "root", libraries, ngrams)
    (finding,) = [f for f in findings if f.code == "CO406"]
    assert finding.severity == Severity.ERROR
    assert finding.predicted == "File already exists in database: google/protobuf/any.proto"
    assert "registered twice: google/protobuf/any.proto" in " ".join(finding.evidence)
    assert [f.severity for f in findings if f.code == "CO401"] == [Severity.WARNING]
    assert not [f for f in findings if f.code in LOAD_ERRORS]  # it loads; its initialisers abort
    real = preloaded_into_tensorflow(ngrams, libraries)
    assert real.returncode == -signal.SIGABRT, real.stderr[-2000:]
    assert finding.predicted in real.stderr and "Check failed: GeneratedDatabase()->Add(" in real.stderr


def test_a_preloaded_library_that_exports_every_table_it_replaces_only_interposes(tree, tmp_path):
    libraries = framework("2.19.0")
    inference = library("tensorflow-decision-forests", "1.12.0", TFDF_INFERENCE)
    findings = check_preloaded(tree, tmp_path / "root", libraries, inference)
    assert [(f.code, f.severity) for f in findings] == [("CO401", Severity.WARNING)]
    reader = ElfReader(use_cache=False)  # it too replaces the framework's descriptor tables, any.proto's among them
    replaced = tables(reader.read(inference))[0] & tables(reader.read(libraries / published.FRAMEWORK[0]))[0]
    assert "google/protobuf/any.proto" in replaced
    real = preloaded_into_tensorflow(inference, libraries)
    assert real.returncode == 0 and real.stdout.strip() == "loaded", real.stderr[-2000:]
    assert "File already exists in database" not in real.stderr


@pytest.fixture(scope="module")
def miniature() -> Path:
    from fixtures import descriptor_tables

    return descriptor_tables.build()


@pytest.mark.parametrize(("op_library", "aborts"), [("libops_private.so", True), ("libops_shared.so", False)])
def test_the_miniature_of_descriptor_registration_behaves_as_the_published_libraries(tree, tmp_path, miniature,
                                                                                      op_library, aborts):
    """Without the wheels: fixtures/src/descriptor_tables/ registers tables as protobuf does. The op library whose
    replacing table imports a hidden table aborts the preloaded process; the one exporting it loads; customops
    tells them apart (CO406 against CO401 only), and the real load agrees."""
    library = miniature / op_library
    findings = check_preloaded(tree, tmp_path / "root", miniature, library)
    codes = sorted(f.code for f in findings)
    real = preloaded_into_tensorflow(library, miniature)
    if aborts:
        assert codes == ["CO401", "CO406"]
        (finding,) = [f for f in findings if f.code == "CO406"]
        assert finding.predicted == "File already exists in database: google/protobuf/any.proto"
        assert real.returncode == -signal.SIGABRT and finding.predicted in real.stderr, real.stderr
    else:
        assert codes == ["CO401"]
        assert real.returncode == 0 and real.stdout.strip() == "loaded", real.stderr
    # Loaded into a local scope (model_operations), neither replaces anything: both load.
    local = subprocess.run([sys.executable, "-c", "import ctypes\n"
                            f"ctypes.CDLL({str(miniature / published.FRAMEWORK[0])!r})\n"
                            f"ctypes.CDLL({str(library)!r}, ctypes.RTLD_LOCAL)\n"],
                           capture_output=True, text=True, timeout=60)
    assert local.returncode == 0, local.stderr


def test_descriptor_table_names_are_protoc_file_identifiers():
    for proto in ("google/protobuf/any.proto", "tensorflow/core/framework/op_def.proto", "a-b/c+d_e.proto"):
        assert proto_file(table_symbol(proto)) == proto
    assert table_symbol("google/protobuf/any.proto") == b"descriptor_table_google_2fprotobuf_2fany_2eproto"
    assert proto_file(b"descriptor_table_protodef_google_2fprotobuf_2fany_2eproto") is None
    assert proto_file(b"TableStruct_google_2fprotobuf_2fany_2eproto") is None


def test_the_imports_of_an_embedded_file_descriptor_are_read_from_its_serialized_form():
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    first = descriptor_pb2.FileDescriptorProto(
        name="lab/ops.proto", package="lab", dependency=["google/protobuf/any.proto", "lab/types.proto"],
        message_type=[descriptor_pb2.DescriptorProto(name="Op")]).SerializeToString()
    second = descriptor_pb2.FileDescriptorProto(name="lab/types.proto", syntax="proto3").SerializeToString()
    blob = b"\x7fELF junk\n\x05x.pro\0" + first + b"\0\0lab/ops.proto\0" + second + b"\n\x03abc"
    assert embedded_imports(blob) == {"lab/ops.proto": ("google/protobuf/any.proto", "lab/types.proto"),
                                      "lab/types.proto": ()}


@settings(max_examples=300, deadline=None)
@given(before=st.binary(max_size=200), after=st.binary(max_size=200), junk=st.binary(max_size=400))
def test_reading_embedded_descriptors_never_fails_and_finds_one_among_any_bytes(before, after, junk):
    assert isinstance(embedded_imports(junk), dict)
    serialized = b"\n\x0dlab/ops.proto\x12\x03lab\x1a\x19google/protobuf/any.proto\"\x04\n\x02Op"
    found = embedded_imports(b"\0" + before + b"\0" + serialized + after)
    assert found["lab/ops.proto"] == ("google/protobuf/any.proto",)


def test_libraries_that_cannot_be_read_have_no_descriptor_facts(tmp_path):
    from customops.inspect.protobuf_descriptors import read

    text = tmp_path / "notes.so"
    text.write_text("not an ELF file\n")
    assert read([str(text), str(tmp_path / "missing.so"), str(tmp_path)], ElfReader(use_cache=False)) == {}
