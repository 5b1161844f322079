"""The ELF reader agrees with binutils' readelf on every fixture and on real framework libraries."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_toolchain
from elf_tools import readelf_facts
from hypothesis import given, settings
from hypothesis import strategies as st

from customops.elf.cache import ElfReader
from customops.elf.constants import RELOC_LAZY, RELOC_NOW
from customops.elf.summary import scan_record
from customops.errors import ElfError


def fixture_elfs(tree: Path) -> list[Path]:
    out = []
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.read_bytes()[:4] == b"\x7fELF":
            out.append(path)
    return out


def framework_library(module: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.exists() else None


REAL_LIBRARIES = [
    ("torch", ("lib", "libc10.so")),
    ("torch", ("lib", "libtorch_cpu.so")),
    ("tensorflow", ("libtensorflow_framework.so.2",)),
    ("onnxruntime", ("capi", "libonnxruntime.so.1.32.0")),
]


def assert_agrees_with_readelf(path: Path, reader: ElfReader, symbols: bool = True) -> None:
    info = reader.read(path)
    facts = readelf_facts(str(path))
    assert info.soname == facts.soname
    assert list(info.needed) == facts.needed
    assert list(info.rpath) == facts.rpath
    assert list(info.runpath) == facts.runpath
    assert info.defined_count == facts.defined_count
    assert info.undefined_count == facts.undefined_count
    assert {n.file: [v.name for v in n.versions] for n in info.version_needs} == facts.version_needs
    assert [d.name for d in info.version_definitions] == facts.version_definitions
    if not symbols:
        return
    records = scan_record(info, with_symbols=True)["symbols"]
    assert len(records) == len(facts.symbols) - 1
    for ours, theirs in zip(records, facts.symbols[1:], strict=True):
        assert (ours["name"], ours["bind"], ours["type"], ours["visibility"], ours["defined"], ours["size"]) == (
            theirs.name, theirs.bind, theirs.type, theirs.visibility, theirs.defined, theirs.size), theirs
        # readelf leaves the suffix off a version node's own marker symbol (ABS, named like the node).
        assert ours["version"] == theirs.version or (theirs.version is None and ours["version"] == ours["name"]), theirs


def test_every_fixture_library_agrees_with_readelf(tree, reader):
    files = fixture_elfs(tree)
    assert len(files) > 60
    for path in files:
        if "stripped" in path.name:
            continue
        assert_agrees_with_readelf(path, reader)


@pytest.mark.frameworks
@pytest.mark.parametrize(("module", "parts"), REAL_LIBRARIES, ids=[p[-1] for _, p in REAL_LIBRARIES])
def test_real_framework_libraries_agree_with_readelf(module, parts, reader):
    path = framework_library(module, *parts)
    if path is None:
        pytest.skip(f"{module} is not installed")
    assert_agrees_with_readelf(path, reader, symbols=path.stat().st_size < 100_000_000)


def exporting_nothing(tmp_path: Path, source: str) -> Path:
    """A library built from `source` that defines no dynamic symbol, with DT_GNU_HASH only."""
    import subprocess

    c = tmp_path / "constructor_only.c"
    c.write_text(source)
    library = tmp_path / "libconstructor_only.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--hash-style=gnu", "-Wl,--allow-shlib-undefined", str(c), "-o",
                    str(library)], check=True, capture_output=True)
    return library


def test_a_library_that_exports_nothing_still_lists_what_it_imports(tmp_path, reader):
    """Its DT_GNU_HASH may start the hashed symbols (symoffset) at 1, below every import, and has no chain to
    end the count: the table reaches as far as its relocations name symbols, which is what ld.so resolves."""
    source = ("#include <stdlib.h>\nint imported_value(void);\n"
              "__attribute__((constructor)) static void check(void) { if (imported_value()) abort(); }\n")
    library = exporting_nothing(tmp_path, source)
    info = reader.read(library)
    assert info.defined_count == 0 and info.layout.symbol_count > 1
    assert_agrees_with_readelf(library, reader)
    names = [r["name"] for r in scan_record(info, with_symbols=True)["symbols"]]
    assert "imported_value" in names and "abort" in names


def test_a_relocation_naming_a_symbol_past_the_table_of_a_library_exporting_nothing_is_an_error(tmp_path, reader):
    """The table's extent comes from what relocations name there: a hostile index is a one-line ElfError, never a
    table of one symbol (which would have the library import nothing, and be predicted to load)."""
    import struct
    import subprocess

    library = exporting_nothing(tmp_path, "int imported_value(void);\n"
                                "__attribute__((constructor)) static void check(void) { imported_value(); }\n")
    listing = subprocess.run(["readelf", "-r", "-W", str(library)], capture_output=True, text=True).stdout
    (line,) = [x for x in listing.splitlines() if x.rstrip().endswith("imported_value + 0")]
    offset, info = (int(word, 16) for word in line.split()[:2])
    data = bytearray(library.read_bytes())
    at = data.find(struct.pack("<QQ", offset, info))
    data[at + 8:at + 16] = struct.pack("<Q", (0x10000 << 32) | (info & 0xFFFFFFFF))
    library.write_bytes(bytes(data))
    with pytest.raises(ElfError, match="a relocation names symbol 65536"):
        reader.read(library)


def test_a_library_without_section_headers_reads_like_its_original(tree, reader):
    original = scan_record(reader.read(tree / "elf/libkinds.so"), with_symbols=True)
    stripped = scan_record(reader.read(tree / "elf/libkinds_stripped.so"), with_symbols=True)
    assert stripped["has_section_headers"] is False and original["has_section_headers"] is True
    for key in ("path", "has_section_headers", "has_symtab"):
        del original[key], stripped[key]
    assert stripped == original


def test_symbol_kinds_are_classified(tree, reader):
    symbols = {s["name"]: s for s in scan_record(reader.read(tree / "elf/libkinds.so"), with_symbols=True)["symbols"]}
    assert symbols["tls_var"]["type"] == "TLS"
    assert symbols["ifunc_fn"]["type"] == "IFUNC"
    assert symbols["weak_fn"]["bind"] == "WEAK"
    assert symbols["protected_fn"]["visibility"] == "PROTECTED"
    assert "hidden_fn" not in symbols  # the static linker made it local
    assert symbols["undefined_data"]["relocation"] == "now"
    assert symbols["undefined_fn"]["relocation"] == "lazy"


def test_unique_symbols_and_hidden_version_bits(tree, reader):
    ua = {s["name"]: s for s in scan_record(reader.read(tree / "d/libua.so"), with_symbols=True)["symbols"]}
    assert ua["_ZZ7countervE1c"]["bind"] == "GNU_UNIQUE"
    two = [s for s in scan_record(reader.read(tree / "e/libv2def.so"), with_symbols=True)["symbols"]
           if s["name"] == "foo"]
    assert [(s["version"], s["version_hidden"]) for s in two] == [("V1", True), ("V2", False)]


@needs_toolchain("m32")
def test_a_32_bit_library(tree, reader):
    info = reader.read(tree / "elf/libkinds32.so")
    assert (info.elf_class, info.machine) == (32, "EM_386")
    assert_agrees_with_readelf(tree / "elf/libkinds32.so", reader)
    undefined = {n: c for n, c in zip(info.symbols.names(range(1, info.symbols.count)),
                                      info.symbols.reloc_class[1:].tolist(), strict=True)}
    assert undefined[b"undefined_data"] == RELOC_NOW


@needs_toolchain("s390x")
def test_a_big_endian_library(tree, reader):
    info = reader.read(tree / "elf/libbe.so")
    assert (info.elf_class, info.byte_order, info.machine) == (64, "big", "EM_S390")
    assert info.needed == ("libbe_dep.so",)
    assert_agrees_with_readelf(tree / "elf/libbe.so", reader)
    names = dict(zip(info.symbols.names(range(1, info.symbols.count)), info.symbols.reloc_class[1:].tolist(),
                     strict=True))
    assert names[b"be_dep"] == RELOC_LAZY
    assert list(info.symbols.lookup(b"be_fn", *_hashes(b"be_fn"))) != []


def _hashes(name: bytes) -> tuple[int, int]:
    from customops.elf.hashes import gnu_hash, sysv_hash

    return gnu_hash(name), sysv_hash(name)


def test_hash_table_lookup_finds_every_exported_symbol(tree, reader):
    for lib in ("elf/libkinds.so", "elf/libsysv.so", "elf/libboth.so", "e/libv2def.so"):
        info = reader.read(tree / lib)
        symbols = info.symbols
        for i in range(1, symbols.count):
            if symbols.defined_mask[i]:
                name = symbols.name(i)
                assert i in list(symbols.lookup(name, *_hashes(name))), (lib, name)


def test_string_abi_flavour_is_read_from_mangled_names(tree, reader):
    assert scan_record(reader.read(tree / "elf/libcxx11.so"))["cxx_abi"]["flavour"] == "cxx11"
    assert scan_record(reader.read(tree / "elf/libcxxold.so"))["cxx_abi"]["flavour"] == "pre-cxx11"
    assert scan_record(reader.read(tree / "elf/libkinds.so"))["cxx_abi"]["flavour"] == "none"


def test_version_maxima_per_family(tree, reader):
    assert scan_record(reader.read(tree / "elf/libcxx11.so"))["version_maxima"]["GLIBCXX"].startswith("GLIBCXX_3.4")
    maxima = scan_record(reader.read(tree / "bin/loader"))["version_maxima"]
    needed = [v.name for n in reader.read(tree / "bin/loader").version_needs for v in n.versions]
    assert maxima["GLIBC"] == max((v for v in needed if v.startswith("GLIBC_2")),
                                  key=lambda v: tuple(int(x) for x in v[6:].split(".")))


# -- the parse cache --------------------------------------------------------------------------


def test_a_warm_read_equals_a_cold_read(tree, tmp_path):
    cold_reader = ElfReader(cache_dir=tmp_path)
    cold = scan_record(cold_reader.read(tree / "e/libvuser.so"), with_symbols=True)
    warm_reader = ElfReader(cache_dir=tmp_path)
    warm = scan_record(warm_reader.read(tree / "e/libvuser.so"), with_symbols=True)
    assert (cold_reader.misses, warm_reader.hits) == (1, 1)
    assert warm == cold


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign", "empty"])
def test_a_damaged_cache_entry_is_rebuilt_not_fatal(tree, tmp_path, damage):
    ElfReader(cache_dir=tmp_path).read(tree / "e/libvuser.so")
    (entry,) = [p for p in tmp_path.rglob("*") if p.is_file()]
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[:len(data) // 2], "garbage": os.urandom(len(data)),
                       "foreign": b"COELF\x00\xff\x00" + data[8:], "empty": b""}[damage])
    again = ElfReader(cache_dir=tmp_path)
    info = again.read(tree / "e/libvuser.so")
    assert again.misses == 1 and info.needed == ("libv.so",)


def test_a_read_only_cache_directory_costs_only_speed(tree, tmp_path):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o500)
    try:
        info = ElfReader(cache_dir=cache / "sub").read(tree / "e/libvuser.so")
        assert info.soname == "libvuser.so"
    finally:
        cache.chmod(0o700)


def test_a_changed_file_is_parsed_again(tree, tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes((tree / "b/liba.so").read_bytes())
    assert ElfReader(cache_dir=tmp_path / "c").read(lib).soname == "liba.so"
    lib.write_bytes((tree / "b/libb.so").read_bytes())
    assert ElfReader(cache_dir=tmp_path / "c").read(lib).soname == "libb.so"


def test_concurrent_readers_share_one_cache(tree, tmp_path):
    from concurrent.futures import ProcessPoolExecutor

    paths = [str(p) for p in fixture_elfs(tree)[:20]] * 3
    with ProcessPoolExecutor(4) as pool:
        results = list(pool.map(_soname_with_cache, [(p, str(tmp_path)) for p in paths]))
    assert results == [ElfReader(use_cache=False).read(p).soname for p in paths]


def _soname_with_cache(args: tuple[str, str]) -> str | None:
    path, cache = args
    return ElfReader(cache_dir=Path(cache)).read(path).soname


# -- bad files --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (b"not an elf file at all", "not an ELF file"),
        (b"\x7fELF", "not an ELF file"),
        (b"\x7fELF\x05\x01" + bytes(58), "invalid ELF class"),
    ],
)
def test_bad_files_give_an_error_naming_the_file(tmp_path, content, reason):
    path = tmp_path / "bad.so"
    path.write_bytes(content)
    with pytest.raises(ElfError) as excinfo:
        ElfReader(use_cache=False).read(path)
    assert str(path) in str(excinfo.value) and reason in str(excinfo.value)


def test_a_directory_a_missing_file_and_a_symlink_loop_are_errors(tmp_path):
    loop = tmp_path / "loop.so"
    loop.symlink_to(loop)
    for path, reason in ((tmp_path, "directory"), (tmp_path / "missing.so", "No such file"),
                         (loop, "symbolic links")):
        with pytest.raises(ElfError, match=reason):
            ElfReader(use_cache=False).read(path)


def test_scan_json_has_the_documented_fields(tree, reader):
    from jsonschema import validate

    schema = json.loads((Path(__file__).parent.parent / "customops/schemas/scan-1.json").read_text())
    record = scan_record(reader.read(tree / "e/libvuser.so"), with_symbols=True)
    validate({"schema": "customops.scan/1", "files": [record]}, schema)


def test_the_bulk_hash_walk_finds_exactly_what_the_walk_one_name_at_a_time_finds(tree, reader):
    """lookup_many (one vectorised pass of do_lookup_x's GNU-hash walk) against lookup, on every fixture
    library, libstdc++ and libtorch_cpu.so: every name defined, undefined or absent, with its hash."""
    from customops.elf.hashes import gnu_hashes
    from customops.errors import ElfError

    libraries = [p for p in tree.rglob("*.so*") if p.is_file() and not p.is_symlink()]
    libraries.append(Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6").resolve())
    torch = importlib.util.find_spec("torch")
    if torch is not None and torch.origin:  # a real framework library, 75k dynamic symbols
        libraries.append(Path(torch.origin).parent / "lib" / "libtorch_cpu.so")
    checked = 0
    for path in libraries:
        try:
            symbols = reader.read(path).symbols
        except ElfError:  # damaged on purpose (truncated, absurd counts): not this test's subject
            continue
        names = [symbols.name(i) for i in range(1, symbols.count)] + [b"no_such_symbol", b"_Z3absentv"]
        found = symbols.lookup_many(names, gnu_hashes(names))
        if found is None:  # DT_HASH only: looked up one by one
            assert not symbols.has_hash_table or not symbols.uses_gnu_hash, path
            continue
        assert found == [symbols.lookup(n) for n in names], path
        checked += 1
    assert checked > 20


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 64))
def test_nul_offsets_found_a_chunk_at_a_time_equal_a_whole_table_scan(data, chunk):
    from customops.elf.symbols import _nul_positions

    assert _nul_positions(data, chunk).tolist() == np.flatnonzero(np.frombuffer(data, np.uint8) == 0).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=2000), max_size=30))
def test_gnu_hashes_in_closed_form_equal_dl_new_hash_one_name_at_a_time(names):
    from customops.elf.hashes import gnu_hash, gnu_hashes

    assert gnu_hashes(names).tolist() == [gnu_hash(name) for name in names]
