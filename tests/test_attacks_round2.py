"""Hostile input, second round: each attack of issue #37 as it was reported, and the variation a careful
attacker would try next. Every test runs the real CLI (python -m customops) with HOME, TMPDIR and the cache
inside tmp_path, and asserts the attack failed: the verdict is the one the current inputs give, nothing is
written where it should not be, and bad input is one line naming the file, exit 2."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from elf_tools import gcc_shared

from customops.linker.target import target_for_root

TIMEOUT = 120
IS_ROOT = os.geteuid() == 0


def customops(args: list[str], tmp_path: Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """The CLI with a private HOME, TMPDIR and cache directory."""
    for name in ("home", "tmp"):
        (tmp_path / name).mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "CUSTOMOPS_CACHE_DIR",
                                                                 "LD_PRELOAD", "LD_LIBRARY_PATH")}
    environ.update({"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
                    "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache"), **env})
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True,
                          cwd=cwd or tmp_path, env=environ, timeout=TIMEOUT)


def codes_of(result: subprocess.CompletedProcess) -> list[str]:
    assert result.stdout.startswith("{"), result.stderr
    return sorted(f["code"] for f in json.loads(result.stdout)["findings"])


def preloading(repository: Path, library: Path) -> Path:
    """One model, and a manifest that preloads `library` (in the repository)."""
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (repository / "customops.toml").write_text(f'[host]\npreload = ["{library.relative_to(repository)}"]\n')
    return repository


# -- 4. the cache's idea of "unchanged" -------------------------------------------------------------------

def rewrite_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Replace bytes of `path` without changing its inode or size, then put its times back, as anyone who can
    write the file can."""
    st = path.stat()
    data = path.read_bytes()
    assert old in data and len(old) == len(new)
    with open(path, "r+b") as f:
        f.write(data.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def test_an_op_library_rewritten_in_place_with_its_mtime_put_back_is_read_again(tree, tmp_path):
    """The library needs libm.so.6 (the container has it: no finding); rewritten to need libq.so.6 (it has not:
    CO302) with the same size, inode and mtime, a warm cache must not keep saying OK: the ctime changed."""
    repository = tmp_path / "models"
    library = gcc_shared(repository / "m" / "libpre.so", "int pre(void) { return 1; }\n", "-Wl,--no-as-needed",
                         "-lm")
    preloading(repository, library)
    check = ["check", str(repository), "--container-root", str(tree / "container"), "--format", "json"]
    assert "CO302" not in codes_of(customops(check, tmp_path))
    rewrite_in_place(library, b"libm.so.6\0", b"libq.so.6\0")
    uncached = customops([*check, "--no-cache"], tmp_path)
    cached = customops(check, tmp_path)
    assert "CO302" in codes_of(uncached)
    assert codes_of(cached) == codes_of(uncached) and cached.returncode == uncached.returncode == 1


# -- 5. log commands in CI logs ---------------------------------------------------------------------------

LOG_COMMANDS = ("##[", "##vso[")  # GitHub's legacy form and Azure's, acted on anywhere in a line


def forging_repository(where: Path) -> Path:
    """Models whose names carry log commands: an annotation, a switch that silences every later one, and
    Azure's variable setter (its case ignored by Azure)."""
    repository = where / "models"
    for name in ("x##[error title=forged]INJECTED", "##[stop-commands]TOKEN", "y##VSO[task.setvariable variable=a]1"):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    return repository


def test_log_commands_in_model_names_never_reach_a_log_line_in_any_format(tree, tmp_path):
    repository = forging_repository(tmp_path)
    for report_format in ("text", "json", "sarif", "junit", "github", "gitlab"):
        result = customops(["check", str(repository), "--container-root", str(tree / "container"), "--format",
                            report_format, "-v"], tmp_path)
        assert result.returncode == 1, (report_format, result.stderr)
        for line in (result.stdout + result.stderr).splitlines():
            assert not any(c in line.lower() for c in LOG_COMMANDS), (report_format, line)
        if report_format in ("json", "sarif", "gitlab"):  # the same names, once parsed
            assert "x##[error title=forged]INJECTED" in json.loads(result.stdout).__repr__()


def test_log_commands_in_an_error_line_are_broken_up(tmp_path):
    result = customops(["check", str(tmp_path / "##[error]missing")], tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "##[" not in line and "#\\#[error]missing" in line, line


# -- 2, 3, 10. report files: devices, parent links, atomic replacement -----------------------------------

def example_check(example: tuple[Path, Path], *extra: str) -> list[str]:
    repo, container = example
    return ["check", str(repo), "--container-root", str(container), *extra]


@pytest.mark.skipif(not IS_ROOT, reason="making a block device node needs root")
@pytest.mark.parametrize("how", ["a committed symlink to it", "named directly"])
def test_a_report_is_never_written_onto_a_block_device(example, tmp_path, how):
    """`customops.sarif -> /dev/sda` committed by a pull request: the documented step must not write there. A
    device node of its own stands in (loop device 7,200), so nothing real is at risk."""
    device = tmp_path / "blockdev"
    os.mknod(device, 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    target = device
    if how == "a committed symlink to it":
        target = tmp_path / "customops.sarif"
        target.symlink_to(device)
    result = customops(example_check(example, "--sarif", str(target)), tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    [line] = result.stderr.splitlines()[-1:]
    assert str(target) in line and ("block device" in line or "symbolic link" in line), line
    assert stat.S_ISBLK(device.lstat().st_mode)


@pytest.mark.parametrize("stream", ["-", "/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"])
def test_the_process_own_standard_output_is_written_as_a_stream(example, tmp_path, stream):
    result = customops(example_check(example, "--format", "json", "--output", stream), tmp_path)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["summary"]


def test_a_committed_symlink_to_a_fifo_is_refused_not_waited_on(example, tmp_path):
    """Through a link a FIFO outside the checkout would hang the run (no reader) or, swapped for a file between
    a check and the open, receive the report: only a FIFO named directly is a stream."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "report.json").symlink_to(fifo)
    result = customops(example_check(example, "--format", "json", "--output", "report.json"), tmp_path)
    assert result.returncode == 2 and "symbolic link" in result.stderr, result.stderr


@pytest.mark.parametrize("link", ["/proc/self/fd/4", "/dev/fd/0", "/proc/thread-self/fd/5"])
@pytest.mark.parametrize("committed", [True, False])
def test_a_descriptor_path_other_than_standard_output_never_reopens_a_file_customops_reads(example, tmp_path, link,
                                                                                           committed):
    """`r.json -> /proc/self/fd/4` wrote the report over the container's libc, which customops had open for
    reading at that descriptor: only standard output and error are written, through the process's own
    descriptor; any other descriptor path is refused, committed as a link or named directly."""
    repo, shared = example
    container = tmp_path / "root"  # a copy: a regression must not write over the shared fixture's libc
    shutil.copytree(shared, container, symlinks=True, copy_function=shutil.copy)
    libc = next(container.glob("lib*/*/libc.so.6"))
    before = libc.read_bytes()
    target = link
    if committed:
        (tmp_path / "r.json").symlink_to(link)
        target = "r.json"
    result = customops(example_check((repo, container), "--format", "json", "--no-cache", "-o", target), tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert libc.read_bytes() == before


def test_an_absolute_report_path_through_a_linked_working_directory_still_refuses_a_linked_directory(example,
                                                                                                      tmp_path):
    """`cd alias/repo; --sarif $PWD/reports/out.sarif` with alias -> real and a committed reports -> elsewhere:
    the way to the working directory may follow links, the way below it may not."""
    (tmp_path / "real" / "repo").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "real" / "repo" / "reports").symlink_to("../../elsewhere")
    cwd = tmp_path / "alias" / "repo"
    result = customops(example_check(example, "--sarif", f"{cwd}/reports/out.sarif"), tmp_path, cwd=cwd,
                       PWD=str(cwd))
    assert result.returncode == 2 and "symbolic link" in result.stderr, result.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_run_that_cannot_check_never_removes_a_file_named_like_standard_output(tmp_path):
    (tmp_path / "-").write_text("keep\n")
    result = customops(["check", str(tmp_path / "missing"), "--triton-release", "25.03", "-o", "-"], tmp_path)
    assert result.returncode == 2 and (tmp_path / "-").read_text() == "keep\n"


@pytest.mark.parametrize("command", ["check --sarif", "check --output", "profile create -o"])
def test_a_report_is_never_written_through_a_linked_parent_directory(example, tmp_path, command):
    """`--sarif reports/customops.sarif` with a committed `reports -> ../elsewhere`: O_NOFOLLOW alone covers the
    last component only; the directories on the way are walked without following links too."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "reports").symlink_to("../elsewhere")
    if command == "profile create -o":
        args = ["profile", "create", "--container-root", str(example[1]), "-o", "reports/x.json"]
    else:
        args = example_check(example, *command.split()[1:], "reports/x.json")
    result = customops(args, tmp_path, cwd=checkout)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "symbolic link" in result.stderr.splitlines()[-1], result.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_report_cut_short_by_a_file_size_limit_leaves_neither_half_a_report_nor_the_previous_one(example, tmp_path):
    """A full disk or a size limit while writing: one line, exit 2, never a truncated report (there were 8,192
    bytes of JSON) nor the previous run's verdict under this run's name, and no temporary file left."""
    previous = '{"ok": true}\n'
    (tmp_path / "report.json").write_text(previous)
    shutil.rmtree(example[0] / "preprocess_py")  # its environment unpacks into files beyond the limit (exit 2 too)

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    environ = {**os.environ, "HOME": str(tmp_path), "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "customops", *example_check(example, "--format", "json", "-o",
                                                                                  "report.json", "--no-cache")],
                            capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=TIMEOUT,
                            preexec_fn=limited)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "report.json" in result.stderr.splitlines()[-1]
    assert [p.name for p in tmp_path.iterdir() if "report" in p.name] == []


@pytest.mark.parametrize("report_format", ["json", "text"])
def test_a_run_that_cannot_check_leaves_no_earlier_verdict_under_its_name(tmp_path, report_format):
    (tmp_path / "report").write_text('{"ok": true}\n')
    result = customops(["check", str(tmp_path / "missing"), "--triton-release", "25.03", "--format", report_format,
                        "-o", "report"], tmp_path)
    assert result.returncode == 2
    assert not (tmp_path / "report").exists()


# -- 1. someone else's manifest ---------------------------------------------------------------------------

STRANGER = 12345  # a uid no one on this machine has: another user of a shared directory


def shared_directory(tmp_path: Path) -> Path:
    """A world-writable sticky directory, as /tmp or a CI runner's shared workspace is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def planted(shared: Path, tree: Path) -> tuple[Path, Path]:
    """The victim's repository in a directory of their own inside `shared`; above it, planted by another user, a
    `.git/` that makes `shared` the checkout, and a manifest that preloads the stranger's library and relaxes
    the check."""
    repository = shared / "work" / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    library = gcc_shared(shared / "evil" / "libevil.so", "int evil(void) { return 1; }\n")
    (shared / ".git").mkdir()
    (shared / "customops.toml").write_text(f'[host]\npreload = ["{library}"]\n\n[check]\nfail_on = "info"\n'
                                           'ignore = ["CO201"]\n')
    for path in (shared / ".git", shared / "customops.toml", library.parent, library):
        os.chown(path, STRANGER, STRANGER)
    return repository, library


@pytest.mark.skipif(not IS_ROOT, reason="files of another user are made with chown, which needs root")
def test_a_manifest_another_user_planted_above_the_repository_is_ignored(tree, tmp_path):
    repository, library = planted(shared_directory(tmp_path), tree)
    container = str(tree / "container")
    result = customops(["check", str(repository), "--container-root", container, "--format", "json"], tmp_path)
    assert result.returncode == 1 and codes_of(result) == ["CO201"], result.stderr  # the planted ignore is not read
    assert f"uid {STRANGER}" in result.stderr and "ignored the checkout" in result.stderr, result.stderr
    launch = customops(["launch", "--dry-run", "--container-root", container, "--warn-only", "--",
                        "tritonserver", f"--model-repository={repository}"], tmp_path)
    assert str(library) not in launch.stdout, launch.stdout
    assert f"uid {STRANGER}" in launch.stderr


@pytest.mark.skipif(not IS_ROOT, reason="files of another user are made with chown, which needs root")
def test_a_manifest_another_user_owns_in_the_repository_itself_is_ignored_with_its_owner_named(tree, tmp_path):
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    manifest = repository / "customops.toml"
    manifest.write_text('[check]\nignore = ["CO201"]\n')
    os.chown(manifest, STRANGER, STRANGER)
    check = ["check", str(repository), "--container-root", str(tree / "container"), "--format", "json"]
    result = customops(check, tmp_path)
    assert codes_of(result) == ["CO201"]
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert str(manifest) in warning and f"owned by uid {STRANGER}" in warning, warning
    assert codes_of(customops([*check, "--manifest", str(manifest)], tmp_path)) == []  # named: the user's choice


@pytest.mark.skipif(not IS_ROOT, reason="a world-writable sticky directory owned by root, as /tmp is")
def test_the_users_own_manifest_in_a_checkout_under_a_sticky_shared_directory_is_read(tree, tmp_path):
    """The control: a checkout of one's own in /tmp (sticky, others cannot rename it) keeps its manifest."""
    repository = shared_directory(tmp_path) / "work" / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    (repository.parent / ".git").mkdir()
    (repository.parent / "customops.toml").write_text('[check]\nignore = ["CO201"]\n')
    result = customops(["check", str(repository), "--container-root", str(tree / "container"), "--format", "json"],
                       tmp_path)
    assert codes_of(result) == [] and "warning" not in result.stderr, result.stderr


# -- 9. the dry run's command, run by a shell ---------------------------------------------------------------

@pytest.mark.parametrize("program", ["bin=x/tritonserver", "tritonserver", "sp ace/tritonserver", "it's/$(id)`x`",
                                     "if", "-dash/tritonserver"])
@pytest.mark.parametrize("preload", [True, False])
def test_the_dry_run_prints_a_command_a_posix_shell_runs_as_given(tree, tmp_path, program, preload):
    """`env LD_PRELOAD=... bin=x/tritonserver ...` ran nothing (env read the program as an assignment): the
    printed command, given to sh -c, starts that very program with exactly the arguments and environment."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    if preload:
        gcc_shared(repository / "libpre.so", "int pre(void) { return 1; }\n")
        (repository / "customops.toml").write_text('[host]\npreload = ["libpre.so"]\n')
    server = tmp_path / "work" / program
    server.parent.mkdir(parents=True, exist_ok=True)
    server.write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / "fake_tritonserver.py").read_text())
    server.chmod(0o755)
    record = tmp_path / "record.json"
    argv = [f"./{program}" if "/" not in program else program, f"--model-repository={repository}",
            "--log-info=a b'c"]
    dry = customops(["launch", "--dry-run", "--warn-only", "--container-root", str(tree / "container"), "--", *argv],
                    tmp_path, cwd=server.parent.parent if "/" in program else server.parent)
    assert dry.returncode == 0, dry.stderr
    [line] = dry.stdout.splitlines()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)} | {"FAKE_SERVER_RECORD": str(record)}
    where = server.parent.parent if "/" in program else server.parent
    ran = subprocess.run(["sh", "-c", "--", line], cwd=where, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert ran.returncode == 0, (line, ran.stderr)
    got = json.loads(record.read_text())
    assert got["argv"] == argv[1:], line
    # the container's path: the repository is mounted at /models there
    assert got["env"]["LD_PRELOAD"] == ("/models/libpre.so" if preload else None)


# -- 7. a NUL byte in a config's strings --------------------------------------------------------------------

NUL_CONFIGS = {
    "op_library_filename": 'backend: "tensorflow"\nplatform: "tensorflow_savedmodel"\n'
                           'model_operations { op_library_filename: "ops/lib\\000evil.so" }\n',
    "default_model_filename": 'backend: "onnxruntime"\ndefault_model_filename: "m\\x00.onnx"\n',
    "backend": 'backend: "onnx\\0runtime"\n',
    "parameters": 'backend: "onnxruntime"\nparameters { key: "a\\u0000b" value { string_value: "x" } }\n',
}


@pytest.mark.parametrize("field", list(NUL_CONFIGS))
@pytest.mark.parametrize("command", ["check", "check --format sarif", "launch"])
def test_a_nul_byte_in_a_config_string_is_bad_input_naming_the_file_and_line(tree, tmp_path, field, command):
    """`op_library_filename: "ops/lib\\000evil.so"` was an internal error (embedded null byte): the server's C
    calls would see the string cut at the NUL, so the config is refused, one line, exit 2, never a traceback."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    config = repository / "m" / "config.pbtxt"
    config.write_text(NUL_CONFIGS[field])
    container = str(tree / "container")
    args = (["launch", "--dry-run", "--container-root", container, "--", "tritonserver",
             f"--model-repository={repository}"] if command == "launch"
            else [*command.split(), str(repository), "--container-root", container])
    result = customops(args, tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    [line] = result.stderr.splitlines()
    expected_line = NUL_CONFIGS[field].split("\n").index(next(t for t in NUL_CONFIGS[field].split("\n") if "\\" in t))
    assert line.startswith(f"customops: {config}: line {expected_line + 1}: {field} holds a NUL byte"), line


# -- 6. ld.so.conf that explodes ----------------------------------------------------------------------------

def conf_root(container: Path, conf: str) -> Path:
    """The container without an ld.so.cache (so its ld.so.conf is read) and with `conf` as its ld.so.conf."""
    (container / "etc").mkdir(exist_ok=True)
    (container / "etc" / "ld.so.cache").unlink(missing_ok=True)
    (container / "etc" / "ld.so.conf").write_text(conf)
    return container


def check_root(root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True, exist_ok=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    return customops(["check", str(repository), "--container-root", str(root), "--format", "json"], tmp_path)


def test_an_include_glob_through_directory_symlinks_expands_each_directory_once(container, tmp_path):
    """A 30-byte include through 8 symlinks back to their own directory, 7 levels deep, ran for over 100 s with
    memory growing (8^7 names for one directory): each directory a wildcard reaches is expanded once."""
    loops = container / "etc" / "loops"
    loops.mkdir(parents=True)
    for i in range(8):
        (loops / f"l{i}").symlink_to(".")
    (loops / "x.conf").write_text("/opt/found\n")
    root = conf_root(container, "include /etc/loops/*/*/*/*/*/*/*/x.conf\n")
    started = time.monotonic()
    assert target_for_root(str(root)).conf_dirs == ("/opt/found",)
    assert time.monotonic() - started < 10
    result = check_root(root, tmp_path)
    assert result.returncode in (0, 1), result.stderr


def test_a_chain_of_3000_include_files_is_bad_input_not_a_recursion_error(container, tmp_path):
    conf_d = container / "etc" / "chain"
    conf_d.mkdir(parents=True)
    for i in range(3000):
        (conf_d / f"{i}.conf").write_text(f"include /etc/chain/{i + 1}.conf\n/opt/d{i}\n")
    root = conf_root(container, "include /etc/chain/0.conf\n")
    result = check_root(root, tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    [line] = result.stderr.splitlines()
    assert line.startswith(f"customops: {root}/etc/ld.so.conf: its includes nest more than"), line


def test_includes_that_name_too_many_files_are_bad_input(container, tmp_path):
    wide = container / "etc" / "wide"
    wide.mkdir(parents=True)
    for i in range(1200):
        (wide / f"{i:04}.conf").write_text(f"/opt/w{i}\n")
    result = check_root(conf_root(container, "include /etc/wide/*.conf\n"), tmp_path)
    assert result.returncode == 2 and "more than 1000 files" in result.stderr, result.stderr[-500:]


def test_nested_includes_keep_ldconfigs_order(container):
    """Depth first, in the order written: the explicit stack reads as the recursion did."""
    (container / "etc" / "d").mkdir(parents=True)
    (container / "etc" / "d" / "a.conf").write_text("/opt/a1\ninclude /etc/d/inner.conf\n/opt/a2\n")
    (container / "etc" / "d" / "b.conf").write_text("/opt/b\n")
    (container / "etc" / "d" / "inner.conf").write_text("/opt/inner\n")
    root = conf_root(container, "/opt/first\ninclude /etc/d/[ab].conf\n/opt/last\n")
    assert target_for_root(str(root)).conf_dirs == ("/opt/first", "/opt/a1", "/opt/inner", "/opt/a2", "/opt/b",
                                                    "/opt/last")


@pytest.mark.skipif(not IS_ROOT, reason="files of another user are made with chown, which needs root")
def test_a_symbolic_link_another_user_planted_is_judged_as_itself_not_only_as_its_target(tree, tmp_path):
    """`.git -> /usr` and `customops.toml -> a manifest of the victim's own`, both links owned by a stranger in a
    shared directory: the links are the stranger's doing, whatever they lead to."""
    shared = shared_directory(tmp_path)
    repository = shared / "work" / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "nosuchbackend"\n')
    own = shared / "mine" / "customops.toml"
    own.parent.mkdir()
    own.write_text('[check]\nignore = ["CO201"]\n')
    (shared / ".git").symlink_to("/usr")
    (shared / "customops.toml").symlink_to(own)
    for link in (shared / ".git", shared / "customops.toml"):
        os.chown(link, STRANGER, STRANGER, follow_symlinks=False)
    result = customops(["check", str(repository), "--container-root", str(tree / "container"), "--format", "json"],
                       tmp_path)
    assert codes_of(result) == ["CO201"] and f"uid {STRANGER}" in result.stderr, result.stderr


def test_env_and_the_dry_run_print_no_log_command(tree, tmp_path):
    repository = tmp_path / "models"
    library = gcc_shared(repository / "x##[group]y" / "libpre.so", "int pre(void) { return 1; }\n")
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (repository / "customops.toml").write_text(f'[host]\npreload = ["{library.relative_to(repository)}"]\n')
    server = ["--", "tritonserver", f"--model-repository={repository}", "--backend-config=python,x=##VSO[task.y]"]
    for command in (["env"], ["launch", "--dry-run", "--warn-only"]):
        result = customops([*command, "--container-root", str(tree / "container"), *server], tmp_path)
        assert result.returncode == 0, result.stderr
        for line in (result.stdout + result.stderr).splitlines():
            assert not any(c in line.lower() for c in LOG_COMMANDS), line
    [line] = result.stdout.splitlines()  # the same word for the shell: `'...#''#[group]...'`
    assert "#''#[group]" in line, line


@pytest.mark.parametrize("program", ["eval", "exec", ".", "set", "trap"])
def test_a_program_named_like_a_shell_builtin_is_looked_up_in_path_as_launch_does(tree, tmp_path, program):
    """`launch -- eval ... '--foo=;touch X'`: the printed line ran the shell's own eval (a command injection);
    env runs what PATH holds under that name, as launch would exec it."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    touched = tmp_path / "pwned"
    dry = customops(["launch", "--dry-run", "--warn-only", "--container-root", str(tree / "container"), "--", program,
                     f"--model-repository={repository}", f"--foo=;touch {touched}"], tmp_path)
    assert dry.returncode == 0, dry.stderr
    [line] = dry.stdout.splitlines()
    subprocess.run(["/bin/sh", "-c", "--", line], cwd=tmp_path, capture_output=True, timeout=TIMEOUT,
                   env={**os.environ, "PATH": "/usr/bin:/bin"})  # env and touch, and no program of that name
    assert not touched.exists(), line


def test_a_program_named_minus_is_a_missing_program(tree, tmp_path):
    result = customops(["launch", "--dry-run", "--container-root", str(tree / "container"), "--", "-",
                        "--model-repository=models"], tmp_path)
    assert result.returncode == 2 and "give the program first" in result.stderr, result.stderr


def test_an_ld_so_conf_listing_too_many_directories_is_bad_input_not_a_hang(container, tmp_path):
    """1.7 million directories, each searched for every library, ran for minutes: capped at 10,000."""
    (container / "etc").mkdir(exist_ok=True)
    (container / "etc" / "big.conf").write_text("".join(f"/d{i}\n" for i in range(20_000)))
    root = conf_root(container, "include /etc/big.conf\n")
    result = check_root(root, tmp_path)
    assert result.returncode == 2 and "more than 10000 directories" in result.stderr, result.stderr[-400:]
