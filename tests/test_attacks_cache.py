"""Attacks through customops' own cache: it trusts nothing it did not write.

Each test runs the real CLI (python -m customops) with HOME, TMPDIR and the cache directory inside tmp_path,
then tampers with the cache as someone who can write there would (or as a restored CI cache could be), and
asserts the attack failed: the verdict is the one the current inputs give, launch execs only what they
say, nothing is written where it should not be, and a damaged entry is a miss, never a traceback.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from elf_tools import gcc_shared

from customops import cachedir
from customops.app.launch_cache import VERDICT_SHAPE
from customops.app.report_cache import REPORT_SHAPE
from customops.commands.scan import RECORD_SHAPE
from customops.elf.cache import _HEADER, FORMAT, StaleEntry, _CachedParser, decode_relocations, encode_entry
from customops.elf.parse import open_mapped, parse_elf
from customops.elf.records import FileIdentity
from customops.probe.frameworks import ProbeResult
from customops.probe.groups import PROBE_RESULT_SHAPE, TENSORFLOW_REGISTRY_SHAPE

HERE = Path(__file__).resolve().parent
TIMEOUT = 120
IS_ROOT = os.geteuid() == 0


def customops(args: list[str], tmp_path: Path, cache: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """The CLI with a private HOME and TMPDIR, and CUSTOMOPS_CACHE_DIR = `cache` (default tmp_path/cache)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "CUSTOMOPS_CACHE_DIR",
                                                                 "LD_PRELOAD", "LD_LIBRARY_PATH")}
    environ.update({"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
                    "CUSTOMOPS_CACHE_DIR": str(cache or tmp_path / "cache"), **env})
    if env.get("CUSTOMOPS_CACHE_DIR") == "":
        del environ["CUSTOMOPS_CACHE_DIR"]
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=tmp_path,
                          env=environ, timeout=TIMEOUT)


def needing(out: Path, dependency: str) -> Path:
    """A library whose DT_NEEDED names `dependency`, which exists nowhere (it was linked against a stub)."""
    stub = gcc_shared(out.parent / "stub" / f"lib{dependency}.so", "int dep_fn(void) { return 1; }\n",
                      f"-Wl,-soname,lib{dependency}.so")
    gcc_shared(out, "int dep_fn(void); int use(void) { return dep_fn(); }\n", f"-L{stub.parent}", f"-l{dependency}")
    for p in stub.parent.iterdir():
        p.unlink()
    stub.parent.rmdir()
    return out


