"""Attacks through a profile: a committed customops-profile.json is read by a plain `customops check`, so a
pull request controls it. Nothing in one may write outside the skeleton directory, leave a setuid or
world-writable file, make one profile's skeleton answer for another's, or end in anything but a one-line
error with exit status 2.

The CLI runs with HOME, TMPDIR and the cache inside tmp_path; a sentinel (tmp_path/victim, HOME/.bashrc)
shows any write outside.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import signal
import stat
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from customops.cli import main
from customops.errors import InputError
from customops.triton import profile, profile_schema, skeleton
from customops.triton.container import ContainerFacts, FactsFrom, read_profile
from customops.triton.skeleton import build as build_skeleton
from customops.triton.skeleton import materialize, skeleton_key

TIMEOUT = 120
SCHEMA = "customops.profile/1"


def enc(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data)).decode()


@functools.cache
def zeros(size: int) -> str:
    """A zlib bomb: `size` zero bytes, compressed (made once per size)."""
    return enc(bytes(size))


def valid() -> dict:
    """A small profile that passes every check (each malformed row below changes one thing)."""
    return {"schema": SCHEMA,
            "facts": {"glibc": "GLIBC_2.36", "backends": ["onnxruntime"], "source": "root", "missing": []},
            "backend_dir": "/opt/tritonserver/backends", "server": "/opt/tritonserver/bin/tritonserver",
            "server_args": ["--model-repository=/models"],
            "target": {"system_dirs": ["/lib"], "lib_token": "lib", "platform": "x86_64"},
            "directories": ["/lib", "/opt/tritonserver/bin"],
            "links": {"/lib/libz.so": "libz.so.1"},
            "files": {"/lib/libz.so.1": {"size": 64, "mode": 0o755, "chunks": [[0, enc(b"\x7fELF")], [16, enc(b"x")]]},
                      "/opt/tritonserver/TRITON_VERSION": {"size": 5, "mode": 0o644, "content": enc(b"2.50\n")}},
            "ld_so_cache": enc(b"ld.so-1.7.0")}


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    for name in ("home", "tmp"):
        (tmp_path / name).mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update({"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
                "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache"), **extra})
    return env


def customops(args: list[str], tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=tmp_path,
                          env=environment(tmp_path, **extra), timeout=TIMEOUT)


def repository(tmp_path: Path, manifest: str | None = None) -> Path:
    models = tmp_path / "models"
    (models / "m" / "1").mkdir(parents=True, exist_ok=True)
    (models / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    if manifest is not None:
        (models / "customops.toml").write_text(manifest)
    return models


def write_profile(path: Path, data: dict | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def one_line_exit_2(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("customops: "), result.stderr


def sentinels(tmp_path: Path) -> list[Path]:
    return [tmp_path / "victim", tmp_path / "home" / ".bashrc", tmp_path / "outside" / "x.so"]


def nothing_outside(tmp_path: Path) -> None:
    """No sentinel written, no staging directory or temporary skeleton left."""
    assert not any(p.exists() or p.is_symlink() for p in sentinels(tmp_path))
    assert not list((tmp_path / "cache" / "profiles").glob(".staging-*"))
    assert not list((tmp_path / "tmp").glob("customops-skeleton-*"))


@pytest.fixture(scope="session")
def fixture_profile(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The profile of the fixture container, written by the real `profile create`."""
    out = tmp_path_factory.mktemp("profile") / "profile.json"
    result = subprocess.run([sys.executable, "-m", "customops", "profile", "create", "--container-root",
                             str(tree / "container"), "-o", str(out)], capture_output=True, text=True,
                            timeout=TIMEOUT, env={**os.environ, "CUSTOMOPS_CACHE_DIR": str(out.parent / "cache")})
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


# -- writes outside the skeleton ------------------------------------------------------------------------

def _file(content: bytes = b"x") -> dict:
    return {"size": len(content), "mode": 0o644, "content": enc(content)}


