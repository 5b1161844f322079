"""`check --image` (issue #31): an image read without a daemon and without unpacking it, its layers applied as the
runtimes apply them. `umoci unpack` (Debian's umoci) is the oracle for the flattening, as ld.so is for loading:
every file customops keeps is umoci's, byte for byte, and every ELF object umoci unpacks is kept. The findings
against the image, in each of its forms, are those against umoci's unpacked root; the image's Env reaches the
linker model (LD_LIBRARY_PATH), as the real ld.so shows in a chroot of that root. Hostile images:
tests/test_attacks_image.py; images read as streams: tests/test_image_streams.py."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image_tools import (
    EXAMPLE,
    LIBDIR,
    ROOT,
    changes,
    container,
    customops,
    example,
    fake_daemon,
    onnxruntime_repository,
    op_library_needing,
    walk,
)
from oracle import run_in_container

from customops.app.check import run_check
from customops.app.inherited import Inherited
from customops.image.layout import read_image
from customops.image.reference import parse
from customops.image.root import materialize
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from fixtures import images
from fixtures.example import install

pytestmark = pytest.mark.skipif(shutil.which("umoci") is None, reason="needs umoci (apt-get install umoci)")
__all__ = ["container", "example"]  # fixtures of image_tools, used here


@pytest.fixture(scope="module")
def layout(container: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return images.oci_layout(tmp_path_factory.mktemp("layout") / "image", changes(container))


@pytest.fixture(scope="module")
def unpacked(layout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """umoci's root of the layout: the oracle."""
    bundle = tmp_path_factory.mktemp("umoci") / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True, capture_output=True)
    return bundle / "rootfs"


def test_layers_apply_as_umoci_applies_them(layout, unpacked, tmp_path):
    ours = walk(materialize(read_image(parse(f"oci:{layout}:latest")), tmp_path / "cache"))
    theirs = walk(unpacked)
    wrong = {p: (ours[p][0], theirs.get(p, ("missing",))[0]) for p in ours if ours[p] != theirs.get(p)}
    assert not wrong, sorted(wrong.items())[:10]
    elf = {p for p, (kind, content) in theirs.items() if kind == "file" and content[:4] == b"\x7fELF"}
    assert elf and not elf - set(ours)  # every ELF object of the image is there
    assert f"{LIBDIR}/libnvinfer.so.10" in ours and "opt/tritonserver/backends/tensorrt/README" in ours
    assert not [p for p in ours if p.startswith("opt/tritonserver/backends/tensorrt/lib")]  # the opaque directory
    assert ours["opt/tritonserver/include"][0] == "file" and ours["opt/extra/libc-copy.so.6"][0] == "file"


def verdicts(result) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((f.code.value, f.model or "", f.library or "", f.symbol or "", f.message) for f in result.findings)


@pytest.mark.parametrize("form", ["oci", "oci-archive", "docker-archive", "docker-archive-gzip"])
def test_each_form_of_an_image_gives_the_verdicts_of_its_unpacked_root(container, unpacked, form, tmp_path):
    layers = changes(container)
    if form == "oci":
        ref = f"oci:{images.oci_layout(tmp_path / 'layout', layers)}:latest"
    elif form == "oci-archive":
        ref = f"oci-archive:{images.oci_archive(images.oci_layout(tmp_path / 'layout', layers), tmp_path / 'o.tar')}"
    else:
        archive = images.docker_archive(tmp_path / "image.tar", layers)
        if form.endswith("gzip"):
            (tmp_path / "image.tar.gz").write_bytes(gzip.compress(archive.read_bytes()))
            archive = tmp_path / "image.tar.gz"
        ref = f"docker-archive:{archive}"
    repo = container.parent / "models"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.so"))
        install(repo)
    mounts = (("/models", str(repo)),)
    manifest = load_manifest(str(repo / "customops.toml"))
    from customops.app.target import image_container
    from customops.elf.cache import ElfReader

    image = image_container(ref, "/opt/tritonserver/backends", ElfReader(), tmp_path / "cache")
    assert image.image and image.image.startswith(ref.split(":")[0])
    through_image = run_check([str(repo)], manifest, image, mounts)
    through_root = run_check([str(repo)], manifest, from_root(str(unpacked)), mounts)
    assert verdicts(through_image) == verdicts(through_root) and len(verdicts(through_root)) > 5


