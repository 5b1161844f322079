"""Coverage-guided fuzzing (atheris/libFuzzer) of every parser that reads input customops did not write.

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/run.py elf -runs=1000000   # also: linker, ldcache, config, manifest, onnx, savedmodel

Each target accepts only customops' own error for bad input (ElfError / InputError, or a CO101 problem
for configs); anything else is a crash. libFuzzer's -timeout=1 makes an input that takes longer than a
second a failure, and -rss_limit_mb bounds memory. The corpus is seeded with real files (fixture
libraries, this machine's libc/libstdc++/ld.so.cache, the example configs and manifest) and kept in
.fuzz-corpus/<target>. Crashes are written to .fuzz-corpus/<target>-crashes/; each becomes a regression
test in tests/test_fuzz_regressions.py. Results are recorded in tests/FUZZING.md.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

with atheris.instrument_imports(include=["customops"]):
    from customops.errors import ElfError, InputError
    from customops.manifest import load_manifest
    from customops.repository import read_model
    from customops.scan import scan_record
    from customops.scanners.elf import FileIdentity, gnu_hashes, parse_elf
    from customops.scanners.elfcache import ElfReader
    from customops.scanners.ldcache import parse_ld_cache
    from customops.scanners.linker import Dlopen, Environment, Linker, Scenario
    from customops.scanners.onnxmodel import model_ops
    from customops.scanners.target import live_target
    from customops.scanners.tfmodel import model_ops as tf_model_ops

from oracle import assert_same_as_per_symbol  # noqa: E402

WORK = Path(tempfile.mkdtemp(prefix="customops-fuzz-"))


def fuzz_elf(data: bytes) -> None:
    try:
        info = parse_elf("fuzzed.so", data, FileIdentity(0, 0, len(data), 0))
        scan_record(info, with_symbols=True)
        names = [info.symbols.name(i) for i in range(1, min(info.symbols.count, 32))]
        for name in names:
            list(info.symbols.lookup(name))
        info.symbols.lookup_many(names, gnu_hashes(names))
        info.symbols.hash_halves  # noqa: B018
    except ElfError:
        pass


LINKER_DIRS = ("a", "b", "bfs", "c", "d", "e", "f")  # fixture directories of the linker scenarios


@functools.cache
def linker_setup() -> tuple[Path, ElfReader]:
    """The fixture tree (read, never written) and a reader that has already parsed the loader and libc."""
    from fixtures.build import build

    tree = build()
    reader = ElfReader(use_cache=False)
    Linker(live_target(), reader).run(Scenario(str(tree / "bin" / "loader")))
    return tree, reader


def fuzz_linker(data: bytes) -> None:
    """The linker model dlopens a mutated library whose dependencies are the fixture libraries: the batch
    binding path must decide exactly what the per-symbol lookup decides (tests/oracle.py)."""
    tree, base = linker_setup()
    path = WORK / "fuzzed" / "libfuzzed.so"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    reader = ElfReader(use_cache=False)
    reader._memo.update(base._memo)  # the loader and libc stay parsed; each input is parsed afresh
    linker = Linker(live_target(), reader)
    scenario = Scenario(str(tree / "bin" / "loader"),
                        Environment(library_path=":".join(str(tree / d) for d in LINKER_DIRS)),
                        (Dlopen(str(path)),))
    try:
        prediction = linker.run(scenario)
    except ElfError:
        return
    assert_same_as_per_symbol(linker, scenario, prediction)


def fuzz_ldcache(data: bytes) -> None:
    try:
        cache = parse_ld_cache(data, "fuzzed.cache")
        cache.lookup("libc.so.6", 62, 64)
    except InputError:
        pass


def fuzz_config(data: bytes) -> None:
    model = WORK / "m"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_bytes(data)
    read_model(str(model), "m")  # problems are findings (CO101...), never exceptions


def fuzz_manifest(data: bytes) -> None:
    path = WORK / "customops.toml"
    path.write_bytes(data)
    with contextlib.suppress(InputError):
        load_manifest(str(path))


def fuzz_onnx(data: bytes) -> None:
    path = WORK / "model.onnx"
    path.write_bytes(data)
    with contextlib.suppress(ValueError):  # DamagedModel, or an empty file mmap refuses
        model_ops(str(path))


def fuzz_savedmodel(data: bytes) -> None:
    saved_model = WORK / "model.savedmodel"
    saved_model.mkdir(exist_ok=True)
    (saved_model / "saved_model.pb").write_bytes(data)
    with contextlib.suppress(ValueError):  # DamagedModel, or an empty file mmap refuses
        tf_model_ops(str(saved_model))


TARGETS = {"elf": fuzz_elf, "linker": fuzz_linker, "ldcache": fuzz_ldcache, "config": fuzz_config,
           "manifest": fuzz_manifest, "onnx": fuzz_onnx, "savedmodel": fuzz_savedmodel}


def seeds(target: str) -> list[Path]:
    if target == "elf":
        from fixtures.build import build

        tree = build()
        small = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 200_000
                 and p.read_bytes()[:4] == b"\x7fELF"]
        return [*small, Path("/lib/x86_64-linux-gnu/libz.so.1")]
    if target == "linker":
        from fixtures.build import build

        tree = build()
        return sorted(p for d in LINKER_DIRS for p in (tree / d).glob("*.so") if not p.is_symlink())
    if target == "ldcache":
        return [Path("/etc/ld.so.cache")]
    if target == "config":
        return sorted((ROOT / "examples" / "model_repository").glob("*/config.pbtxt"))
    if target == "onnx":
        return [onnx_seed()]
    if target == "savedmodel":
        return [savedmodel_seed()]
    return [ROOT / "examples" / "model_repository" / "customops.toml"]


def onnx_seed() -> Path:
    """A model with a custom domain, a subgraph and a model-local function (written with the onnx package)."""
    import onnx
    from onnx import helper

    def io(name: str):  # type: ignore[no-untyped-def]
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2])

    then = helper.make_graph([helper.make_node("Inner", ["x"], ["y"], domain="x.y")], "then", [], [io("y")])
    other = helper.make_graph([helper.make_node("Double", ["x"], ["y"], domain="x.y")], "else", [], [io("y")])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                              [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []), io("x")], [io("y")])
    function = helper.make_function("x.y", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                    [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("x.y", 1)])
    path = WORK / "seed.onnx"
    onnx.save(model, str(path))
    return path


def savedmodel_seed() -> Path:
    """A SavedModel with a tf.function (graph nodes, library functions, the stripped op list)."""
    import tensorflow as tf

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def upper(self, x):  # type: ignore[no-untyped-def]
            return tf.strings.upper(x)

    tf.saved_model.save(Module(), str(WORK / "seed.savedmodel"))
    return WORK / "seed.savedmodel" / "saved_model.pb"


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        raise SystemExit(f"usage: run.py {{{','.join(TARGETS)}}} [libFuzzer options, e.g. -runs=1000000]")
    target = sys.argv[1]
    corpus = ROOT / ".fuzz-corpus" / target
    crashes = ROOT / ".fuzz-corpus" / f"{target}-crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    if not corpus.exists():
        corpus.mkdir(parents=True)
        for i, seed in enumerate(seeds(target)):
            if seed.exists():
                shutil.copy(seed, corpus / f"seed-{i}")
    argv = [sys.argv[0], str(corpus), f"-artifact_prefix={crashes}/", "-timeout=1", "-rss_limit_mb=2048",
            "-max_len=262144", "-print_final_stats=1", *sys.argv[2:]]
    atheris.Setup(argv, TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
