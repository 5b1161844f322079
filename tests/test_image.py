"""`check --image` (issue #31, first step): an image read without a daemon and without unpacking it, its layers
applied as the runtimes apply them. `umoci unpack` (Debian's umoci) is the oracle for the flattening, as ld.so is
for loading: every file customops keeps is umoci's, byte for byte, and every ELF object umoci unpacks is kept.
The findings against the image, in each of its forms, are those against umoci's unpacked root; the image's Env
reaches the linker model (LD_LIBRARY_PATH), as the real ld.so shows in a chroot of that root."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"
LIBDIR = "usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fixture container's root, a copy of the example repository with its libraries)."""
    copy = tmp_path_factory.mktemp("example") / "model_repository"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("*.so"))
    return install(copy), copy


@pytest.fixture(scope="module")
def container(example: tuple[Path, Path]) -> Path:
    return example[0]


def changes(container: Path) -> list[list[images.Member]]:
    """Two layers over the fixture container's tree: a whiteout, an opaque directory, a hard link to a file of the
    layer below, a file where a directory was, a symbolic link replaced; then a layer that puts a whited-out file
    back with other content."""
    libc = (container / "lib/x86_64-linux-gnu/libc.so.6").resolve()
    second = [("whiteout", f"{LIBDIR}/libnvinfer.so.10"),
              ("dir", "opt/tritonserver/backends/tensorrt"), ("opaque", "opt/tritonserver/backends/tensorrt"),
              ("file", "opt/tritonserver/backends/tensorrt/README", b"emptied\n", 0o644),
              ("dir", "opt/extra"), ("hardlink", "opt/extra/libc-copy.so.6", "lib/x86_64-linux-gnu/libc.so.6"),
              ("file", "opt/tritonserver/include", b"a file where a directory was\n", 0o644),
              ("file", "opt/extra/run.sh", b"#!/bin/sh\nexec tritonserver \"$@\"\n", 0o755),
              ("file", "etc/ld.so.conf.d/extra.conf", b"/opt/extra\n", 0o644)]
    third = [("file", f"{LIBDIR}/libnvinfer.so.10", libc, 0o755)]  # back, as another file
    return [images.tree(container), second, third]