def test_a_second_check_of_an_image_reads_no_layer_and_a_derived_image_only_its_own(container, tmp_path):
    layers = changes(container)
    base = images.oci_layout(tmp_path / "base", layers[:2])
    derived = images.oci_layout(tmp_path / "derived", layers)
    cache = tmp_path / "cache"
    materialize(read_image(parse(f"oci:{base}:latest")), cache)
    manifest = json.loads((base / "index.json").read_text())["manifests"][0]["digest"].split(":")[1]
    for layer in json.loads((base / "blobs/sha256" / manifest).read_text())["layers"]:
        (base / "blobs/sha256" / layer["digest"].split(":")[1]).unlink()  # gone: it must not be read again
        (derived / "blobs/sha256" / layer["digest"].split(":")[1]).unlink()
    assert materialize(read_image(parse(f"oci:{base}:latest")), cache).is_dir()
    root = materialize(read_image(parse(f"oci:{derived}:latest")), cache)
    assert (root / LIBDIR / "libnvinfer.so.10").is_file()


def test_the_images_ld_library_path_finds_what_only_it_names(container, tmp_path):
    extra, op = op_library_needing(container, tmp_path)
    layers = [*changes(container)[:1], [("dir", "opt/extra"), ("dir", "opt/extra/lib"),
                                         ("file", "opt/extra/lib/libextra.so", extra, 0o755)]]
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/extra/lib"}
    layout = images.oci_layout(tmp_path / "layout", layers, env=env)
    repo = onnxruntime_repository(tmp_path / "models", op)
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--image", f"oci:{layout}",
                          "--format", "json", "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    report = json.loads(out.stdout)
    assert not [f for f in report["findings"] if f["code"] == "CO302"], report["findings"]
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True, capture_output=True)
    rootfs = bundle / "rootfs"
    shutil.copytree(repo, rootfs / "models")
    without = run_check([str(rootfs / "models")], load_manifest(None), from_root(str(rootfs)), ())
    assert [f for f in without.findings if f.code == "CO302"]  # the same root without the image's Env
    with_env = run_check([str(rootfs / "models")], load_manifest(None), from_root(str(rootfs)), (),
                         inherited=Inherited.of(env, "last"))
    assert not [f for f in with_env.findings if f.code == "CO302"]
    served = f"/models/m/ops/{op.name}"
    loaded = run_in_container(str(rootfs), with_env.plan, {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]})
    assert (served, None) in loaded.dlopens  # the real ld.so, in the container with the image's environment
    failed = run_in_container(str(rootfs), without.plan)
    assert [e for p, e in failed.dlopens if p == served and e and "libextra.so" in e]


@pytest.mark.parametrize("workdir", ["/opt/extra", "/"])
def test_the_images_working_directory_is_where_a_relative_library_path_starts(container, workdir, tmp_path):
    """LD_LIBRARY_PATH=lib in the image's Env: ld.so searches `lib` under the server's working directory, the
    image's WorkingDir; there the dependency is found only from /opt/extra, as the real ld.so shows."""
    extra, op = op_library_needing(container, tmp_path)
    layers = [*changes(container)[:1], [("dir", "opt/extra"), ("dir", "opt/extra/lib"),
                                         ("file", "opt/extra/lib/libextra.so", extra, 0o755)]]
    layout = images.oci_layout(tmp_path / "layout", layers, env={"LD_LIBRARY_PATH": "lib"}, workdir=workdir)
    repo = onnxruntime_repository(tmp_path / "models", op)
    out = customops("check", str(repo), "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                    str(tmp_path / "cache"))
    missing = [f for f in json.loads(out.stdout)["findings"] if f["code"] == "CO302"]
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True, capture_output=True)
    rootfs = bundle / "rootfs"
    shutil.copytree(repo, rootfs / "models")
    plan = run_check([str(rootfs / "models")], load_manifest(None), from_root(str(rootfs)), ()).plan
    served = f"/models/m/ops/{op.name}"
    loaded = run_in_container(str(rootfs), plan, {"LD_LIBRARY_PATH": "lib"}, cwd=workdir)
    assert ((served, None) in loaded.dlopens) == (workdir == "/opt/extra") == (not missing), (loaded, missing)


