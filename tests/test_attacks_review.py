"""Attacks found in a security review after the hardening of #15, one test per attack, named after it.

Each runs the real CLI against a hostile repository, container root or checkout and asserts the attack
fails: no host file outside the container root and the mounts is read (canary contents never reach the
output), nothing is written through a link, the verdict is the container's, and the exit status is the
documented one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from attack_tools import customops
from elf_tools import gcc_shared

ORT_OP = "int RegisterCustomOps(void *o, const void *a) { return 0; }\nint dep(void); int use(void) { return dep(); }\n"






def nest(directory: Path, depth: int) -> None:
    """`depth` directories d/d/d/... under `directory`, made through descriptors (paths would be too long)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def unnest(directory: Path) -> None:
    """Remove what nest made without recursing (pytest's own clean-up of old temporary directories would
    hit the RecursionError this file is about)."""
    while (directory / "d").exists():
        if (directory / "d" / "d").exists():
            os.rename(directory / "d" / "d", directory / "x")
            os.rmdir(directory / "d")
            os.rename(directory / "x", directory / "d")
        else:
            os.rmdir(directory / "d")


def test_model_repository_symlinked_out_of_the_container_root_is_not_read_by_launch_or_env(container, tmp_path):
    """`/models -> /home/me/models` in the root: inside the container the link resolves in the container,
    so launch must not read this machine's directory (its manifest and configs reached the report)."""
    host = tmp_path / "host" / "models"
    (host / "m" / "1").mkdir(parents=True)
    (host / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n'
                                             'model_operations { op_library_filename: "/CANARY_CONFIG.so" }\n')
    (host / "customops.toml").write_text('[host]\npreload = ["/CANARY_MANIFEST.so"]\n')
    (container / "models").symlink_to(host)
    server = ["--", "tritonserver", "--model-repository=/models"]
    launched = customops(["launch", "--dry-run", "--container-root", str(container), *server], tmp_path)
    assert launched.returncode == 2, launched.stderr
    assert "does not exist in the container" in launched.stderr
    assert "CANARY" not in launched.stdout + launched.stderr
    exported = customops(["env", "--container-root", str(container), *server], tmp_path)
    assert exported.returncode == 0 and "CANARY" not in exported.stdout + exported.stderr, exported


def test_model_repository_symlinked_inside_the_container_root_is_followed_there(container, tmp_path):
    """The counterpart: `/models -> /data/models`, inside the root, is the container's repository."""
    inside = container / "data" / "models"
    (inside / "m" / "1").mkdir(parents=True)
    (inside / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n'
                                               'model_operations { op_library_filename: "/missing.so" }\n')
    (container / "models").symlink_to("/data/models")
    result = customops(["launch", "--dry-run", "--container-root", str(container), "--", "tritonserver",
                        "--model-repository=/models"], tmp_path)
    assert result.returncode == 1 and "CO301" in result.stderr, result


def test_manifest_symlinked_out_of_the_repository_is_not_read(container, tmp_path):
    """`customops.toml -> ~/.config/secret.toml`: its values would be printed in the (public) report."""
    secret = tmp_path / "secret.toml"
    secret.write_text('[host]\npreload = ["/SECRET_CANARY_TOKEN"]\n')
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (repository / "customops.toml").symlink_to(secret)
    result = customops(["check", str(repository), "--container-root", str(container), "--format", "json"], tmp_path)
    assert result.returncode == 2, result
    assert "symbolic link out of the model repository" in result.stderr and result.stderr.count("\n") == 1
    assert "SECRET_CANARY" not in result.stdout + result.stderr


