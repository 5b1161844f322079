"""Coverage-guided fuzzing (atheris/libFuzzer) of every parser that reads input customops did not write.

    .venv/bin/pip install atheris
    .venv/bin/python tests/fuzz/run.py elf -runs=1000000   # also: linker, ldcache, config, manifest, onnx, savedmodel,
                                                           # profile, elfcache, report, launch, probe

Each target accepts only customops' own error for bad input (ElfError / InputError, or a CO101 problem
for configs; for a profile, nothing written outside its skeleton) or, for an entry of customops' own cache,
a clean miss; anything else is a crash. libFuzzer's -timeout=1 makes an input that takes longer than a
second a failure, and -rss_limit_mb bounds memory. The corpus is seeded with real files (fixture
libraries, this machine's libc/libstdc++/ld.so.cache, the example configs and manifest, valid profiles
and cache entries) and kept in .fuzz-corpus/<target>. Crashes are written to
.fuzz-corpus/<target>-crashes/; each becomes a regression test in tests/test_fuzz_regressions.py. Results
are recorded in tests/FUZZING.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

with atheris.instrument_imports(include=["customops"]):
    from customops import cachedir, cleanup
    from customops.app import launch_cache
    from customops.app.report_cache import cached_report
    from customops.elf.cache import ElfReader, StaleEntry, _CachedParser, decode_fact, encode_entry
    from customops.elf.hashes import gnu_hashes
    from customops.elf.parse import parse_elf
    from customops.elf.records import ElfInfo, FileIdentity
    from customops.elf.summary import scan_record
    from customops.errors import ElfError, InputError
    from customops.inspect.onnxmodel import model_ops
    from customops.inspect.tfmodel import model_ops as tf_model_ops
    from customops.linker.ldcache import parse_ld_cache
    from customops.linker.process import Linker
    from customops.linker.target import live_target
    from customops.linker.types import Dlopen, Environment, Scenario
    from customops.probe import groups as probes
    from customops.triton import profile
    from customops.triton.manifest import load_manifest
    from customops.triton.repository import read_model
    from customops.triton.skeleton import materialize

from oracle import assert_same_as_per_symbol  # noqa: E402

WORK = Path(tempfile.mkdtemp(prefix="customops-fuzz-"))
probes.probe_group = lambda *args, **kwargs: PROBE_MISS  # type: ignore[assignment]  # the probe target never loads


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


def fuzz_profile(data: bytes) -> None:
    """A profile is read (the schema in full) and, when it passes, materialised (decompressed within limits,
    confined to its directory): only InputError, and nothing written outside the skeleton."""
    here = WORK / "profile"
    here.mkdir(exist_ok=True)
    tempfile.tempdir = str(WORK / "tmp")  # where a skeleton without a cache is built
    os.makedirs(tempfile.tempdir, exist_ok=True)
    path = here / "profile.json"
    _put(path, data)
    try:
        skeleton = materialize(profile.read(str(path)), None, str(path))
        assert skeleton is None or os.path.dirname(skeleton) == tempfile.tempdir
    except InputError:
        pass
    finally:
        cleanup.remove_all()
    assert [p.name for p in here.iterdir()] == ["profile.json"] and not os.listdir(tempfile.tempdir)


ENTRY_IDENTITY = FileIdentity(1, 2, 3, 4)  # the identity fuzzed ELF cache entries are decoded for


@functools.cache
def elfcache_setup() -> tuple[str, bytes, ElfInfo]:
    """A fixture library, its bytes, and its real parse (what an accepted entry must agree with)."""
    from fixtures.build import build

    path = str(build() / "e" / "libvuser.so")
    data = Path(path).read_bytes()
    return path, data, parse_elf(path, data, ENTRY_IDENTITY)


def fuzz_elfcache(data: bytes) -> None:
    """An ELF cache entry (relocation classes) decoded for a real library, and a cached derived fact: a
    stale or damaged entry is StaleEntry (a miss); an accepted one changes nothing but relocation classes."""
    path, image, full = elfcache_setup()
    try:
        info = _CachedParser(path, image, ENTRY_IDENTITY, data).parse()
    except StaleEntry:
        pass
    else:
        assert (info.needed, info.soname, info.version_needs) == (full.needed, full.soname, full.version_needs)
        assert len(info.symbols.reloc_class) == full.layout.symbol_count
    fact = decode_fact(data, cachedir.CXX_ABI_SHAPE, full)
    assert fact is None or cachedir.matches(fact, cachedir.CXX_ABI_SHAPE)


def _entry_path(kind: str, parts: list[str]) -> Path:
    return (WORK / "cache").joinpath(*cachedir._result_names(kind, parts))


def _write_entry(path: Path, data: bytes) -> None:
    """The fuzzed bytes as an entry this user wrote (0600, one link), where the reader looks."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _put(path, data)