def test_a_daemons_image_is_read_as_its_save_streams_and_checks_as_the_archive(container, tmp_path):
    archive = images.docker_archive(tmp_path / "image.tar", changes(container))
    env = fake_daemon(tmp_path / "bin", f'[ "$1" = save ] && [ "$2" = triton:test ] && exec cat {archive}\nexit 1')
    repo = container.parent / "models"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.so"))
        install(repo)

    def findings(ref: str) -> list[tuple]:
        out = subprocess.run([sys.executable, "-m", "customops", "check", str(repo), "--image", ref, "--format",
                              "json", "--cache-dir", str(tmp_path / ref.split(":")[0])], capture_output=True,
                             text=True, env=env, timeout=300)
        assert out.returncode == 1, out.stderr
        return sorted((f["code"], f.get("model"), f["message"]) for f in json.loads(out.stdout)["findings"])

    assert findings("docker-daemon:triton:test") == findings(f"docker-archive:{archive}")


def test_no_daemon_is_one_line_and_exit_2(tmp_path):
    env = fake_daemon(tmp_path / "bin", 'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. '
                                        'Is the docker daemon running?" >&2\nexit 1')
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(EXAMPLE), "--image",
                          "docker-daemon:triton:test"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert "docker save triton:test" in line and "Cannot connect to the Docker daemon" in line


def test_the_images_cmd_is_the_servers_command_line(container, tmp_path):
    """Entrypoint (NVIDIA's script, which execs its arguments) and Cmd give tritonserver its arguments: here explicit
    model control loading only `custom`, so only it is checked, as with `-- tritonserver ...` on the command line."""
    cmd = ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", "--load-model=custom"]
    layout = images.oci_layout(tmp_path / "layout", changes(container), cmd=cmd)
    assert read_image(parse(f"oci:{layout}")).server_args == tuple(cmd[1:])
    out = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                    str(tmp_path / "cache"))
    report = json.loads(out.stdout)
    assert [m["name"] for m in report["models"]] == ["custom"], report["models"]