ESCAPES: dict[str, Callable[[dict, Path], object]] = {
    "file at /../../../victim": lambda p, t: p["files"].update({"/../../../victim": _file()}),
    "file at a relative ../ path": lambda p, t: p["files"].update({"../../../victim": _file()}),
    "file at ../ into HOME's .bashrc": lambda p, t: p["files"].update({"/lib/../../../../home/.bashrc": _file()}),
    "link at /../../../victim": lambda p, t: p["links"].update({"/../../../victim": "/etc/passwd"}),
    "directory at /../../../victim": lambda p, t: p["directories"].append("/../../../victim"),
    "file under a link to the outside": lambda p, t: (p["links"].update({"/usr": str(t / "outside")}),
                                                      p["files"].update({"/usr/x.so": _file()})),
    "ld.so.cache under a link to the outside": lambda p, t: p["links"].update({"/etc": str(t / "outside")}),
    "directory under a link to the outside": lambda p, t: (p["links"].update({"/usr": str(t / "outside")}),
                                                           p["directories"].append("/usr/x.so")),
    "link under a link to the outside": lambda p, t: (p["links"].update({"/usr": str(t / "outside")}),
                                                      p["links"].update({"/usr/x.so": "/etc/passwd"})),
}


@pytest.mark.parametrize("escape", ESCAPES, ids=list(ESCAPES))
def test_a_profile_cannot_write_outside_the_skeleton(escape, tmp_path):
    (tmp_path / "outside").mkdir()
    hostile = valid()
    ESCAPES[escape](hostile, tmp_path)
    path = write_profile(tmp_path / "profile.json", hostile)
    result = customops(["check", str(repository(tmp_path)), "--profile", str(path)], tmp_path)
    one_line_exit_2(result)
    nothing_outside(tmp_path)


def test_an_absolute_path_in_a_profile_is_a_path_inside_the_skeleton(tmp_path):
    data = valid()
    data["files"][str(tmp_path / "victim")] = _file()
    skeleton = materialize(profile.read(str(write_profile(tmp_path / "p.json", data))), tmp_path / "cache")
    assert skeleton is not None and (Path(skeleton) / str(tmp_path / "victim").lstrip("/")).is_file()
    nothing_outside(tmp_path)


def test_a_committed_profile_beside_the_repository_cannot_write_outside(tmp_path):
    """The pull-request case: no --profile, no container root; customops-profile.json in the checkout."""
    if os.path.isdir("/opt/tritonserver"):
        pytest.skip("a Triton container: the profile beside the repository is not used here")
    models = repository(tmp_path)
    write_profile(models / "customops-profile.json", {**valid(), "files": {"/../../../../victim": {
        "size": 1, "mode": 0o644, "content": enc(b"x")}}})
    result = customops(["check", str(models)], tmp_path)
    one_line_exit_2(result)
    assert "customops-profile.json" in result.stderr
    nothing_outside(tmp_path)


def test_a_link_to_the_outside_is_created_but_nothing_is_written_through_it(tmp_path):
    """Symlink targets may be anything (the linker model resolves them inside the root); they are made last,
    so no file of the profile is ever written through one."""
    (tmp_path / "outside").mkdir()
    data = valid()
    data["links"] = {"/lib/libz.so": str(tmp_path / "victim"), "/opt/out": str(tmp_path / "outside")}
    skeleton = materialize(profile.read(str(write_profile(tmp_path / "p.json", data))), tmp_path / "cache")
    assert skeleton is not None and os.readlink(Path(skeleton) / "opt" / "out") == str(tmp_path / "outside")
    assert not list((tmp_path / "outside").iterdir())
    nothing_outside(tmp_path)


def test_materialisation_never_follows_a_symlink_even_one_it_did_not_expect(tmp_path):
    """The second layer: were a symlink already there (not possible for a profile that passed `read`),
    directories are entered with O_NOFOLLOW and files created with O_EXCL|O_NOFOLLOW."""
    (tmp_path / "outside").mkdir()
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "lib").symlink_to(tmp_path / "outside")
    (staging / "file").symlink_to(tmp_path / "victim")
    for files in ({"/lib/x.so": {"size": 1, "mode": 0o644, "content": enc(b"x")}},
                  {"/file": {"size": 1, "mode": 0o644, "content": enc(b"x")}}):
        with pytest.raises(InputError):
            build_skeleton({"files": files}, str(staging), "profile.json")
    assert not list((tmp_path / "outside").iterdir()) and not (tmp_path / "victim").exists()


MODES = [0o4755, 0o2755, 0o1755, 0o7777, 0o777, 0o666, 0o000]


@pytest.mark.parametrize("mode", MODES, ids=[oct(m) for m in MODES])
def test_setuid_setgid_sticky_and_group_or_world_write_are_masked(mode, tmp_path):
    data = valid()
    for entry in data["files"].values():
        entry["mode"] = mode
    skeleton = materialize(profile.read(str(write_profile(tmp_path / "p.json", data))), tmp_path / "cache")
    assert skeleton is not None
    for path in [Path(skeleton), *Path(skeleton).rglob("*")]:
        if path.is_symlink():
            continue
        bits = stat.S_IMODE(path.stat().st_mode)
        assert not bits & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022), (path, oct(bits))
        assert bits & 0o400, (path, oct(bits))  # still readable by the checker