@pytest.fixture
def broken_repository(tmp_path: Path) -> Path:
    """One model, and a manifest preload that needs a library the container lacks: CO302."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    needing(repository / "m" / "libneeds.so", "missingdep")
    (repository / "customops.toml").write_text('[host]\npreload = ["m/libneeds.so"]\n')
    return repository


def check(repository: Path, tree: Path, tmp_path: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return customops(["check", str(repository), "--container-root", str(tree / "container"), *extra], tmp_path,
                     **env)


def codes_of(result: subprocess.CompletedProcess) -> list[str]:
    return sorted(f["code"] for f in json.loads(result.stdout)["findings"])


def clean(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr


def entry_of(cache: Path, library: Path) -> Path:
    st = library.stat()
    key = f"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ctime_ns:x}"
    return cache / "elf" / key[-2:] / key


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")} if directory.exists() else set()


# -- the ELF parse cache ---------------------------------------------------------------------------------

def _old_format_entry_without_needed(data: bytes) -> bytes:
    """The attack of the issue, in the format it used: a JSON header whose `needed` list was emptied."""
    meta = json.dumps({"needed": [], "soname": "libneeds.so"}).encode()
    return b"COELF\x00\x05\x00" + struct.pack("<II", len(meta), 0) + meta


def _no_relocations(data: bytes) -> bytes:
    """A well-formed entry of the current format that claims the file relocates no symbol."""
    fields = list(_HEADER.unpack_from(data, 0))
    fields[-1] = 0
    return _HEADER.pack(*fields)


ELF_EDITS = {
    "needed list emptied (old format)": _old_format_entry_without_needed,
    "no relocations claimed": _no_relocations,
    "garbage": lambda data: os.urandom(len(data)),
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "another format version": lambda data: FORMAT[:-2] + b"\xff\x00" + data[8:],
    "another file's identity": lambda data: data[:8] + struct.pack("<Q", 1) + data[16:],
    "symbol count inflated": lambda data: data[:40] + struct.pack("<I", 0xFFFFFFFF) + data[44:],
    "entry count inflated": lambda data: data[:44] + struct.pack("<I", 0xFFFFFFF) + data[48:],
    "trailing bytes": lambda data: data + b"\0" * 9,
}


def test_an_entry_this_user_wrote_is_used_not_rewritten(broken_repository, tree, tmp_path):
    """The control for the attacks below: an untouched entry is a hit (rewriting it would change its inode)."""
    check(broken_repository, tree, tmp_path)
    entry = entry_of(tmp_path / "cache", broken_repository / "m" / "libneeds.so")
    inode = entry.stat().st_ino
    check(broken_repository, tree, tmp_path)
    assert entry.stat().st_ino == inode


@pytest.mark.parametrize("edit", ELF_EDITS, ids=list(ELF_EDITS))
def test_an_edited_elf_cache_entry_does_not_turn_co302_into_ok(edit, broken_repository, tree, tmp_path):
    first = check(broken_repository, tree, tmp_path)  # text: not report-cached, so every file is read again
    assert first.returncode == 1 and "CO302" in first.stdout, first.stdout + first.stderr
    entry = entry_of(tmp_path / "cache", broken_repository / "m" / "libneeds.so")
    entry.write_bytes(ELF_EDITS[edit](entry.read_bytes()))  # still ours: owner and mode unchanged
    again = check(broken_repository, tree, tmp_path)
    clean(again)
    assert again.returncode == 1 and "CO302" in again.stdout, again.stdout
    assert entry.read_bytes()[:8] == FORMAT  # a miss: parsed again and stored again


def _group_writable(entry: Path) -> None:
    entry.chmod(0o664)


def _foreign_owner(entry: Path) -> None:
    os.chown(entry, 65534, 65534)


def _symlink_to_an_outside_file(entry: Path) -> None:
    outside = entry.parent.parent.parent.parent / "planted"
    outside.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(outside)


def _hard_linked(entry: Path) -> None:
    os.link(entry, entry.parent.parent.parent.parent / "second-link")


def _fifo(entry: Path) -> None:
    entry.unlink()
    os.mkfifo(entry)


def _huge_sparse(entry: Path) -> None:
    with open(entry, "r+b") as f:
        f.truncate(cachedir.CACHE_ENTRY_LIMIT + 1)


UNTRUSTED = {"group-writable entry": _group_writable, "entry owned by another user": _foreign_owner,
             "entry that is a symlink": _symlink_to_an_outside_file, "entry with a second hard link": _hard_linked,
             "entry that is a FIFO": _fifo, "entry over the size limit": _huge_sparse}


@pytest.mark.parametrize("make", UNTRUSTED, ids=list(UNTRUSTED))
def test_an_elf_cache_entry_someone_else_could_have_written_is_ignored(make, broken_repository, tree, tmp_path):
    if make == "entry owned by another user" and not IS_ROOT:
        pytest.skip("chown to another user needs root")
    check(broken_repository, tree, tmp_path)
    entry = entry_of(tmp_path / "cache", broken_repository / "m" / "libneeds.so")
    # Poison the content first, so that using the entry at all would show: it claims no relocations.
    entry.write_bytes(_no_relocations(entry.read_bytes()))
    UNTRUSTED[make](entry)
    again = check(broken_repository, tree, tmp_path)
    clean(again)
    assert again.returncode == 1 and "CO302" in again.stdout, again.stdout


def test_an_entry_that_drops_the_files_references_is_caught_by_the_spot_check(tree):
    """Well-formed, of the right file and symbol count, but claiming no relocations: relocations of the file
    picked at random name symbols the entry leaves without a class."""
    path = str(tree / "e" / "libvuser.so")
    data, identity = open_mapped(path)
    entry = encode_entry(parse_elf(path, data, identity))
    assert _CachedParser(path, data, identity, entry).parse().needed == ("libv.so",)
    with pytest.raises(StaleEntry, match="which the entry says is not referenced"):
        _CachedParser(path, data, identity, _no_relocations(entry)).parse()


def test_the_relocation_classes_of_an_entry_are_checked_against_the_file():
    identity = FileIdentity(1, 2, 3, 4, 5)

    def entry(indices: list[int], classes: list[int], first: list[int], count: int = 10) -> bytes:
        return (_HEADER.pack(FORMAT, 1, 2, 3, 4, 5, count, len(indices)) + struct.pack(f"<{len(indices)}I", *indices)
                + struct.pack(f"<{len(first)}I", *first) + bytes(classes))

    reloc_class, reloc_first = decode_relocations(entry([1, 5], [2, 1], [0, 3]), identity, 10)
    assert reloc_class.tolist() == [0, 2, 0, 0, 0, 1, 0, 0, 0, 0] and reloc_first[5] == 3
    for bad in (entry([5, 1], [2, 1], [0, 3]),  # out of order
                entry([0, 5], [2, 1], [0, 3]),  # the null symbol
                entry([1, 10], [2, 1], [0, 3]),  # past the table
                entry([1, 5], [2, 9], [0, 3]),  # unknown class
                entry([1, 5], [2, 1], [0, 0xFFFFFFFF]),  # a class without a first relocation
                entry([1, 5], [2, 1], [0, 3], count=11)):  # another symbol count
        with pytest.raises(StaleEntry):
            decode_relocations(bad, identity, 10)


# -- the cache directory ---------------------------------------------------------------------------------

def test_cache_directories_are_created_0700_and_entries_0600(broken_repository, tree, tmp_path):
    cache = tmp_path / "new" / "deeper" / "cache"
    result = check(broken_repository, tree, tmp_path, "--format", "json", "--cache-dir", str(cache))
    assert result.returncode == 1
    for directory in (tmp_path / "new", tmp_path / "new" / "deeper", cache, *[p for p in cache.rglob("*")
                                                                             if p.is_dir()]):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    entries = [p for p in cache.rglob("*") if p.is_file()]
    assert entries and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in entries)


UNTRUSTED_DIRECTORIES = {
    "group-writable cache directory": lambda cache: cache.chmod(0o770),
    "world-writable cache directory": lambda cache: cache.chmod(0o777),
    "cache directory owned by another user": lambda cache: os.chown(cache, 65534, 65534),
    "world-writable directory above it, not sticky": lambda cache: cache.parent.chmod(0o777),
    "group-writable elf subdirectory": lambda cache: (cache / "elf").chmod(0o770),
    "elf subdirectory that is a symlink": lambda cache: _replace_by_symlink(cache / "elf"),
}


def _replace_by_symlink(directory: Path) -> None:
    planted = directory.parent.parent / "planted-dir"
    directory.rename(planted)
    directory.symlink_to(planted)


@pytest.mark.parametrize("make", UNTRUSTED_DIRECTORIES, ids=list(UNTRUSTED_DIRECTORIES))
def test_a_cache_directory_others_can_write_is_not_used(make, broken_repository, tree, tmp_path):
    if "another user" in make and not IS_ROOT:
        pytest.skip("chown to another user needs root")
    cache = tmp_path / "shared" / "cache"
    check(broken_repository, tree, tmp_path, cache=cache)
    entry = entry_of(cache, broken_repository / "m" / "libneeds.so")
    entry.write_bytes(_no_relocations(entry.read_bytes()))
    poisoned = entry.read_bytes()
    UNTRUSTED_DIRECTORIES[make](cache)
    again = check(broken_repository, tree, tmp_path, cache=cache)
    clean(again)
    assert again.returncode == 1 and "CO302" in again.stdout, again.stdout
    assert entry.read_bytes() == poisoned  # not read, and not rewritten either: the directory is not used


def test_no_cache_reads_and_writes_no_cache_anywhere(broken_repository, tree, tmp_path):
    """--no-cache with the default cache location (no CUSTOMOPS_CACHE_DIR): nothing appears in HOME, the
    cache, or TMPDIR, for check (every format, and from a profile), launch and scan."""
    profile = tmp_path / "profile.json"
    assert customops(["profile", "create", "--container-root", str(tree / "container"), "-o", str(profile)],
                     tmp_path, CUSTOMOPS_CACHE_DIR="").returncode == 0
    before = files_under(tmp_path / "home"), files_under(tmp_path / "tmp")
    runs = [
        check(broken_repository, tree, tmp_path, "--no-cache", "--format", "json", CUSTOMOPS_CACHE_DIR=""),
        check(broken_repository, tree, tmp_path, "--no-cache", CUSTOMOPS_CACHE_DIR=""),
        customops(["check", str(broken_repository), "--profile", str(profile), "--no-cache", "--format", "json"],
                  tmp_path, CUSTOMOPS_CACHE_DIR=""),
        customops(["launch", "--no-cache", "--dry-run", "--warn-only", "--container-root", str(tree / "container"),
                   "--mount", f"{broken_repository}:/models", "--", "tritonserver", "--model-repository=/models"],
                  tmp_path, CUSTOMOPS_CACHE_DIR=""),
        customops(["scan", "--no-cache", str(broken_repository / "m" / "libneeds.so")], tmp_path,
                  CUSTOMOPS_CACHE_DIR=""),
    ]
    for result in runs:
        clean(result)
    assert [r.returncode for r in runs] == [1, 1, 1, 0, 0], [r.stderr for r in runs]
    assert (files_under(tmp_path / "home"), files_under(tmp_path / "tmp")) == before
    assert not (tmp_path / "cache").exists()


def test_cache_dir_is_the_only_place_written(broken_repository, tree, tmp_path):
    chosen = tmp_path / "chosen"
    profile = tmp_path / "profile.json"
    customops(["profile", "create", "--container-root", str(tree / "container"), "-o", str(profile)], tmp_path)
    default = tmp_path / "default-cache"
    runs = [
        check(broken_repository, tree, tmp_path, "--format", "json", "--cache-dir", str(chosen),
              CUSTOMOPS_CACHE_DIR=str(default)),
        customops(["check", str(broken_repository), "--profile", str(profile), "--format", "json", "--cache-dir",
                   str(chosen)], tmp_path, CUSTOMOPS_CACHE_DIR=str(default)),
        customops(["scan", "--cache-dir", str(chosen), str(broken_repository / "m" / "libneeds.so")], tmp_path,
                  CUSTOMOPS_CACHE_DIR=str(default)),
    ]
    assert [r.returncode for r in runs] == [1, 1, 0], [r.stderr for r in runs]
    assert not default.exists() and not files_under(tmp_path / "home")
    assert {p.name for p in chosen.iterdir()} == {"elf", "check", "profiles", "scan"}


# -- cached results: reports, launch verdicts ----------------------------------------------------------

def only_entry(directory: Path) -> Path:
    (entry,) = [p for p in directory.rglob("*") if p.is_file()]
    return entry


def rewrite_value(entry: Path, value: object) -> None:
    """Replace what an entry holds but keep its envelope (format, key): the shape check must catch it."""
    envelope = json.loads(entry.read_text())
    entry.write_text(json.dumps({**envelope, "value": value}))


def test_a_cached_report_of_another_shape_is_recomputed(broken_repository, tree, tmp_path):
    first = check(broken_repository, tree, tmp_path, "--format", "json")
    assert first.returncode == 1 and "CO302" in codes_of(first)
    entry = only_entry(tmp_path / "cache" / "check")
    forged = {"report": json.dumps({"findings": []}), "exit_code": 0, "summary": "OK", "dependencies": {}, "extra": 1}
    for value in (forged, {**forged, "exit_code": "0"}, [forged], {"report": "\x1b]0;owned\x07", "exit_code": 0,
                                                                  "summary": "OK", "dependencies": {}},
                  {"report": "{}", "exit_code": 0, "summary": "OK\x1b[2J", "dependencies": {}}):
        rewrite_value(entry, value)
        again = check(broken_repository, tree, tmp_path, "--format", "json")
        clean(again)
        assert again.returncode == 1 and "CO302" in codes_of(again), again.stdout


def test_a_cached_report_written_by_another_user_is_ignored(broken_repository, tree, tmp_path):
    check(broken_repository, tree, tmp_path, "--format", "json")
    entry = only_entry(tmp_path / "cache" / "check")
    rewrite_value(entry, {"report": json.dumps({"findings": []}), "exit_code": 0, "summary": "OK",
                          "dependencies": {}})
    entry.chmod(0o666)
    again = check(broken_repository, tree, tmp_path, "--format", "json")
    assert again.returncode == 1 and "CO302" in codes_of(again), again.stdout


@pytest.fixture
def server(tmp_path: Path) -> Path:
    script = tmp_path / "tritonserver"
    script.write_text(f"#!{sys.executable}\n" + (HERE / "fake_tritonserver.py").read_text())
    script.chmod(0o755)
    return script


@pytest.fixture
def launchable(tmp_path: Path, tree: Path) -> Path:
    """A repository whose check passes and whose manifest preloads one PyTorch op library."""
    import shutil

    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "standalone"\n')
    shutil.copy2(tree / "example/libtriton_standalone.so", repository / "m" / "libtriton_standalone.so")
    (repository / "m" / "ops").mkdir()
    shutil.copy2(tree / "example/libtorch_op.so", repository / "m" / "ops" / "libtorch_op.so")
    (repository / "customops.toml").write_text('[pytorch]\nops = ["m/ops/libtorch_op.so"]\n')
    return repository


LAUNCH_POISONS = {
    "argv and environment added": lambda v: {**v, "argv": ["/bin/sh", "-c", "touch pwned"],
                                             "environment": {"LD_PRELOAD": "/tmp/evil.so"}},
    "the old decision format": lambda v: {"argv": ["/bin/sh", "-c", "touch pwned"], "report": None, "notes": [],
                                          "environment": {"LD_PRELOAD": "/tmp/evil.so"}, "dependencies": {}},
    "a note with an escape sequence": lambda v: {**v, "notes": ["\x1b[2J"]},
    "report of the wrong type": lambda v: {**v, "report": 1},
    "dependencies of the wrong type": lambda v: {**v, "dependencies": []},
}


@pytest.mark.parametrize("poison", LAUNCH_POISONS, ids=list(LAUNCH_POISONS))
def test_a_poisoned_launch_decision_does_not_change_what_launch_execs(poison, launchable, server, tree, tmp_path):
    backends = tree / "container/opt/tritonserver/backends"
    argv = ["launch", "--", str(server), f"--model-repository={launchable}", "--backend-directory", str(backends)]
    record = tmp_path / "record.json"
    first = customops(argv, tmp_path, FAKE_SERVER_RECORD=str(record))
    assert first.returncode == 0, first.stderr
    expected = json.loads(record.read_text())
    record.unlink()
    entry = only_entry(tmp_path / "cache" / "launch")
    rewrite_value(entry, LAUNCH_POISONS[poison](json.loads(entry.read_text())["value"]))
    again = customops(argv, tmp_path, FAKE_SERVER_RECORD=str(record))
    clean(again)
    assert again.returncode == 0 and "\x1b" not in again.stderr, again.stderr
    got = json.loads(record.read_text())
    assert (got["argv"], got["env"]) == (expected["argv"], expected["env"])
    assert got["env"]["LD_PRELOAD"] == f"{launchable}/m/ops/libtorch_op.so"
    assert not (tmp_path / "pwned").exists()


def test_a_valid_cached_verdict_still_execs_what_the_current_inputs_say(launchable, server, tree, tmp_path):
    """A hit: the verdict comes from the cache, what is started from the current inputs (the cache does not
    even hold it), and it is what the run that checked printed."""
    backends = tree / "container/opt/tritonserver/backends"
    argv = ["launch", "--dry-run", "--", str(server), f"--model-repository={launchable}", "--backend-directory",
            str(backends)]
    first = customops(argv, tmp_path)
    assert first.returncode == 0 and "libtorch_op.so" in first.stdout
    entry = only_entry(tmp_path / "cache" / "launch")
    value = json.loads(entry.read_text())["value"]
    assert set(value) == {"notes", "report", "dependencies"}  # what to start is not in the cache at all
    again = customops(argv, tmp_path)
    assert again.stdout == first.stdout


# -- every kind of cached JSON result: exact shapes ------------------------------------------------------

PROBE = json.loads(json.dumps(asdict(ProbeResult("/x.so", "loaded", "", None, "", ()))))
REPORT = {"report": "{}", "exit_code": 1, "summary": "FAIL 1 error(s)", "dependencies": {"/x": "1-2-3-4"}}
VERDICT = {"notes": ["a note"], "report": None, "dependencies": {}}
REGISTRY = {"ops": ["Add"], "version": "2.16", "libraries": ["/x.so"]}
SCAN = {"class": 64, "byte_order": "little", "machine": "EM_X86_64", "type": "ET_DYN", "osabi": "ELFOSABI_SYSV",
        "interpreter": None, "soname": "libx.so", "needed": ["libc.so.6"], "rpath": [], "runpath": [], "flags": [],
        "defined_count": 1, "undefined_count": 0, "version_definitions": [], "version_needs": {},
        "weak_version_needs": {}, "version_maxima": {}, "cxx_abi": {"flavour": "none", "defined_cxx11": 0,
                                                                    "defined_old": 0, "undefined_cxx11": 0,
                                                                    "undefined_old": 0},
        "has_symtab": False, "has_section_headers": True}
KINDS = {"report": (REPORT_SHAPE, REPORT), "launch": (VERDICT_SHAPE, VERDICT),
         "probe": ([PROBE_RESULT_SHAPE], [PROBE]), "tensorflow-ops": (TENSORFLOW_REGISTRY_SHAPE, REGISTRY),
         "scan": (RECORD_SHAPE, SCAN)}
SHAPE_ATTACKS = [
    ("report", lambda v: {**v, "exit_code": True}), ("report", lambda v: {**v, "exit_code": 7}),
    ("report", lambda v: {**v, "report": None}), ("report", lambda v: {**v, "report": "a\x1b[31mred"}),
    ("report", lambda v: {**v, "report": "\ud800"}), ("report", lambda v: {**v, "dependencies": {"/x": 1}}),
    ("report", lambda v: {k: x for k, x in v.items() if k != "dependencies"}), ("report", lambda v: [v]),
    ("launch", lambda v: {**v, "argv": ["/bin/sh"]}), ("launch", lambda v: {**v, "environment": {}}),
    ("launch", lambda v: {**v, "notes": "a note"}), ("launch", lambda v: {**v, "notes": ["line\nbreak"]}),
    ("launch", lambda v: {**v, "report": ["x"]}), ("launch", lambda v: None),
    ("probe", lambda v: [{**v[0], "status": 1}]), ("probe", lambda v: [{**v[0], "signal": "9"}]),
    ("probe", lambda v: [{**v[0], "registered": "op"}]), ("probe", lambda v: [{**v[0], "extra": 1}]),
    ("probe", lambda v: [{k: x for k, x in v[0].items() if k != "output"}]), ("probe", lambda v: v[0]),
    ("probe", lambda v: [{**v[0], "sandbox_files": [1]}]), ("probe", lambda v: [{**v[0], "signal": 1.5}]),
    ("tensorflow-ops", lambda v: {**v, "ops": "Add"}), ("tensorflow-ops", lambda v: {**v, "version": None}),
    ("tensorflow-ops", lambda v: {**v, "libraries": [None]}),
    ("scan", lambda v: {**v, "class": 16}), ("scan", lambda v: {**v, "byte_order": "middle"}),
    ("scan", lambda v: {**v, "needed": "libc.so.6"}), ("scan", lambda v: {**v, "cxx_abi": {"flavour": "new"}}),
    ("scan", lambda v: {**v, "version_needs": {"libc.so.6": "GLIBC_2.2.5"}}),
    ("scan", lambda v: {**v, "defined_count": -0.5}), ("scan", lambda v: {**v, "symbols": []}),
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_cached_result_of_exactly_its_shape_is_used(kind, tmp_path):
    shape, value = KINDS[kind]
    cachedir.store_result(tmp_path, kind, ("key",), value)
    assert cachedir.load_result(tmp_path, kind, ("key",), shape) == value


@pytest.mark.parametrize(("kind", "attack"), SHAPE_ATTACKS,
                         ids=[f"{k}-{i}" for i, (k, _) in enumerate(SHAPE_ATTACKS)])
def test_a_cached_result_of_another_shape_is_a_miss(kind, attack, tmp_path):
    shape, value = KINDS[kind]
    cachedir.store_result(tmp_path, kind, ("key",), attack(json.loads(json.dumps(value))))
    assert cachedir.load_result(tmp_path, kind, ("key",), shape) is None


ENVELOPE_ATTACKS = {
    "not JSON": b"{", "NaN": b'{"format": NaN}', "deeply nested": b"[" * 100_000, "not UTF-8": b"\xff\xfe",
    "another format": json.dumps({"format": "results-1", "key": "", "value": {}}).encode(),
    "stored under another key": None, "an empty file": b"", "a bare value": b"1",
}


@pytest.mark.parametrize("attack", ENVELOPE_ATTACKS, ids=list(ENVELOPE_ATTACKS))
def test_a_damaged_result_envelope_is_a_miss(attack, tmp_path):
    def entries() -> set[Path]:
        return {p for p in (tmp_path / "launch").rglob("*") if p.is_file()}

    cachedir.store_result(tmp_path, "launch", ("key",), VERDICT)
    (entry,) = entries()
    cachedir.store_result(tmp_path, "launch", ("other key",), VERDICT)
    (other,) = entries() - {entry}
    entry.write_bytes(other.read_bytes() if ENVELOPE_ATTACKS[attack] is None else ENVELOPE_ATTACKS[attack])
    assert cachedir.load_result(tmp_path, "launch", ("key",), VERDICT_SHAPE) is None


def test_results_are_neither_read_nor_written_without_a_cache_directory(tmp_path):
    cachedir.store_result(None, "launch", ("key",), VERDICT)
    assert cachedir.load_result(None, "launch", ("key",), VERDICT_SHAPE) is None


def test_two_runs_creating_the_cache_directory_at_once_both_use_it(tmp_path, monkeypatch):
    """The directory appears between the check that it is missing and the mkdir (another run made it): it
    is trusted by the same checks as any existing one, not given up on."""
    from customops import cachedir

    wanted = tmp_path / "new" / "cache"
    real_mkdir = os.mkdir

    def racing_mkdir(path, mode=0o777, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_mkdir(path, mode)  # the other run wins the race
        return real_mkdir(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    cachedir._trusted_roots.pop(str(wanted), None)
    assert cachedir.trusted_root(wanted) == wanted
