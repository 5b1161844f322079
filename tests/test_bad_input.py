"""Hostile and broken input, row by row: a one-line error naming the file and the reason with exit status 2,
or the finding that describes it; never a traceback, never a hang, never a modified repository."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import needs_toolchain

Row = tuple[str, Callable[[Path, Path], list[str]], int, str]


def customops(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def elf(tree: Path) -> bytes:
    return (tree / "e/libvuser.so").read_bytes()


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def patched(tree: Path, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(elf(tree))
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


def repo(t: Path, configs: dict[str, str | bytes], manifest: str | None = None) -> Path:
    for name, config in configs.items():
        (t / "models" / name / "1").mkdir(parents=True, exist_ok=True)
        write(t / "models" / name / "config.pbtxt", config)
    if manifest is not None:
        write(t / "models" / "customops.toml", manifest)
    return t / "models"


def check(t: Path, tree: Path, configs: dict, manifest: str | None = None, *extra: str) -> list[str]:
    return ["check", str(repo(t, configs, manifest)), "--container-root", str(tree / "container"), *extra]


def against(t: Path, *options: str) -> list[str]:
    """check of a one-model repository, with the container given by `options` only."""
    return ["check", str(repo(t, {"m": ONNX})), *options]


def loop(t: Path) -> Path:
    (t / "loop.so").symlink_to(t / "loop.so")
    return t / "loop.so"


def dangling(t: Path) -> Path:
    (t / "gone.so").symlink_to(t / "nowhere.so")
    return t / "gone.so"


def sparse(t: Path, size: int) -> Path:
    with open(t / "huge.so", "wb") as f:
        f.truncate(size)
    return t / "huge.so"


ONNX = 'backend: "onnxruntime"\n'
ROWS: list[Row] = [
    # ELF files given to scan
    ("empty file", lambda t, tr: ["scan", str(write(t / "e.so", b""))], 2, "empty file"),
    ("directory", lambda t, tr: ["scan", str(t)], 2, "is a directory"),
    ("symlink loop", lambda t, tr: ["scan", str(loop(t))], 2, "symbolic links"),
    ("dangling symlink", lambda t, tr: ["scan", str(dangling(t))], 2, "No such file"),
    ("missing file", lambda t, tr: ["scan", str(t / "nothere.so")], 2, "No such file"),
    ("text file", lambda t, tr: ["scan", str(write(t / "t.so", "GROUP ( libc.so.6 )\n"))], 2, "not an ELF file"),
    ("truncated header", lambda t, tr: ["scan", str(write(t / "h.so", elf(tr)[:20]))], 2, "ELF header"),
    ("truncated in the tables", lambda t, tr: ["scan", str(write(t / "h.so", elf(tr)[:1200]))], 2, "h.so:"),
    ("program headers past the end", lambda t, tr: ["scan", str(write(t / "p.so", patched(tr, 0x20, "<Q", 1 << 40)))],
     2, "program header table"),
    ("absurd program header count", lambda t, tr: ["scan", str(write(t / "p.so", patched(tr, 0x38, "<H", 0xFFFE)))],
     2, "p.so:"),
    ("tiny program header entries", lambda t, tr: ["scan", str(write(t / "p.so", patched(tr, 0x36, "<H", 8)))],
     2, "entry size"),
    ("invalid class", lambda t, tr: ["scan", str(write(t / "c.so", patched(tr, 4, "B", 9)))], 2, "invalid ELF class"),
    ("invalid data encoding", lambda t, tr: ["scan", str(write(t / "d.so", patched(tr, 5, "B", 7)))], 2,
     "data encoding"),
    ("huge sparse non-ELF file", lambda t, tr: ["scan", str(sparse(t, 3 << 30))], 2, "not an ELF file"),
    ("path with spaces", lambda t, tr: ["scan", str(write(t / "a b.so", b"x"))], 2, "a b.so: not an ELF file"),
    ("path with a colon", lambda t, tr: ["scan", str(write(t / "a:b.so", b"x"))], 2, "a:b.so: not an ELF file"),
    ("path with a newline", lambda t, tr: ["scan", str(write(t / "a\nb.so", b"x"))], 2, "not an ELF file"),
    ("path with non-UTF-8 bytes", lambda t, tr: ["scan", os.fsdecode(bytes(t) + b"/\xff\xfe.so")], 2,
     "No such file"),
    ("32-bit library", lambda t, tr: ["scan", str(tr / "elf/libkinds32.so")], 0, "ELF32"),
    ("big-endian library", lambda t, tr: ["scan", str(tr / "elf/libbe.so")], 0, "big-endian"),
    ("foreign machine", lambda t, tr: ["scan", str(tr / "elf/libarm64.so")], 0, "EM_AARCH64"),
    ("stripped section headers", lambda t, tr: ["scan", str(tr / "elf/libkinds_stripped.so")], 0, "libkinds.so"),
    # model repositories
    ("repository missing", lambda t, tr: ["check", str(t / "nope"), "--container-root", "/"], 2, "does not exist"),
    ("repository is a file", lambda t, tr: ["check", str(write(t / "f", "x")), "--container-root", "/"], 2,
     "is not a directory"),
    ("no repository at all", lambda t, tr: ["check"], 2, "no model repository given"),
    ("config with an unknown field", lambda t, tr: check(t, tr, {"m": ONNX + "bogus: 1\n"}), 1, "CO101"),
    ("config with a wrong type", lambda t, tr: check(t, tr, {"m": ONNX + 'max_batch_size: "x"\n'}), 1, "CO101"),
    ("config with a duplicated field", lambda t, tr: check(t, tr, {"m": ONNX + 'backend: "pytorch"\n'}), 1, "CO101"),
    # the real core's protobuf text parser rejects a byte-order mark (tests/test_triton_core.py)
    ("config with a byte-order mark", lambda t, tr: check(t, tr, {"m": "\ufeff" + ONNX}), 1, "CO101"),
    ("config that is not UTF-8", lambda t, tr: check(t, tr, {"m": b'backend: "\xff\xfe"\n'}), 1, "CO101"),
    ("empty config (auto-complete)", lambda t, tr: check(t, tr, {"m": ""}), 1, "CO102"),
    ("no version directory", lambda t, tr: ["check", str(_no_versions(t)), "--container-root", str(tr / "container")],
     1, "CO103"),
    # manifests
    ("manifest with an unknown key", lambda t, tr: check(t, tr, {"m": ONNX}, "[check]\nfail_on = 'error'\n"), 2,
     "CO106 unknown key 'fail_on'"),
    ("manifest with an unknown section", lambda t, tr: check(t, tr, {"m": ONNX}, "[torch]\nops = []\n"), 2,
     "CO106 unknown section [torch]"),
    ("manifest with a wrong type", lambda t, tr: check(t, tr, {"m": ONNX}, "[pytorch]\nops = 'a.so'\n"), 2,
     "must be a list"),
    ("manifest that is not TOML", lambda t, tr: check(t, tr, {"m": ONNX}, "[pytorch\n"), 2, "not valid TOML"),
    ("manifest with a bad load mode", lambda t, tr: check(t, tr, {"m": ONNX}, "[tensorrt]\nload = 'dlopen'\n"), 2,
     "load must be"),
    ("manifest ignoring an unknown code",
     lambda t, tr: check(t, tr, {"m": ONNX}, "[check]\nignore = [{ code = 'X1' }]\n"), 2, "unknown code"),
    ("manifest path escaping the repository", lambda t, tr: check(t, tr, {"m": ONNX},
                                                                  "[pytorch]\nops = ['../../etc/x.so']\n"), 2,
     "escapes the repository"),
    ("manifest naming a non-ELF library", lambda t, tr: check(t, tr, {"m": ONNX}, "[host]\npreload = ['m/x.so']\n")
     if write(t / "models/m/x.so", "not ELF") else [], 1, "CO30"),
    # profiles, containers, options
    ("profile that is not JSON", lambda t, tr: against(t, "--profile", str(write(t / "p", "{"))), 2, "invalid JSON"),
    ("profile of another schema", lambda t, tr: against(t, "--profile", str(write(t / "p", '{"schema": 1}'))), 2,
     "not a customops profile"),
    ("damaged profile", lambda t, tr: against(t, "--profile", str(write(t / "p", json.dumps(
        {"schema": "customops.profile/1", "facts": {"bogus": 1}})))), 2, "damaged"),
    ("container root that is a file", lambda t, tr: against(t, "--container-root", str(write(t / "r", "x"))), 2,
     "container root is not a directory"),
    ("unknown release", lambda t, tr: against(t, "--triton-release", "1.0"), 2, "unknown Triton release"),
    ("malformed --mount", lambda t, tr: check(t, tr, {"m": ONNX}, None, "--mount", "relative"), 2, "--mount"),
    ("--probe-python that is not a program", lambda t, tr: check(t, tr, {"m": ONNX}, None, "--probe",
                                                                 "--probe-python", str(t / "nope")), 2,
     "--probe-python"),
    ("launch without a server command", lambda t, tr: ["launch", "--dry-run"], 2, "no server command"),
    ("malformed --backend-config", lambda t, tr: ["launch", "--dry-run", "--", "tritonserver",
                                                  "--backend-config=tensorrt"], 2, "expected <backend>"),
    ("unknown finding code", lambda t, tr: ["explain", "CO000"], 2, "unknown code"),
    ("read-only cache directory", lambda t, tr: ["scan", str(tr / "e/libvuser.so"), "--cache-dir",
                                                 str(_read_only(t))], 0, "libvuser.so"),
    ("cache directory that is a file", lambda t, tr: ["scan", str(tr / "e/libvuser.so"), "--cache-dir",
                                                      str(write(t / "cachefile", "x"))], 0, "libvuser.so"),
]


def _no_versions(t: Path) -> Path:
    write(t / "models" / "m" / "config.pbtxt", ONNX)
    return t / "models"


def _read_only(t: Path) -> Path:
    (t / "ro").mkdir()
    (t / "ro").chmod(0o500)
    return t / "ro"


# Rows whose library only a cross or multilib toolchain builds: skipped, with the reason, where it cannot.
NEEDS_TOOLCHAIN = {"32-bit library": "m32", "big-endian library": "s390x", "foreign machine": "aarch64"}


@pytest.mark.parametrize(("name", "setup", "status", "expected"), [
    pytest.param(*row, id=row[0], marks=[needs_toolchain(NEEDS_TOOLCHAIN[row[0]])] if row[0] in NEEDS_TOOLCHAIN else [])
    for row in ROWS])
def test_bad_input(name, setup, status, expected, tree, tmp_path):
    args = setup(tmp_path, tree)
    result = customops(args, tmp_path, tmp_path / "cache")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.returncode == status, (result.stdout[-1500:], result.stderr)
    if status == 2:
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("customops: "), result.stderr
        assert expected in result.stderr
    else:
        assert expected in result.stdout + result.stderr


def test_the_hostile_input_tables_have_more_than_150_rows():
    """This table, the CLI's (injection, output, exit statuses) and the malformed profiles'."""
    import test_attacks_profile
    import test_hostile_cli

    assert len(ROWS) + len(test_hostile_cli.ROWS) + len(test_attacks_profile.MALFORMED) > 150


def test_a_repository_of_ten_thousand_models(tree, tmp_path):
    models = tmp_path / "models"
    for i in range(10_000):
        (models / f"m{i}" / "1").mkdir(parents=True)
        (models / f"m{i}" / "config.pbtxt").write_text(ONNX)
    result = customops(["check", str(models), "--container-root", str(tree / "container"), "--format", "json"],
                       tmp_path, tmp_path / "cache")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["summary"]["models"] == 10_000


def test_concurrent_checks_share_one_cache(tree, tmp_path):
    shutil.copytree(Path(__file__).parent.parent / "examples/model_repository", tmp_path / "models",
                    ignore=shutil.ignore_patterns("*.so"))
    from fixtures.example import install

    container = install(tmp_path / "models")
    args = ["check", str(tmp_path / "models"), "--container-root", str(container), "--format", "json"]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: customops(args, tmp_path, tmp_path / "shared-cache"), range(4)))
    findings = [json.dumps(json.loads(r.stdout)["findings"], sort_keys=True) for r in results]
    assert len(set(findings)) == 1 and all(r.returncode == 1 for r in results)
