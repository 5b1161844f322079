"""CO406 for protobuf pools (customops.rules.descriptor_pools): two libraries of the server that carry protoc's
generated code for one .proto file and register it into one protobuf runtime abort the server, however each
was loaded (RTLD_LOCAL does not separate two libraries that need one libprotobuf.so); the same file in two
runtimes, or one table registered through two references, loads. Built from fixtures/src/protobuf_pools/ with
Debian's protoc and libprotobuf (protobuf-compiler, libprotobuf-dev: scripts/test.sh installs them as root;
without them the tests skip), checked in a copy of the fixture container, and loaded there by the real ld.so
and libprotobuf."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from oracle import run_in_container

from customops.app.check import run_check
from customops.codes import Severity
from customops.elf.cache import ElfReader
from customops.inspect.protobuf_registrations import CHECKED, check_line, read
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import protobuf_pools

LIBDIR = "usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def pools() -> Path:
    try:
        return protobuf_pools.build()
    except protobuf_pools.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def root(tree: Path, tmp_path: Path, pools: Path) -> Path:
    """The fixture container with the shared libprotobuf (and its libz) where ld.so finds them."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    reader = ElfReader(use_cache=False)
    runtime = protobuf_pools.runtime()
    for library in (runtime, *_dependency(reader, runtime, "libz.so")):
        shutil.copy2(library, root / LIBDIR / (reader.read(str(library)).soname or library.name))
    return root


def _dependency(reader: ElfReader, library: Path, prefix: str) -> list[Path]:
    names = [n for n in reader.read(str(library)).needed if n.startswith(prefix)]
    return [Path(p).resolve() for n in names for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
            if Path(p := f"{d}/{n}").exists()][:1]


def check(root: Path, pools: Path, op_libraries: tuple[str, ...], preload: str | None = None):  # type: ignore[no-untyped-def]
    """One ONNX Runtime model per op library (each dlopen()ed RTLD_LOCAL by the backend), and the preload."""
    models = root / "models"
    for i, name in enumerate(op_libraries):
        directory = models / f"m{i}"
        (directory / "1").mkdir(parents=True)
        (directory / "1" / "model.onnx").write_text("")
        shutil.copy2(pools / name, directory / name)
        if name == protobuf_pools.OWN:
            own = protobuf_pools.own_soname(ElfReader(use_cache=False).read(str(protobuf_pools.runtime())).soname or "")
            shutil.copy2(pools / own, directory / own)
        (directory / "config.pbtxt").write_text(
            f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "/models/m{i}/{name}" }}\n')
    manifest = None
    if preload is not None:
        shutil.copy2(pools / preload, models / preload)
        (models / "customops.toml").write_text(f'[host]\npreload = ["{preload}"]\n')
        manifest = str(models / "customops.toml")
    return run_check([str(models)], load_manifest(manifest), from_root(str(root)), ())


def test_co406_two_op_libraries_register_one_proto_file_into_one_libprotobuf(root, pools):
    result = check(root, pools, protobuf_pools.SHARED)
    (finding,) = [f for f in result.findings if f.code == "CO406"]
    assert finding.severity == Severity.ERROR
    assert finding.predicted == "File already exists in database: lab.proto"
    assert finding.library == "/models/m1/libpools_b.so" and finding.symbol == "lab.proto"
    assert "/models/m0/libpools_a.so" in finding.message and "libprotobuf" in finding.message
    assert finding.file.endswith("/models/m1/config.pbtxt") and finding.related[0].library == "/models/m0/libpools_a.so"
    (then,) = [e for e in finding.evidence if e.startswith("then: ")]
    assert then == "then: CHECK failed: GeneratedDatabase()->Add(encoded_file_descriptor, size):"  # read from it
    real = run_in_container(str(root), result.plan)
    assert real.returncode in (-signal.SIGABRT, 128 + signal.SIGABRT), real.stderr
    assert finding.predicted in real.stderr and then.removeprefix("then: ") in real.stderr
    assert real.dlopens[-1] == ("/models/m0/libpools_a.so", None)  # the second never returns


def test_one_proto_file_in_two_protobuf_runtimes_loads(root, pools):
    """libpools_own.so registers lab.proto into its own copy of libprotobuf (another SONAME): two pools."""
    result = check(root, pools, (protobuf_pools.SHARED[0], protobuf_pools.OWN))
    assert "CO406" not in {f.code for f in result.findings}
    real = run_in_container(str(root), result.plan)
    assert real.returncode == 0 and "File already exists" not in real.stderr, real.stderr
    assert [error for _path, error in real.dlopens] == [None] * len(result.plan.dlopens)


def test_a_preloaded_table_standing_in_for_an_op_librarys_own_is_registered_once(root, pools):
    """The preload's descriptor_table_lab_2eproto wins the op library's reference to its own (the global
    scope comes first): its initialiser registers the preload's table again, which protobuf skips."""
    result = check(root, pools, (protobuf_pools.SHARED[1],), preload=protobuf_pools.SHARED[0])
    assert "CO406" not in {f.code for f in result.findings}
    real = run_in_container(str(root), result.plan)
    assert real.returncode == 0 and "File already exists" not in real.stderr, real.stderr


def test_the_registrations_each_library_makes_are_read_from_its_dynamic_symbols(pools):
    found = read([str(pools / name) for name in (*protobuf_pools.SHARED, protobuf_pools.OWN)]
                 + [str(protobuf_pools.runtime())], ElfReader(use_cache=False))
    assert [found[str(pools / name)].files for name in protobuf_pools.SHARED] == [("lab.proto",)] * 2
    runtime = found[str(protobuf_pools.runtime())]
    assert "google/protobuf/descriptor.proto" in runtime.files and runtime.check is not None


def test_the_check_line_is_the_runtimes_own():
    assert check_line([b"x", b"CHECK failed: " + CHECKED + b"encoded_file_descriptor, size): "]) == (
        "CHECK failed: GeneratedDatabase()->Add(encoded_file_descriptor, size): ")  # GOOGLE_CHECK (protobuf < 22)
    assert check_line([CHECKED + b"encoded_file_descriptor, size)"]) == (
        "Check failed: GeneratedDatabase()->Add(encoded_file_descriptor, size)")  # ABSL_CHECK (protobuf >= 22)
    assert check_line([b"\xff" + CHECKED, b"other"]) is None


def test_names_starting_with_a_prefix_are_those_names_containing_finds_at_their_start(pools):
    symbols = ElfReader(use_cache=False).read(str(protobuf_pools.runtime())).symbols
    for prefix in (b"descriptor_table_", b"_ZN6google8protobuf14DescriptorPool", b"no such prefix"):
        containing = symbols.names_containing(prefix).nonzero()[0]
        expected = [i for i, n in zip(containing.tolist(), symbols.names(containing), strict=True)
                    if bytes(n).startswith(prefix)]
        assert symbols.names_starting(prefix).tolist() == expected