def test_the_cli_masks_modes_of_a_real_profile(fixture_profile, tmp_path):
    data = copy.deepcopy(fixture_profile)
    for entry in data["files"].values():
        entry["mode"] = 0o7777
    path = write_profile(tmp_path / "p.json", data)
    result = customops(["check", str(repository(tmp_path)), "--profile", str(path), "--format", "json"], tmp_path)
    assert result.returncode in (0, 1), result.stderr
    (skeleton,) = (tmp_path / "cache" / "profiles").iterdir()
    assert not [p for p in skeleton.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o7022]


# -- one profile's skeleton never answers for another's ---------------------------------------------------

def _needing(out: Path, dependency: str) -> Path:
    stub = out.parent / "stub" / f"lib{dependency}.so"
    stub.parent.mkdir(parents=True)
    (stub.parent / "s.c").write_text("int dep_fn(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub), str(stub.parent / "s.c"),
                    f"-Wl,-soname,lib{dependency}.so"], check=True)
    (out.parent / "n.c").write_text("int dep_fn(void); int use(void) { return dep_fn(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(out.parent / "n.c"), f"-L{stub.parent}",
                    f"-l{dependency}"], check=True)
    for p in (stub, stub.parent / "s.c", out.parent / "n.c"):
        p.unlink()
    stub.parent.rmdir()
    return out


def test_profiles_with_the_same_files_but_other_links_get_their_own_skeleton_and_verdict(fixture_profile,
                                                                                          tmp_path):
    """The preload needs libalias.so, which only the second profile's symlink provides. Checked in this
    order with one cache, the second used to get the first one's skeleton (keyed by the files only)."""
    models = repository(tmp_path, '[host]\npreload = ["m/libneeds.so"]\n')
    _needing(models / "m" / "libneeds.so", "alias")
    without = write_profile(tmp_path / "without.json", fixture_profile)
    with_link = copy.deepcopy(fixture_profile)
    with_link["links"]["/usr/lib/x86_64-linux-gnu/libalias.so"] = "/lib/x86_64-linux-gnu/libm.so.6"
    linked = write_profile(tmp_path / "linked.json", with_link)
    first = customops(["check", str(models), "--profile", str(without)], tmp_path)
    second = customops(["check", str(models), "--profile", str(linked)], tmp_path)
    assert first.returncode == 1 and "CO302" in first.stdout, first.stdout + first.stderr
    assert "CO302" not in second.stdout, second.stdout + second.stderr
    assert len(list((tmp_path / "cache" / "profiles").iterdir())) == 2


def test_profiles_with_the_same_files_but_another_ld_so_cache_get_their_own_skeleton(fixture_profile, tmp_path):
    data = copy.deepcopy(fixture_profile)
    assert data["ld_so_cache"] is None or isinstance(data["ld_so_cache"], str)
    with_cache = {**data, "ld_so_cache": enc(b"glibc-ld.so.cache1.1" + bytes(64))}
    without_cache = {**data, "ld_so_cache": None}
    roots = [materialize(profile.read(str(write_profile(tmp_path / f"{i}.json", d))), tmp_path / "cache")
             for i, d in enumerate((with_cache, without_cache))]
    assert roots[0] != roots[1]
    assert (Path(roots[0]) / "etc" / "ld.so.cache").exists() and not (Path(roots[1]) / "etc" / "ld.so.cache").exists()


KEY_PARTS: dict[str, Callable[[dict], None]] = {
    "files": lambda p: p["files"]["/lib/libz.so.1"].update(mode=0o700),
    "links": lambda p: p["links"].update({"/lib/libz.so": "libz.so.2"}),
    "directories": lambda p: p["directories"].append("/usr/lib"),
    "ld_so_cache": lambda p: p.update(ld_so_cache=None),
}


@pytest.mark.parametrize("part", KEY_PARTS)
def test_the_skeleton_key_covers_everything_the_skeleton_is_made_of(part):
    changed = valid()
    KEY_PARTS[part](changed)
    assert skeleton_key(changed) != skeleton_key(valid())