def test_a_repository_baked_into_the_image_is_checked_from_the_image(example, tmp_path):
    """No repository given: the one the image's command line names (--model-repository=/models) is read from the
    image, as the server would read it; the verdicts are those of the same repository mounted from this machine."""
    container, repository = example
    baked = [("dir", "models"), *images.tree(repository, "models")]
    cmd = ["tritonserver", "--model-repository=/models"]
    layout = images.oci_layout(tmp_path / "layout", [*changes(container), baked], cmd=cmd)
    work = tmp_path / "work"
    work.mkdir()
    inside = customops("check", "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                       str(tmp_path / "cache"), cwd=work)
    assert inside.returncode == 1, inside.stderr
    mounted = customops("check", str(repository), "--image", f"oci:{layout}", "--format", "json",
                        "--cache-dir", str(tmp_path / "cache"), cwd=work)

    def codes(report: str) -> list[tuple]:
        return sorted((f["code"], f.get("model"), f.get("library")) for f in json.loads(report)["findings"])

    assert codes(inside.stdout) == codes(mounted.stdout) and len(codes(inside.stdout)) > 5


def test_an_image_without_a_repository_it_names_is_a_usage_error(container, tmp_path):
    layout = images.oci_layout(tmp_path / "layout", changes(container)[:1], cmd=["tritonserver",
                                                                                 "--model-repository=/models"])
    result = customops("check", "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert result.returncode == 2 and "no model repository given" in result.stderr, result


def as_umoci(layers: list[list[images.Member]], tmp_path: Path) -> tuple[dict, dict]:
    """(customops' root, umoci's root) of one layout, each as walk() gives it."""
    layout = images.oci_layout(tmp_path / "layout", layers)
    ours = walk(materialize(read_image(parse(f"oci:{layout}")), tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True, capture_output=True)
    return ours, walk(bundle / "rootfs")


@pytest.mark.parametrize("layers", [
    pytest.param([[("dir", "opt"), ("dir", "opt/real"), ("symlink", "opt/tritonserver", "real")],
                  [("file", "opt/tritonserver/version", b"2.60.0\n", 0o644)]], id="a-file-under-a-linked-directory"),
    pytest.param([[("dir", "etc"), ("file", "etc/a", b"a\n", 0o644)], [("opaque", ""), ("dir", "opt")]],
                 id="an-opaque-root"),
    pytest.param([[("dir", "etc"), ("file", "etc/a", b"old\n", 0o644), ("hardlink", "etc/b", "etc/a"),
                   ("file", "etc/a", b"new\n", 0o644)]], id="a-hard-link-then-its-target-replaced"),
    pytest.param([[("dir", "etc"), ("file", "etc/x", b"file\n", 0o644), ("dir", "etc/x"),
                   ("file", "etc/x/y", b"y\n", 0o644)]], id="a-file-then-a-directory-in-one-layer"),
    pytest.param([[("dir", "etc"), ("file", "etc/a", b"a\n", 0o644), ("symlink", "etc/s", "a"),
                   ("hardlink", "etc/h", "etc/s")]], id="a-hard-link-to-a-symbolic-link"),
])
def test_what_customops_keeps_is_what_umoci_unpacks(layers, tmp_path):
    ours, theirs = as_umoci(layers, tmp_path)
    assert {p: v for p, v in ours.items()} == {p: theirs[p] for p in ours if p in theirs}
    assert set(ours) <= set(theirs) and [p for p in theirs if p.startswith(("etc/", "opt/tritonserver"))
                                         and theirs[p][0] == "file" and p not in ours] == []


ENTRYPOINT = b"""#!/bin/bash
# what an image's entrypoint may do before it execs the server
set -e
export EXTRA=/opt/extra
export LD_LIBRARY_PATH="${EXTRA}/lib:${LD_LIBRARY_PATH}"
if [ -d /opt/never ]; then
  export LD_PRELOAD=/opt/never/libnever.so
fi
exec "$@"
"""


def test_the_entrypoint_scripts_exports_are_the_servers_environment(container, tmp_path):
    """The script's top-level export is applied as the real shell applies it (run here with the image's Env, execing
    `env`); the conditional LD_PRELOAD is not guessed but said in a note."""
    extra, op = op_library_needing(container, tmp_path)
    layers = [*changes(container)[:1], [("dir", "opt/extra"), ("dir", "opt/extra/lib"),
                                         ("file", "opt/extra/lib/libextra.so", extra, 0o755),
                                         ("dir", "opt/nvidia"),
                                         ("file", "opt/nvidia/nvidia_entrypoint.sh", ENTRYPOINT, 0o755)]]
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/lib"}
    layout = images.oci_layout(tmp_path / "layout", layers, env=env, cmd=["tritonserver", "--model-repository=/models"])
    image = read_image(parse(f"oci:{layout}"))
    script = materialize(image, tmp_path / "cache") / "opt/nvidia/nvidia_entrypoint.sh"
    shell = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True, env=env, check=True)
    real = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)
    from customops.image.entrypoint import effect

    started = effect(str(script.parents[2]), image.settings["Entrypoint"], image.environment)
    assert started.environment["LD_LIBRARY_PATH"] == real["LD_LIBRARY_PATH"] == "/opt/extra/lib:/usr/local/lib"
    assert "LD_PRELOAD" not in started.environment
    assert started.notes == ["the entrypoint script /opt/nvidia/nvidia_entrypoint.sh may set LD_PRELOAD (line 7, "
                             "under a condition or in a function): not modelled"]
    repo = onnxruntime_repository(tmp_path / "models", op)
    out = customops("check", str(repo), "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                    str(tmp_path / "cache"))
    report = json.loads(out.stdout)
    assert not [f for f in report["findings"] if f["code"] == "CO302"], report["findings"]
    assert started.notes[0] in report["notes"]