def test_output_symlink_committed_in_the_checkout_is_not_written_through(container, tmp_path):
    """`report.json -> ~/.bashrc` committed by a pull request: --output report.json must not clobber it (nor
    create the target of a dangling link); `/dev/stdout`, a link to a stream, still works."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    victim = tmp_path / "bashrc"
    victim.write_text("ORIGINAL\n")
    (tmp_path / "report.json").symlink_to(victim)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "created-by-customops")
    base = ["check", str(repository), "--container-root", str(container), "--format", "json", "--output"]
    for name in ("report.json", "dangling.json"):
        result = customops([*base, name], tmp_path)
        assert result.returncode == 2 and "a symbolic link, not written through" in result.stderr, result
    assert victim.read_text() == "ORIGINAL\n" and not (tmp_path / "created-by-customops").exists()
    streamed = customops([*base, "/dev/stdout"], tmp_path)
    assert streamed.returncode in (0, 1) and json.loads(streamed.stdout)["schema"] == "customops.check/1", streamed
    plain = customops([*base, "plain.json"], tmp_path)
    assert plain.returncode in (0, 1) and json.loads((tmp_path / "plain.json").read_text())["ok"] in (True, False)


def test_poisoned_skeleton_in_a_cache_directory_inside_the_repository_does_not_change_the_verdict(container,
                                                                                                  tmp_path):
    """CUSTOMOPS_CACHE_DIR inside the checkout: what a pull request commits there is checked out as the CI
    user's own, 0644/0755, so the ownership test trusts it. A skeleton under a trusted profile's key (the key
    is the profile's content hash) that adds the missing dependency turned CO302 into OK."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    dep = gcc_shared(tmp_path / "build" / "libdep2.so", "int dep(void) { return 1; }\n", "-Wl,-soname,libdep2.so")
    gcc_shared(repository / "m" / "ops" / "libop.so", ORT_OP, str(dep))
    (repository / "m" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmodel_operations { op_library_filename: "/models/m/ops/libop.so" }\n')
    profile = tmp_path / "trusted-profile.json"
    assert customops(["profile", "create", "--container-root", str(container), "-o", str(profile)],
                     tmp_path).returncode == 0
    check = ["check", str(repository), "--profile", str(profile), "--mount", f"{repository}:/models",
             "--format", "json"]
    honest = customops([*check, "--cache-dir", str(tmp_path / "honest")], tmp_path)
    assert [f["code"] for f in json.loads(honest.stdout)["findings"]] == ["CO302"], honest.stdout
    (key,) = os.listdir(tmp_path / "honest" / "profiles")
    (tmp_path / ".git").mkdir()  # the checkout holding the repository; its .cache is beside the models (a hidden
    cached = tmp_path / ".cache"  # directory inside the repository would be a model to Triton)
    poisoned = cached / "profiles" / key
    shutil.copytree(tmp_path / "honest" / "profiles" / key, poisoned, symlinks=True)
    shutil.copy(dep, poisoned / "lib" / "x86_64-linux-gnu" / "libdep2.so")
    for path in (cached, cached / "profiles", poisoned):
        path.chmod(0o755)  # as git checks directories out
    for cache in (["--cache-dir", str(cached)], []):
        result = customops([*check, *cache], tmp_path, CUSTOMOPS_CACHE_DIR=str(cached))
        report = json.loads(result.stdout)
        assert result.returncode == 1 and [f["code"] for f in report["findings"]] == ["CO302"], result.stdout
        assert any("inside a model repository or its checkout: not used" in n for n in report["notes"])


def test_repository_nested_deeper_than_python_recurses_is_not_an_internal_error(container, tmp_path, request):
    """os.walk recurses in Python 3.11: the report cache key (check --format json) and launch's verdict key
    walked a repository nested 1,500 deep into a RecursionError, exit 3."""
    repository = tmp_path / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    nest(repository / "m" / "1", 1500)
    request.addfinalizer(lambda: unnest(repository / "m" / "1"))
    checked = customops(["check", str(repository), "--container-root", str(container), "--format", "json"], tmp_path)
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked.stderr
    launched = customops(["launch", "--dry-run", "--container-root", str(container), "--mount",
                          f"{repository}:/models", "--", "tritonserver", "--model-repository=/models"], tmp_path)
    assert launched.returncode == 0 and "internal error" not in launched.stderr, launched.stderr


def test_profile_create_does_not_copy_host_libraries_through_a_symlinked_search_directory(container, tmp_path):
    """A search directory of the root that is a symlink (`usr/lib/x86_64-linux-gnu -> ../../../<host dir>`,
    `..` stopping at the root in the container) or an ld.so.conf line `/../../<host dir>`: profile create
    walked the host directory and stored its libraries' contents in the profile."""
    host = tmp_path / "hostlib"
    host.mkdir()
    shutil.copy(container / "lib" / "x86_64-linux-gnu" / "libm.so.6", host / "libCANARYHOST.so")
    shutil.rmtree(container / "usr" / "lib" / "x86_64-linux-gnu", ignore_errors=True)
    (container / "usr" / "lib").mkdir(parents=True, exist_ok=True)
    (container / "usr" / "lib" / "x86_64-linux-gnu").symlink_to("../" * 12 + str(host).lstrip("/"))
    (container / "etc").mkdir(exist_ok=True)
    (container / "etc" / "ld.so.conf").write_text("/../../../../../.." + str(host) + "\n")
    result = customops(["profile", "create", "--container-root", str(container), "-o", "p.json"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "CANARYHOST" not in (tmp_path / "p.json").read_text()


def test_profile_create_on_a_root_nested_deeper_than_python_recurses(container, tmp_path, request):
    (container / "opt" / "tritonserver" / "deep").mkdir()
    nest(container / "opt" / "tritonserver" / "deep", 1500)
    request.addfinalizer(lambda: unnest(container / "opt" / "tritonserver" / "deep"))
    result = customops(["profile", "create", "--container-root", str(container), "-o", "p.json"], tmp_path)
    assert result.returncode in (0, 2) and "internal error" not in result.stderr, result.stderr


def test_profile_output_symlink_is_not_written_through(container, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "p.json").symlink_to(victim)
    result = customops(["profile", "create", "--container-root", str(container), "-o", "p.json"], tmp_path)
    assert result.returncode == 2 and "a symbolic link" in result.stderr and victim.read_text() == "keep\n"


def test_junit_continuation_lines_cannot_start_a_workflow_command():
    """A runtime message quoting a hostile DT_NEEDED (`x\n::error::...`) spans lines in JUnit's text."""
    from customops.report.junit import _lines

    assert not any(line.startswith("::") for line in _lines("libx.so\n::error::forged\n").split("\n"))


def test_cache_directory_in_the_checkout_beside_the_repository_is_not_used(container, tmp_path):
    """`checkout/.cache` next to `checkout/models`: still files the pull request can commit."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    repository = checkout / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    result = customops(["check", str(repository), "--container-root", str(container), "--format", "json",
                        "--cache-dir", str(checkout / ".cache")], tmp_path)
    report = json.loads(result.stdout)
    assert any("its checkout: not used" in n for n in report["notes"]), report["notes"]
    assert not (checkout / ".cache").exists()


def test_manifest_profile_outside_the_checkout_is_not_read(tmp_path):
    """`[check] profile = "/some/host/file.json"` in a pull request's manifest: not read, one line, exit 2."""
    secret = tmp_path / "elsewhere" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"schema": "TOPSECRET"}\n')
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    repository = checkout / "models"
    (repository / "m" / "1").mkdir(parents=True)
    (repository / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (repository / "customops.toml").write_text(f'[check]\nprofile = "{secret}"\n')
    result = customops(["check", str(repository)], tmp_path)
    assert result.returncode == 2 and "outside the checkout" in result.stderr and "TOPSECRET" not in result.stderr
    (repository / "customops.toml").write_text('[check]\nprofile = "../profile.json"\n')  # inside: used
    inside = customops(["check", str(repository)], tmp_path)
    assert "outside the checkout" not in inside.stderr and "profile.json" in inside.stderr