def _put(path: Path, data: bytes) -> None:
    """Overwrite in place: written, then cut to length (O_TRUNC of a written file costs ~3 ms on ext4, which
    flushes the old data first; this costs 20 us)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def fuzz_report(data: bytes) -> None:
    """A cached check report: a hit only of exactly its shape, whose dependencies are unchanged."""
    _write_entry(_entry_path("check", ["fuzz"]), data)
    hit = cached_report([str(WORK / "cache"), "fuzz"])
    assert hit is None or (isinstance(hit["report"], str) and hit["exit_code"] in (0, 1))


LAUNCH_ARGS: tuple[list[str], dict, tuple, dict[str, str]] = (
    ["tritonserver"], {"container_root": "/", "manifest": None, "fail_on": None, "check": True,
                       "existing_preload": "last"}, (), {})


def fuzz_launch(data: bytes) -> None:
    """A cached launch verdict: notes and report only (what to start is never read from the cache)."""
    parts = launch_cache.key_parts(*LAUNCH_ARGS)
    assert parts is not None
    _write_entry(_entry_path("launch", parts), data)
    verdict = launch_cache.cached(*LAUNCH_ARGS, cache_dir=str(WORK / "cache"))
    assert verdict is None or set(verdict) == {"notes", "report"}


PROBE_MISS = (probes.ProbeResult("fuzz", probes.ProbeStatus.UNAVAILABLE, "probed again", None, "", ()),)


def fuzz_probe(data: bytes) -> None:
    """A cached probe result, read by the real consumer (probes.cached_results); a miss would probe again, which
    here returns a marker instead of loading anything."""
    source = str(elfcache_setup()[0])
    settings = probes.ProbeSettings(sys.executable, None, cache_dir=WORK / "cache")
    key = probes.cache_key(settings, "torch", sys.executable, (source,))
    assert key is not None
    _write_entry(_entry_path("probes", key), data)
    results = probes.cached_results(settings, "torch", None, sys.executable, (source,))
    assert results is PROBE_MISS or all(isinstance(r, probes.ProbeResult) and r.library == source for r in results)


TARGETS = {"elf": fuzz_elf, "linker": fuzz_linker, "ldcache": fuzz_ldcache, "config": fuzz_config,
           "manifest": fuzz_manifest, "onnx": fuzz_onnx, "savedmodel": fuzz_savedmodel, "profile": fuzz_profile,
           "elfcache": fuzz_elfcache, "report": fuzz_report, "launch": fuzz_launch, "probe": fuzz_probe}


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
    if target in CACHE_SEEDS:
        return CACHE_SEEDS[target]()
    return [ROOT / "examples" / "model_repository" / "customops.toml"]


def profile_seeds() -> list[Path]:
    """The valid profile of the attack tests, and the profile of a few fixture libraries."""
    from test_attacks_profile import valid

    from fixtures.build import build

    small = WORK / "seed-small.json"
    small.write_text(json.dumps(valid()))
    tree = build()
    files = {f"/lib/{p.name}": profile._file_entry(str(p), p.name) for p in sorted((tree / "e").glob("*.so"))[:3]}
    real = WORK / "seed-libraries.json"
    real.write_text(json.dumps({**valid(), "files": {k: v for k, v in files.items() if v}, "links": {}}))
    return [small, real]


def elfcache_seeds() -> list[Path]:
    full = elfcache_setup()[2]
    seed = WORK / "seed.entry"
    seed.write_bytes(encode_entry(full))
    fact = WORK / "seed.fact"
    fact.write_text(json.dumps({"format": encode_entry(full)[:8].hex(), "value": {
        "flavour": "none", "defined_cxx11": 0, "defined_old": 0, "undefined_cxx11": 0, "undefined_old": 0}}))
    return [seed, fact]


def result_seed(kind: str, value: object, parts: list[str]) -> Callable[[], list[Path]]:
    """A valid stored entry of `kind`, as store_result writes it."""
    def make() -> list[Path]:
        cachedir.store_result(WORK / "seed-cache", kind, parts, value)
        return [(WORK / "seed-cache").joinpath(*cachedir._result_names(kind, parts))]
    return make


def _probe_parts() -> list[str]:
    settings = probes.ProbeSettings(sys.executable, None, cache_dir=WORK / "cache")
    return probes.cache_key(settings, "torch", sys.executable, (elfcache_setup()[0],)) or []


def probe_seeds() -> list[Path]:

    result = probes.ProbeResult(elfcache_setup()[0], probes.ProbeStatus.LOADED, "", None, "", ("a.txt",), ("my::op",),
                                "2.5").to_json()
    return result_seed("probes", [result], _probe_parts())()


CACHE_SEEDS: dict[str, Callable[[], list[Path]]] = {
    "profile": profile_seeds,
    "elfcache": elfcache_seeds,
    "report": result_seed("check", {"report": '{"findings": []}', "exit_code": 0, "dependencies": {"/": "0-0-0-0"}},
                          ["fuzz"]),
    "launch": lambda: result_seed("launch", {"notes": ["a note"], "report": "line 1\nline 2\n",
                                             "dependencies": {}}, launch_cache.key_parts(*LAUNCH_ARGS) or [])(),
    "probe": probe_seeds,
}


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
