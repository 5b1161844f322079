"""Attacks through paths: every container path resolves inside the container (chroot semantics, mounts
included), and every file is read only if it is a regular file, without blocking and within a bound.

Each test builds one hostile repository or container root, runs the real code, and asserts the attack
failed: the verdict is the one the container would give, no host file outside the root and the mounts is
read, and the run ends promptly with the documented status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from attack_tools import TIMEOUT, customops
from elf_tools import gcc_shared

from customops import chroot
from customops.linker.target import target_for_root

ROOT = Path(__file__).resolve().parent.parent
ORT_OP = "int RegisterCustomOps(void *options, const void *api) { return 0; }\n"






def onnx_model(repository: Path, name: str, op_library: str) -> Path:
    (repository / name / "1").mkdir(parents=True, exist_ok=True)
    (repository / name / "config.pbtxt").write_text(
        f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "{op_library}" }}\n')
    return repository


def codes(result: subprocess.CompletedProcess) -> list[str]:
    return sorted(f["code"] for f in json.loads(result.stdout)["findings"])


def check_json(repository: Path, root: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return customops(["check", str(repository), "--container-root", str(root), "--format", "json", "--mount",
                      f"{repository}:/models", *extra], tmp_path)


# -- resolution inside the container -----------------------------------------------------------------


def test_dot_dot_in_an_op_library_path_stops_at_the_container_root(container, tmp_path):
    host_library = gcc_shared(tmp_path / "host" / "libhost_op.so", ORT_OP)  # exists here, not in the container
    escape = "/models/" + "../" * 12 + str(host_library).lstrip("/")
    result = check_json(onnx_model(tmp_path / "models", "m", escape), container, tmp_path)
    assert "CO301" in codes(result), result.stdout  # "does not exist in the container", not "loads"


def test_absolute_symlink_in_a_mounted_repository_resolves_inside_the_container(container, tmp_path):
    host_library = gcc_shared(tmp_path / "host" / "libhost_op.so", ORT_OP)
    repository = onnx_model(tmp_path / "models", "m", "/models/m/ops/libop.so")
    (repository / "m" / "ops").mkdir()
    (repository / "m" / "ops" / "libop.so").symlink_to(host_library)  # absolute: the container's /tmp/...
    result = check_json(repository, container, tmp_path)
    assert "CO301" in codes(result), result.stdout


def test_absolute_symlink_to_a_library_inside_the_container_is_followed_there(container, tmp_path):
    """The counterpart: the same kind of link, to a path the container has, loads."""
    inside = gcc_shared(container / "opt" / "ops" / "libop.so", ORT_OP)
    repository = onnx_model(tmp_path / "models", "m", "/models/m/ops/libop.so")
    (repository / "m" / "ops").mkdir()
    (repository / "m" / "ops" / "libop.so").symlink_to("/" + str(inside.relative_to(container)))
    result = check_json(repository, container, tmp_path)
    assert result.returncode == 0 and codes(result) == [], result.stdout


def test_runpath_origin_dot_dot_from_a_mounted_repository_stays_in_the_container(container, tmp_path):
    outside = gcc_shared(tmp_path / "outside" / "libdep.so", "int dep(void) { return 1; }\n")
    repository = onnx_model(tmp_path / "models", "m", "/models/m/ops/libop.so")
    gcc_shared(repository / "m" / "ops" / "libop.so", ORT_OP + "int dep(void); int use(void) { return dep(); }\n",
               f"-L{outside.parent}", "-ldep", "-Wl,--enable-new-dtags",
               "-Wl,-rpath,$ORIGIN/" + "../" * 10 + str(outside.parent).lstrip("/"))
    result = check_json(repository, container, tmp_path)
    assert "CO302" in codes(result), result.stdout  # libdep.so is not found in the container


def test_ld_so_cache_symlink_to_the_host_cache_is_resolved_in_the_root(container):
    (container / "etc").mkdir()
    (container / "etc" / "ld.so.cache").symlink_to("/etc/ld.so.cache")  # inside the root: itself, a loop
    assert target_for_root(str(container)).cache is None


def test_ld_so_conf_include_with_dot_dot_stays_in_the_root(container, tmp_path):
    host_conf = tmp_path / "hostconf"
    host_conf.mkdir()
    (host_conf / "evil.conf").write_text("/host-only-dir\n")
    (container / "etc").mkdir()
    (container / "etc" / "ld.so.conf").write_text(f"include /../../../../../..{host_conf}/*.conf\n/usr/local/lib\n")
    assert target_for_root(str(container)).conf_dirs == ("/usr/local/lib",)


def test_ld_so_conf_include_inside_the_root_is_read(container):
    (container / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (container / "etc" / "ld.so.conf.d" / "a.conf").write_text("/opt/a\n")
    (container / "etc" / "ld.so.conf").write_text("include ld.so.conf.d/*.conf\n")
    assert target_for_root(str(container)).conf_dirs == ("/opt/a",)


def test_chroot_resolution_follows_the_kernel_rules(tmp_path):
    root = tmp_path / "r"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (root / "abs").symlink_to("/a/b")  # absolute: from the root's /
    (root / "up").symlink_to("../../../../a")  # `..` stops at the root
    (root / "loop").symlink_to("loop")
    mounted = tmp_path / "m"
    mounted.mkdir()
    (mounted / "back").symlink_to("/a/b/f")
    mounts = (("/models", str(mounted)),)
    assert chroot.resolve(str(root), mounts, "/abs/f") == ("/a/b/f", f"{root}/a/b/f")
    assert chroot.resolve(str(root), mounts, "/up/b/../b/f") == ("/a/b/f", f"{root}/a/b/f")
    assert chroot.resolve(str(root), mounts, "/models/../../../a/b/f") == ("/a/b/f", f"{root}/a/b/f")
    assert chroot.resolve(str(root), mounts, "/models/back") == ("/a/b/f", f"{root}/a/b/f")
    assert chroot.resolve(str(root), mounts, "/loop") is None
    assert chroot.resolve(str(root), mounts, "/a/b/f/..") is None  # ENOTDIR, as the kernel says
    assert chroot.resolve(None, mounts, "/a/b/f") is None  # outside every mount, no root


def test_config_symlink_out_of_the_repository_is_not_read(container, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-VALUE\n")
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").symlink_to(secret)
    result = check_json(repository, container, tmp_path)
    assert "TOPSECRET" not in result.stdout + result.stderr
    assert "CO101" in codes(result) and "out of the model repository" in result.stdout


# -- files that are not regular, or too large ---------------------------------------------------------


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_fifo_as_config_is_reported_not_waited_on(container, tmp_path):
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    fifo(repository / "m" / "config.pbtxt")
    result = check_json(repository, container, tmp_path)
    assert "CO101" in codes(result) and "a FIFO" in result.stdout


def test_fifo_as_op_library_is_reported_not_waited_on(container, tmp_path):
    repository = onnx_model(tmp_path / "models", "m", "/models/m/libop.so")
    fifo(repository / "m" / "libop.so")
    result = check_json(repository, container, tmp_path)
    assert result.returncode == 1 and codes(result), result.stdout


@pytest.mark.parametrize("where", ["etc/ld.so.cache", "opt/tritonserver/TRITON_VERSION"])
def test_fifo_in_the_container_root_is_bad_input(container, tmp_path, where):
    fifo(container / where)
    result = check_json(onnx_model(tmp_path / "models", "m", "/x.so"), container, tmp_path)
    assert result.returncode == 2 and "a FIFO" in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_fifo_in_ld_so_conf_is_bad_input(container, tmp_path):
    fifo(container / "etc" / "ld.so.conf")
    result = check_json(onnx_model(tmp_path / "models", "m", "/x.so"), container, tmp_path)
    assert result.returncode == 2 and "ld.so.conf: not a regular file (a FIFO)" in result.stderr


def test_fifo_as_manifest_is_bad_input(container, tmp_path):
    repository = onnx_model(tmp_path / "models", "m", "/x.so")
    fifo(repository / "customops.toml")
    result = check_json(repository, container, tmp_path)
    assert result.returncode == 2 and "customops.toml: not a regular file (a FIFO)" in result.stderr


def test_fifo_given_to_scan_is_bad_input(tmp_path):
    result = customops(["scan", str(fifo(tmp_path / "lib.so"))], tmp_path)
    assert result.returncode == 2 and "a FIFO" in result.stderr


def test_dev_zero_as_config_is_not_read_whole(container, tmp_path):
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").symlink_to("/dev/zero")
    result = check_json(repository, container, tmp_path)
    assert "CO101" in codes(result)


def test_huge_sparse_config_is_refused_by_size(container, tmp_path):
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    with open(repository / "m" / "config.pbtxt", "wb") as f:
        f.truncate(10 << 30)
    result = check_json(repository, container, tmp_path)
    assert "CO101" in codes(result) and "over the limit" in result.stdout


def test_zip_bomb_in_a_torchscript_archive_is_read_bounded(tmp_path):
    from customops import safeio
    from customops.inspect.files import torchscript_ops

    archive = tmp_path / "model.pt"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m/code/__torch__.py", b"ops.ns.op(" + b" " * (safeio.ARCHIVE_MEMBER_LIMIT + 10))
        z.writestr("m/code/small.py", b"x = ops.good.op(1)\n")
    assert torchscript_ops(str(archive)) == {("good", "op")}


def _read_past_truncation(path: Path, handler: str, mapping: str) -> subprocess.CompletedProcess:
    """A fresh interpreter runs `handler` (sigbus.install() or .arm()), maps a 64 KiB file at `path` with
    `mapping` (an expression of `p`), truncates it and reads a page that is gone."""
    script = (
        "import mmap, os, sys\n"
        "from customops import safeio, sigbus\n"
        f"{handler}\n"
        "p = sys.argv[1]\n"
        "open(p, 'wb').write(b'x' * 65536)\n"
        f"m = {mapping}\n"
        "os.truncate(p, 0)\n"
        "print(m[40000])\n")
    return subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT)


def test_library_truncated_while_mapped_ends_with_one_line_and_status_2(tmp_path):
    result = _read_past_truncation(tmp_path / "lib.so", "sigbus.install()",
                                   "mmap.mmap(os.open(p, os.O_RDONLY), 0, access=mmap.ACCESS_READ)")
    assert result.returncode == 2 and result.stderr.startswith("customops: a file changed while it was being read")
    assert result.stderr.count("\n") == 1


def test_the_cli_installs_the_sigbus_handler_before_it_maps_a_file(tmp_path):
    """The CLI only arms the handler at start (a cached launch maps nothing); mapping a file installs it."""
    result = _read_past_truncation(tmp_path / "model.pt", "sigbus.arm()", "safeio.map_regular(p, 1 << 20)")
    assert result.returncode == 2 and result.stderr.startswith("customops: a file changed while it was being read")


def test_the_file_read_for_a_step_is_the_one_inside_the_container(container, tmp_path):
    """What rules hash and probes load (LoadStep.host_path) is resolved in the container too."""
    from customops.triton.container import from_root
    from customops.triton.manifest import Manifest
    from customops.triton.plan import Context

    host_library = gcc_shared(tmp_path / "host" / "libhost_op.so", ORT_OP)
    checkout = tmp_path / "models"
    (checkout / "m").mkdir(parents=True)
    (checkout / "m" / "libop.so").symlink_to(host_library)
    ctx = Context(from_root(str(container)), Manifest(None), (("/models", str(checkout)),))
    assert ctx.source("/models/m/libop.so") == f"{container}/models/m/libop.so"  # missing there: not the host's
    assert ctx.source("/models/" + "../" * 8 + str(host_library).lstrip("/")) == f"{container}{host_library}"
    assert not os.path.exists(ctx.source("/models/m/libop.so"))