@pytest.fixture(scope="module")
def layout(container: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return images.oci_layout(tmp_path_factory.mktemp("layout") / "image", changes(container))


@pytest.fixture(scope="module")
def unpacked(layout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """umoci's root of the layout: the oracle."""
    bundle = tmp_path_factory.mktemp("umoci") / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True, capture_output=True)
    return bundle / "rootfs"


def walk(root: Path) -> dict[str, tuple[str, str | bytes]]:
    """Every path under root: ("dir", ""), ("symlink", target) or ("file", content)."""
    found: dict[str, tuple[str, str | bytes]] = {}
    for current, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(current) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("symlink", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir", "")
            elif path.is_file():
                found[key] = ("file", path.read_bytes())
    return found


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


def op_library_needing(root_tree: Path, work: Path) -> tuple[Path, Path]:
    """An ONNX Runtime op library needing libextra.so, which lies in /opt/extra/lib, a directory only the image's
    LD_LIBRARY_PATH names (no RUNPATH, not in ld.so.conf)."""
    extra = work / "libextra.so"
    source = work / "extra.c"
    source.write_text("int extra_value(void) { return 3; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(extra), str(source), "-Wl,-soname,libextra.so"], check=True)
    op = work / "libneeds_extra.so"
    source = work / "op.c"
    source.write_text("extern int extra_value(void);\nint (*const uses)(void) = extra_value;\n"
                      "void *RegisterCustomOps(void *o, const void *a) { (void)o; (void)a; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(op), str(source), f"-L{work}", "-lextra",
                    "-Wl,--no-as-needed"], check=True)
    return extra, op


def onnxruntime_repository(repo: Path, op: Path) -> Path:
    """A repository of one ONNX Runtime model, `m`, whose op library is `op` (at /models/m/ops/ when mounted)."""
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "ops").mkdir()
    shutil.copy(op, repo / "m" / "ops" / op.name)
    (repo / "m" / "config.pbtxt").write_text(
        f'backend: "onnxruntime"\nmodel_operations {{ op_library_filename: "/models/m/ops/{op.name}" }}\n')
    return repo


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


def customops(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_a_layer_that_lies_about_its_digest_is_refused_in_one_line(container, tmp_path):
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=test\n", 0o644)]])
    blob = next(p for p in (layout / "blobs/sha256").iterdir() if p.read_bytes()[:2] == b"\x1f\x8b")
    blob.write_bytes(gzip.compress(images.layer_tar([("file", "etc/os-release", b"ID=evil\n", 0o644)])))
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2 and result.stdout == "", result
    (line,) = result.stderr.splitlines()
    assert str(layout) in line and "does not have the digest" in line


def test_an_index_that_lists_itself_is_refused_in_one_line(tmp_path):
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=test\n", 0o644)]])
    index = json.loads((layout / "index.json").read_text())
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": index["manifests"]}).encode()
    digest = hashlib.sha256(body).hexdigest()
    looping = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}", "size": len(body)}]})
    (layout / "blobs/sha256" / digest).write_bytes(looping.encode())  # its content names itself: a lie, then a loop
    (layout / "index.json").write_text(looping)
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result


def test_members_that_climb_out_of_the_image_are_never_written(tmp_path):
    outside = tmp_path / "outside"
    layers = [[("file", "../../outside", b"escaped\n", 0o644), ("file", "/etc/os-release", b"ID=x\n", 0o644),
               ("symlink", "etc/escape", str(tmp_path)), ("file", "etc/escape/written", b"x\n", 0o644)]]
    layout = images.oci_layout(tmp_path / "layout", layers)
    root = materialize(read_image(parse(f"oci:{layout}")), tmp_path / "cache")
    assert not outside.exists() and not (tmp_path / "written").exists()
    assert (root / "etc/os-release").read_bytes() == b"ID=x\n"
    # under the link, the file lands where the link leads inside the image's root, as extracting into a root does
    assert os.readlink(root / "etc/escape") == str(tmp_path)
    assert (root / str(tmp_path).lstrip("/") / "written").read_bytes() == b"x\n"


def fake_daemon(bin_dir: Path, script: str) -> dict[str, str]:
    """A `docker` command of the test's own on PATH (no daemon runs here): what `docker save` does is `script`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "docker").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "docker").chmod(0o755)
    return {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


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


def test_a_layer_that_ends_early_is_refused_in_one_line(tmp_path):
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=test\n" * 4000, 0o644)]])
    blob = next(p for p in (layout / "blobs/sha256").iterdir() if p.read_bytes()[:2] == b"\x1f\x8b")
    blob.write_bytes(blob.read_bytes()[:40])
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result
    assert str(layout) in result.stderr and "layer sha256:" in result.stderr
    assert not list((tmp_path / "cache" / "images" / "layers").iterdir())  # nothing of it kept


def test_more_layers_than_an_image_may_have_are_refused_in_one_line(tmp_path):
    layout = images.oci_layout(tmp_path / "layout", [[("file", f"etc/f{n}", b"x", 0o644)] for n in range(501)],
                               compress=False)
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2 and "501 layers (more than 500)" in result.stderr, result


def test_device_nodes_and_fifos_of_an_image_are_never_made(tmp_path):
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, kind in (("dev/sda", tarfile.BLKTYPE), ("dev/null", tarfile.CHRTYPE), ("run/fifo", tarfile.FIFOTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            archive.addfile(info)
        info = tarfile.TarInfo("usr/bin/setuid-tool")
        data = b"\x7fELF" + b"\0" * 60
        info.size, info.mode = len(data), 0o4755
        archive.addfile(info, io.BytesIO(data))
    raw = out.getvalue()
    from customops.image.layers import keep_layer

    kept = keep_layer(io.BytesIO(raw), tmp_path / "cache")
    index = {e["path"]: e for e in json.loads((kept / "index.json").read_text())}
    assert {index[p]["kind"] for p in ("dev/sda", "dev/null", "run/fifo")} == {"other"}
    assert not (kept / "files" / "dev").exists()
    assert (kept / "files/usr/bin/setuid-tool").stat().st_mode & 0o7777 == 0o755  # kept, never setuid


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



# Found by review (hostile layers, and where the first flattening differed from umoci's) ---------------------


def raw_layer(build) -> bytes:  # type: ignore[no-untyped-def]
    """A layer tar written by `build(archive)` (members of any kind the test makes)."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        build(archive)
    return out.getvalue()


def test_a_member_claiming_more_bytes_than_a_layer_may_hold_ends_the_read_in_one_line(tmp_path):
    import io
    import tarfile

    def build(archive):  # type: ignore[no-untyped-def]
        info = tarfile.TarInfo("usr/x")
        info.size, info.pax_headers = 2, {"size": "99999999999999999999"}  # skipped by reading: 10^16 blocks
        archive.addfile(info, io.BytesIO(b"ab"))

    from customops.errors import InputError
    from customops.image.layers import keep_layer

    with pytest.raises(InputError, match="claims 99999999999999999999 bytes"):
        keep_layer(io.BytesIO(raw_layer(build)), tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir()]


def test_a_sparse_member_is_never_written_out_at_its_claimed_size(tmp_path):
    import io
    import tarfile

    def build(archive):  # type: ignore[no-untyped-def]
        info = tarfile.TarInfo("usr/lib/libhuge.so")
        info.pax_headers = {"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.name": "usr/lib/libhuge.so",
                            "GNU.sparse.realsize": str(1 << 30), "GNU.sparse.map": "0,4"}
        info.size = 4
        archive.addfile(info, io.BytesIO(b"\x7fELF"))

    from customops.image.layers import keep_layer

    kept = keep_layer(io.BytesIO(raw_layer(build)), tmp_path / "cache")
    assert sum(p.stat().st_size for p in kept.rglob("*") if p.is_file()) < 1 << 20


@pytest.mark.parametrize("config", [{"config": None}, {"config": {"Cmd": "tritonserver"}},
                                    {"config": {"Env": {"A": "1"}, "Entrypoint": 5}}, {"rootfs": []}])
def test_a_configuration_of_another_shape_is_read_or_refused_in_one_line(tmp_path, config):
    layer = images.layer_tar([("file", "etc/os-release", b"ID=x\n", 0o644)])
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    base = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=x\n", 0o644)]], compress=False)
    manifest_name = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs/sha256" / manifest_name).read_text())
    body = json.dumps({**base, **config}).encode()
    digest = hashlib.sha256(body).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(body)
    manifest["config"]["digest"] = f"sha256:{digest}"
    body = json.dumps(manifest).encode()
    (layout / "blobs/sha256" / hashlib.sha256(body).hexdigest()).write_bytes(body)
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body)}]}))
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode in (1, 2) and "internal error" not in result.stderr, result.stderr
    assert result.returncode == 1 or len(result.stderr.splitlines()) == 1, result.stderr


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