def test_the_skeleton_key_covers_the_format_and_not_the_facts(monkeypatch):
    facts = {**valid(), "facts": {"glibc": "GLIBC_2.17"}}
    assert skeleton_key(facts) == skeleton_key(valid())
    before = skeleton_key(valid())
    monkeypatch.setattr(skeleton, "SKELETON_FORMAT", "skeleton-next")
    assert skeleton_key(valid()) != before


UNTRUSTED_SKELETONS = {
    "made world-writable": lambda skeleton, t: skeleton.chmod(0o777),
    "owned by another user": lambda skeleton, t: os.chown(skeleton, 65534, 65534),
    "a symlink to a planted tree": lambda skeleton, t: (skeleton.rename(t / "planted"),
                                                        skeleton.symlink_to(t / "planted")),
}


@pytest.mark.parametrize("make", UNTRUSTED_SKELETONS, ids=list(UNTRUSTED_SKELETONS))
def test_a_cached_skeleton_someone_else_could_have_changed_is_not_used(make, fixture_profile, tmp_path):
    if make == "owned by another user" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    models = repository(tmp_path, '[host]\npreload = ["m/libneeds.so"]\n')
    _needing(models / "m" / "libneeds.so", "alias")
    data = copy.deepcopy(fixture_profile)
    data["links"]["/usr/lib/x86_64-linux-gnu/libalias.so"] = "/lib/x86_64-linux-gnu/libm.so.6"
    args = ["check", str(models), "--profile", str(write_profile(tmp_path / "p.json", data))]
    first = customops(args, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    (skeleton,) = (tmp_path / "cache" / "profiles").iterdir()
    (skeleton / "usr" / "lib" / "x86_64-linux-gnu" / "libalias.so").unlink()  # used, this would be CO302
    UNTRUSTED_SKELETONS[make](skeleton, tmp_path)
    again = customops(args, tmp_path)
    assert again.returncode == 0 and "CO302" not in again.stdout, again.stdout + again.stderr
    nothing_outside(tmp_path)


# -- atomic, and cleaned up on every exit path -------------------------------------------------------------

def test_a_profile_failing_late_leaves_no_staging_directory(tmp_path):
    data = valid()
    data["files"]["/zz/last.so"] = {"size": 64, "mode": 0o644, "chunks": [[0, base64.b64encode(b"junk").decode()]]}
    path = write_profile(tmp_path / "p.json", data)
    for extra in ((), ("--no-cache",)):
        result = customops(["check", str(repository(tmp_path)), "--profile", str(path), *extra], tmp_path)
        one_line_exit_2(result)
        assert "/files/~1zz~1last.so/chunks/0/1" in result.stderr
    assert not list((tmp_path / "cache" / "profiles").iterdir())
    nothing_outside(tmp_path)


def test_no_cache_builds_the_skeleton_in_a_temporary_directory_removed_at_exit(fixture_profile, tmp_path):
    path = write_profile(tmp_path / "p.json", fixture_profile)
    result = customops(["check", str(repository(tmp_path)), "--profile", str(path), "--no-cache"], tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert not (tmp_path / "cache").exists() and not list((tmp_path / "tmp").iterdir())


def _slow_profile(path: Path) -> Path:
    """50,000 small files: materialising them takes a second or more, long enough to interrupt it."""
    data = valid()
    chunk = [[0, enc(b"\x7fELF")]]
    data["files"] = {f"/lib/d{i % 100}/lib{i}.so": {"size": 64, "mode": 0o644, "chunks": chunk}
                     for i in range(50_000)}
    return write_profile(path, data)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_materialisation_leaves_nothing_behind(signum, status, tmp_path):
    path = _slow_profile(tmp_path / "p.json")
    proc = subprocess.Popen([sys.executable, "-m", "customops", "check", str(repository(tmp_path)), "--profile",
                             str(path)], cwd=tmp_path, env=environment(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    profiles = tmp_path / "cache" / "profiles"
    deadline = time.monotonic() + 60
    while not (profiles.exists() and list(profiles.glob(".staging-*/lib/d*"))) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr
    assert not list(profiles.iterdir())


def _materialize_in_a_process(args: tuple[str, str]) -> str | None:
    path, cache = args
    return materialize(profile.read(path), Path(cache))


def test_concurrent_materialisations_agree_on_one_complete_skeleton(tmp_path):
    path = write_profile(tmp_path / "p.json", valid())
    with ProcessPoolExecutor(4) as pool:
        roots = set(pool.map(_materialize_in_a_process, [(str(path), str(tmp_path / "cache"))] * 8))
    assert len(roots) == 1
    assert [p.name for p in (tmp_path / "cache" / "profiles").iterdir()] == [Path(roots.pop()).name]


# -- malformed profiles: one line, exit status 2 --------------------------------------------------------------

def mutate(change: Callable[[dict], object]) -> Callable[[Path], Path]:
    def make(t: Path) -> Path:
        data = valid()
        change(data)
        return write_profile(t / "profile.json", data)
    return make


def raw(data: bytes) -> Callable[[Path], Path]:
    return lambda t: write_profile(t / "profile.json", data)


def file_entry(**fields: object) -> Callable[[dict], object]:
    return lambda p: p["files"]["/lib/libz.so.1"].update(fields)


def chunks(*pairs: list) -> Callable[[dict], object]:
    return lambda p: p["files"]["/lib/libz.so.1"].update(chunks=list(pairs))


def _fifo(t: Path) -> Path:
    os.mkfifo(t / "profile.json")
    return t / "profile.json"


def _directory(t: Path) -> Path:
    (t / "profile.json").mkdir()
    return t / "profile.json"


def _sparse(t: Path) -> Path:
    with open(t / "profile.json", "wb") as f:
        f.truncate(profile.safeio.PROFILE_LIMIT + 1)
    return t / "profile.json"


def _link_to_dev_zero(t: Path) -> Path:
    (t / "profile.json").symlink_to("/dev/zero")
    return t / "profile.json"


def _unset(*keys: str) -> Callable[[dict], object]:
    def change(p: dict) -> None:
        for key in keys:
            p.pop(key)
    return change


HEADER = b'{"schema": "customops.profile/1", "facts": '
LIB = "/files/~1lib~1libz.so.1"
MALFORMED: list[tuple[str, Callable[[Path], Path], str]] = [
    # the file itself
    ("a FIFO", _fifo, "not a regular file (a FIFO)"),
    ("a directory", _directory, "not a regular file (a directory)"),
    ("/dev/zero", lambda t: Path("/dev/zero"), "not a regular file (a character device)"),
    ("a symlink to /dev/zero", _link_to_dev_zero, "not a regular file (a character device)"),
    ("a huge sparse file", _sparse, "over the limit"),
    ("a missing file", lambda t: t / "nowhere.json", "No such file or directory"),
    # JSON
    ("not JSON", raw(b"{"), "invalid JSON"),
    ("an empty file", raw(b""), "invalid JSON"),
    ("not UTF-8", raw(HEADER + b'{"glibc": "\xff"}}'), "not UTF-8"),
    ("UTF-16", raw(json.dumps(valid()).encode("utf-16")), "not UTF-8"),
    ("a JSON array", raw(b"[]"), "not a customops profile"),
    ("another schema", mutate(lambda p: p.update(schema="customops.profile/2")), "expected schema"),
    ("a duplicate key", raw(HEADER + b'{}, "facts": {}}'), "duplicate key 'facts'"),
    ("a duplicate file", raw(HEADER + b'{}, "files": {"/a": {}, "/a": {}}}'), "duplicate key '/a'"),
    ("NaN", raw(HEADER + b'{"glibc": NaN}}'), "NaN is not JSON"),
    ("Infinity", raw(HEADER + b'{}, "files": {"/a": {"size": Infinity}}}'), "Infinity is not JSON"),
    ("nested thousands deep", raw(b"[" * 100_000), "nested too deeply"),
    ("nested thousands deep inside facts", raw(HEADER + b'{"x": ' + b"[" * 100_000), "nested too deeply"),
    ("an integer of 5000 digits", raw(HEADER + b'{}, "files": {"/a": {"size": 1' + b"0" * 5000 + b"}}}"),
     "invalid JSON"),
    # top level and facts
    ("an unknown top-level key", mutate(lambda p: p.update(extra=1)), "/extra: unknown key"),
    ("no facts", mutate(_unset("facts")), "/facts: missing"),
    ("facts an array", mutate(lambda p: p.update(facts=[])), "/facts: expected an object, not an array"),
    ("an unknown fact", mutate(lambda p: p["facts"].update(bogus=1)), "/facts/bogus: unknown key"),
    ("glibc an integer", mutate(lambda p: p["facts"].update(glibc=236)), "/facts/glibc: expected a string"),
    ("a version with an escape sequence", mutate(lambda p: p["facts"].update(glibc="\x1b[2J")),
     "/facts/glibc: contains a control character"),
    ("a version of 1000 characters", mutate(lambda p: p["facts"].update(cuda="1" * 1000)), "longer than 256"),
    ("a backend name with a slash", mutate(lambda p: p["facts"].update(backends=["../x"])),
     "/facts/backends/0: not a backend name"),
    ("backends a string", mutate(lambda p: p["facts"].update(backends="onnxruntime")),
     "/facts/backends: expected an array"),
    ("missing with a number", mutate(lambda p: p["facts"].update(missing=[1])), "/facts/missing/0: expected a string"),
    ("backend_dir relative", mutate(lambda p: p.update(backend_dir="backends")), "/backend_dir: not an absolute"),
    ("backend_dir with ..", mutate(lambda p: p.update(backend_dir="/opt/../../etc")), "/backend_dir: not an absolute"),
    ("server an integer", mutate(lambda p: p.update(server=1)), "/server: expected a string, not an integer"),
    ("server_args a string", mutate(lambda p: p.update(server_args="--x")), "/server_args: expected an array"),
    ("server_args with null", mutate(lambda p: p.update(server_args=[None])), "/server_args/0: expected a string"),
    ("a relative --model-repository", mutate(lambda p: p.update(server_args=["--model-repository=models"])),
     "/server_args/0: not an absolute"),
    ("environment an array", mutate(lambda p: p.update(environment=[])), "/environment: expected an object"),
    ("an environment variable that is no loader's", mutate(lambda p: p.update(environment={"PATH": "/bin"})),
     "/environment/PATH: not a loader variable"),
    ("an LD_PRELOAD with a newline", mutate(lambda p: p.update(environment={"LD_PRELOAD": "/a.so\n/b.so"})),
     "/environment/LD_PRELOAD: contains a control character"),
    ("a relative working directory", mutate(lambda p: p.update(working_directory="opt")),
     "/working_directory: not an absolute"),
    ("target with an unknown key", mutate(lambda p: p["target"].update(extra=1)), "/target: expected exactly"),
    ("a relative system directory", mutate(lambda p: p["target"].update(system_dirs=["lib"])),
     "/target/system_dirs/0: not an absolute"),
    # paths
    ("directories an object", mutate(lambda p: p.update(directories={})), "/directories: expected an array"),
    ("a relative directory", mutate(lambda p: p["directories"].append("lib")), "/directories/2: not an absolute"),
    ("a directory with ..", mutate(lambda p: p["directories"].append("/lib/../..")), "/directories/2: not an absolute"),
    ("a directory with .", mutate(lambda p: p["directories"].append("/lib/./x")), "/directories/2: not an absolute"),
    ("a directory with //", mutate(lambda p: p["directories"].append("//lib")), "/directories/2: not an absolute"),
    ("a directory with a trailing /", mutate(lambda p: p["directories"].append("/usr/")), "/directories/2: not an"),
    ("a NUL in a path", mutate(lambda p: p["directories"].append("/lib/a\x00b")), "contains a control character"),
    ("a newline in a path", mutate(lambda p: p["directories"].append("/lib/a\nb")), "contains a control character"),
    ("an escape sequence in a path", mutate(lambda p: p["directories"].append("/x\x1b]0;t\x07")),
     "contains a control character"),
    ("a lone surrogate in a path", mutate(lambda p: p["directories"].append("/lib/\ud800")), "not encodable"),
    ("a path of 5000 characters", mutate(lambda p: p["directories"].append("/" + "a" * 4999)), "longer than 4096"),
    ("a component of 256 bytes", mutate(lambda p: p["directories"].append("/" + "a" * 256)), "longer than 255"),
    ("a path 200 directories deep", mutate(lambda p: p["directories"].append("/a" * 200)), "more than 128"),
    ("a directory listed twice", mutate(lambda p: p["directories"].append("/lib")), "listed twice"),
    ("the root as a file", mutate(lambda p: p["files"].update({"/": {"size": 0, "mode": 0o644, "chunks": []}})),
     "the root directory cannot be a file"),
    # links
    ("links an array", mutate(lambda p: p.update(links=[])), "/links: expected an object"),
    ("a link at the root", mutate(lambda p: p["links"].update({"/": "x"})), "the root directory cannot be a link"),
    ("an empty link target", mutate(lambda p: p["links"].update({"/lib/a": ""})), "an empty symlink target"),
    ("a NUL in a link target", mutate(lambda p: p["links"].update({"/lib/a": "b\x00c"})), "control character"),
    ("a link target not a string", mutate(lambda p: p["links"].update({"/lib/a": 1})), "expected a string"),
    ("a relative link path", mutate(lambda p: p["links"].update({"lib/a": "b"})), "/links/lib~1a: not an absolute"),
    # files
    ("files an array", mutate(lambda p: p.update(files=[])), "/files: expected an object"),
    ("a file entry a string", mutate(lambda p: p["files"].update({"/lib/a": "x"})), "/files/~1lib~1a: expected an"),
    ("a file without a mode", mutate(lambda p: p["files"]["/lib/libz.so.1"].pop("mode")), "expected the keys"),
    ("a file with chunks and content", mutate(file_entry(content=enc(b"x"))), "expected the keys"),
    ("a file with an unknown key", mutate(file_entry(owner="root")), "expected the keys"),
    ("a negative size", mutate(file_entry(size=-1)), f"{LIB}/size: -1 is outside"),
    ("a size that is a boolean", mutate(file_entry(size=True)), f"{LIB}/size: expected an integer, not a boolean"),
    ("a size that is a number", mutate(file_entry(size=1.5)), f"{LIB}/size: expected an integer, not a number"),
    ("a size that is a string", mutate(file_entry(size="64")), f"{LIB}/size: expected an integer, not a string"),
    ("a size over 64 GiB", mutate(file_entry(size=1 << 40)), f"{LIB}/size: {1 << 40} is outside"),
    ("a mode over 0o7777", mutate(file_entry(mode=0o10000)), f"{LIB}/mode: 4096 is outside"),
    ("a mode that is a string", mutate(file_entry(mode="755")), f"{LIB}/mode: expected an integer"),
    ("chunks an object", mutate(file_entry(chunks={})), f"{LIB}/chunks: expected an array"),
    ("a chunk that is not a pair", mutate(chunks([0])), f"{LIB}/chunks/0: expected [offset, data]"),
    ("a chunk offset past the size", mutate(chunks([65, enc(b"x")])), f"{LIB}/chunks/0/0: 65 is outside"),
    ("a negative chunk offset", mutate(chunks([-1, enc(b"x")])), f"{LIB}/chunks/0/0: -1 is outside"),
    ("chunks out of order", mutate(chunks([8, enc(b"x")], [0, enc(b"y")])), "increasing order of offset"),
    ("two chunks at one offset", mutate(chunks([8, enc(b"x")], [8, enc(b"y")])), "increasing order of offset"),
    ("chunk data not a string", mutate(chunks([0, 1])), f"{LIB}/chunks/0/1: expected base64 text"),
    ("chunk data not base64", mutate(chunks([0, "!!!!"])), f"{LIB}/chunks/0/1: expected base64 text"),
    ("base64 of a wrong length", mutate(chunks([0, "abc"])), f"{LIB}/chunks/0/1: expected base64 text"),
    ("chunk data not zlib", mutate(chunks([0, base64.b64encode(b"hello").decode()])), "corrupt compressed data"),
    ("truncated zlib", mutate(chunks([0, base64.b64encode(zlib.compress(b"x" * 10)[:-4]).decode()])),
     "truncated compressed data"),
    ("a chunk decompressing past the file's end", mutate(chunks([0, enc(bytes(1000))])),
     "decompresses to more than 64 bytes"),
    ("overlapping chunks", mutate(chunks([0, enc(bytes(16))], [8, enc(b"x")])), "overlaps the previous chunk"),
    ("a zlib bomb in a chunk", mutate(lambda p: p["files"].update({"/lib/big.so": {
        "size": 1 << 20, "mode": 0o644, "chunks": [[0, zeros(100 << 20)]]}})),
     "decompresses to more than 1048576 bytes"),
    ("content shorter than the size", mutate(lambda p: p["files"]["/opt/tritonserver/TRITON_VERSION"].update(
        size=50)), "holds 5 bytes, not the size 50"),
    ("content not zlib", mutate(lambda p: p["files"]["/opt/tritonserver/TRITON_VERSION"].update(
        content=base64.b64encode(b"2.50").decode())), "corrupt compressed data"),
    ("content of a file over 1 MiB", mutate(lambda p: p["files"]["/opt/tritonserver/TRITON_VERSION"].update(
        size=2 << 20)), "over 1048576 bytes for a file kept whole"),
    ("a zlib bomb as content", mutate(lambda p: p["files"]["/opt/tritonserver/TRITON_VERSION"].update(
        size=1 << 20, content=zeros(50 << 20))), "decompresses to more than"),
    ("ld_so_cache a number", mutate(lambda p: p.update(ld_so_cache=1)), "/ld_so_cache: expected base64 text"),
    ("ld_so_cache not zlib", mutate(lambda p: p.update(ld_so_cache=base64.b64encode(b"cache").decode())),
     "/ld_so_cache: corrupt compressed data"),
    ("an ld.so.cache zlib bomb over 64 MiB", mutate(lambda p: p.update(ld_so_cache=zeros(65 << 20))),
     "/ld_so_cache: decompresses to more than 67108864 bytes"),
    # what nests under what
    ("a file under a file", mutate(lambda p: p["files"].update({"/lib/libz.so.1/x": {
        "size": 0, "mode": 0o644, "chunks": []}})), "lies under /lib/libz.so.1, which the profile makes a file"),
    ("a file under a link", mutate(lambda p: p["files"].update({"/lib/libz.so/x": {
        "size": 0, "mode": 0o644, "chunks": []}})), "lies under /lib/libz.so, which the profile makes a link"),
    ("a directory under a link", mutate(lambda p: p["directories"].append("/lib/libz.so/d")),
     "which the profile makes a link"),
    ("a link under a link", mutate(lambda p: p["links"].update({"/lib/libz.so/l": "x"})),
     "which the profile makes a link"),
    ("a path that is a file and a link", mutate(lambda p: p["links"].update({"/lib/libz.so.1": "x"})),
     "listed twice (as a link and as a file)"),
    ("a path that is a directory and a file", mutate(lambda p: p["directories"].append("/lib/libz.so.1")),
     "listed twice (as a directory and as a file)"),
    ("the ld.so.cache path taken by a file", mutate(lambda p: p["files"].update({"/etc/ld.so.cache": {
        "size": 0, "mode": 0o644, "chunks": []}})), "listed twice (as a file and as the ld.so.cache)"),
    ("the ld.so.cache under a link", mutate(lambda p: p["links"].update({"/etc": "/tmp"})),
     "lies under /etc, which the profile makes a link"),
]


@pytest.mark.parametrize(("name", "make", "expected"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_profile_is_one_line_and_exit_status_2(name, make, expected, tmp_path, monkeypatch, capsys):
    """Through the CLI's own entry (main), in this process: the subprocess rows below show the same for
    the inputs where the process itself matters."""
    for key, value in environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    models = repository(tmp_path)
    path = make(tmp_path)
    assert main(["check", str(models), "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("customops: "), err
    assert expected in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / "cache" / "profiles").exists() or not list((tmp_path / "cache" / "profiles").iterdir())
    nothing_outside(tmp_path)


IN_A_PROCESS = ["a FIFO", "/dev/zero", "a huge sparse file", "nested thousands deep", "not UTF-8",
                "a zlib bomb in a chunk", "an ld.so.cache zlib bomb over 64 MiB", "a lone surrogate in a path"]


@pytest.mark.parametrize("name", IN_A_PROCESS)
def test_a_malformed_profile_ends_the_real_process_promptly(name, tmp_path):
    _, make, expected = next(m for m in MALFORMED if m[0] == name)
    result = customops(["check", str(repository(tmp_path)), "--profile", str(make(tmp_path))], tmp_path)
    one_line_exit_2(result)
    assert expected in result.stderr


def test_the_valid_profile_of_the_table_is_accepted(tmp_path):
    skeleton = materialize(profile.read(str(write_profile(tmp_path / "p.json", valid()))), tmp_path / "c")
    assert skeleton is not None
    assert (Path(skeleton) / "lib" / "libz.so.1").read_bytes()[:4] == b"\x7fELF"
    assert (Path(skeleton) / "lib" / "libz.so.1").stat().st_size == 64
    assert (Path(skeleton) / "opt" / "tritonserver" / "TRITON_VERSION").read_bytes() == b"2.50\n"
    assert os.readlink(Path(skeleton) / "lib" / "libz.so") == "libz.so.1"


def test_every_container_fact_is_in_the_profile_schema():
    known = {*profile_schema.VERSION_FACTS, *profile_schema.LIST_FACTS, "source"}
    assert known == set(ContainerFacts().record())  # the facts as a profile writes them: known_from is "source"


def test_a_created_profile_reads_back(fixture_profile, tmp_path):
    path = write_profile(tmp_path / "p.json", fixture_profile)
    container = read_profile(str(path), tmp_path / "cache")
    assert container.target is not None and container.facts.known_from is FactsFrom.PROFILE
