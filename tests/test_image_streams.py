"""Images read as streams (issue #31): `docker save IMAGE | customops ... --image docker-archive:/dev/stdin`, an
archive compressed whole with gzip, zstd or xz, zstd-compressed layers, a daemon's save: each gives the verdicts of
the same image read where it lies (whose flattening tests/test_image.py holds against umoci's). A stream passes
its layers before its configuration names the model repository baked into it: a daemon is asked again, a pipe is
a usage error. The platform of a multi-platform index, and a profile made from an image, keep what the image says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image_tools import (
    EXAMPLE,
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

from customops.image.layout import read_image
from customops.image.reference import parse
from customops.image.root import materialize
from fixtures import images
from fixtures.example import install

__all__ = ["container", "example"]  # fixtures of image_tools, used here


@pytest.fixture(scope="module")
def repository(container: Path) -> Path:
    """The example repository with its op libraries, for mounting at /models."""
    repo = container.parent / "models"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.so"))
        install(repo)
    return repo


@pytest.fixture(scope="module")
def archive(container: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return images.docker_archive(tmp_path_factory.mktemp("archive") / "image.tar", changes(container))


def piped(archive: Path, *args: str, cwd: Path = ROOT, cache: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """`cat ARCHIVE | customops ARGS`: the archive on a pipe, as `docker save IMAGE | customops ...` gives it
    (`cache`: customops' default cache, for a command without --cache-dir)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"CUSTOMOPS_CACHE_DIR": str(cache)} if cache else {})}
    with subprocess.Popen(["cat", str(archive)], stdout=subprocess.PIPE) as cat:
        out = subprocess.run([sys.executable, "-m", "customops", *args], stdin=cat.stdout, capture_output=True,
                             cwd=cwd, timeout=300, env=env)
    return out


def findings(*args: str, stdin: Path | None = None) -> list[tuple]:
    """The findings of `customops check ARGS --format json` (exit 1: the example has errors), `stdin` piped in."""
    command = ("check", *args, "--format", "json")
    out = piped(stdin, *command) if stdin else piped(Path("/dev/null"), *command)
    assert out.returncode == 1, out.stderr.decode()
    return sorted((f["code"], f.get("model"), f["message"]) for f in json.loads(out.stdout)["findings"])


def test_a_save_piped_into_customops_checks_as_the_archive_it_is(archive, repository, tmp_path):
    """docs/ci.md's recipe: `docker save IMAGE | customops profile create --image docker-archive:/dev/stdin`."""
    through_pipe = findings(str(repository), "--image", "docker-archive:/dev/stdin", "--cache-dir",
                            str(tmp_path / "a"), stdin=archive)
    assert through_pipe == findings(str(repository), "--image", f"docker-archive:{archive}", "--cache-dir",
                                    str(tmp_path / "b")) and len(through_pipe) > 5
    made = piped(archive, "profile", "create", "--image", "docker-archive:/dev/stdin", "-o", str(tmp_path / "p.json"),
                 cache=tmp_path / "d")
    assert made.returncode == 0, made.stderr.decode()
    assert findings(str(repository), "--profile", str(tmp_path / "p.json"), "--cache-dir",
                    str(tmp_path / "c")) == through_pipe


@pytest.mark.parametrize("compressor", ["gzip", "zstd", "xz"])
def test_an_archive_compressed_whole_checks_as_the_plain_archive(archive, repository, compressor, tmp_path):
    if shutil.which(compressor) is None:
        pytest.skip(f"needs the {compressor} command")
    packed = tmp_path / f"image.tar.{compressor}"
    with open(archive, "rb") as plain, open(packed, "wb") as out:
        subprocess.run([compressor, "-c"], stdin=plain, stdout=out, check=True)
    assert findings(str(repository), "--image", str(packed), "--cache-dir", str(tmp_path / "a")) == findings(
        str(repository), "--image", f"docker-archive:{archive}", "--cache-dir", str(tmp_path / "b"))


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd command")
def test_zstd_layers_of_several_frames_apply_as_the_same_layers_gzip_compressed(container, tmp_path):
    layers = changes(container)
    zstd = images.oci_layout(tmp_path / "zstd", layers, compress="zstd")
    plain = images.oci_layout(tmp_path / "gzip", layers)
    ours = walk(materialize(read_image(parse(f"oci:{zstd}")), tmp_path / "cache-zstd"))
    assert ours == walk(materialize(read_image(parse(f"oci:{plain}")), tmp_path / "cache-gzip"))
    assert "usr/lib/x86_64-linux-gnu/libnvinfer.so.10" in ours


def baked(example: tuple[Path, Path], tmp_path: Path) -> Path:
    """A `docker save` archive of the example image with the example repository at /models, which its Cmd names."""
    container, repository = example
    layers = [*changes(container), [("dir", "models"), *images.tree(repository, "models")]]
    return images.docker_archive(tmp_path / "baked.tar", layers, cmd=["tritonserver", "--model-repository=/models"])


def test_a_repository_baked_into_a_daemons_image_is_read_in_a_second_save(example, tmp_path):
    archive = baked(example, tmp_path)
    saves = tmp_path / "saves"
    env = fake_daemon(tmp_path / "bin", f'echo "$@" >> {saves}\n[ "$1" = save ] && exec cat {archive}\nexit 1')
    work = tmp_path / "work"
    work.mkdir()
    checks = []
    for ref in ("docker-daemon:triton:test", f"docker-archive:{archive}"):
        out = subprocess.run([sys.executable, "-m", "customops", "check", "--image", ref, "--format", "json",
                              "--cache-dir", str(tmp_path / ref.split(":")[0])], capture_output=True, text=True,
                             env=env, cwd=work, timeout=300)
        assert out.returncode == 1, out.stderr
        checks.append(sorted((f["code"], f.get("model"), f["message"]) for f in json.loads(out.stdout)["findings"]))
    assert checks[0] == checks[1] and len(checks[0]) > 5
    saved = [line for line in saves.read_text().splitlines() if line.startswith("save")]
    assert saved == ["save triton:test"] * 2  # the layers passed, then kept with /models


def test_a_repository_baked_into_a_piped_image_is_a_usage_error_naming_it(example, tmp_path):
    out = piped(baked(example, tmp_path), "check", "--image", "docker-archive:/dev/stdin", "--cache-dir",
                str(tmp_path / "cache"), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == b""
    (line,) = out.stderr.decode().splitlines()
    assert "docker-archive:/dev/stdin" in line and "(/models)" in line and "stream read once" in line


def test_a_multi_platform_index_gives_linux_amd64_unless_platform_names_another(tmp_path):
    layout = images.multi_platform(tmp_path / "layout", {
        arch: [[("dir", "etc"), ("file", "etc/os-release", f"ID={arch}\n".encode(), 0o644)]]
        for arch in ("arm64", "amd64")})
    assert read_image(parse(f"oci:{layout}")).config["architecture"] == "amd64"
    assert read_image(parse(f"oci:{layout}"), "linux/arm64").config["architecture"] == "arm64"
    profile = tmp_path / "p.json"
    made = customops("profile", "create", "--image", f"oci:{layout}", "--platform", "linux/arm64", "-o", str(profile),
                     cache=tmp_path / "cache")
    assert made.returncode == 0, made.stderr
    arm = read_image(parse(f"oci:{layout}"), "linux/arm64").config_digest
    assert json.loads(profile.read_text())["image"].endswith(f"({arm[:19]})")
    other = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--platform", "linux/s390x",
                      "--cache-dir", str(tmp_path / "cache"))
    assert other.returncode == 2 and "2 manifests for linux/s390x" in other.stderr, other


def test_an_archive_of_several_images_checks_the_one_its_name_and_tag_choose(tmp_path):
    archive = images.docker_archive(tmp_path / "two.tar", [[("dir", "etc"), ("file", "etc/a", b"a\n", 0o644)]],
                                    tag="triton:a", others={"triton:b": [[("dir", "etc"),
                                                                          ("file", "etc/b", b"b\n", 0o644)]]})
    for tag in ("a", "b"):
        image = read_image(parse(f"docker-archive:{archive}:triton:{tag}"))
        assert (materialize(image, tmp_path / "cache") / "etc" / tag).is_file()
    unchosen = customops("check", str(EXAMPLE), "--image", f"docker-archive:{archive}", "--cache-dir",
                         str(tmp_path / "cache"))
    assert unchosen.returncode == 2 and "2 images match" in unchosen.stderr and "triton:a, triton:b" in unchosen.stderr


def test_a_profile_made_from_an_image_searches_its_ld_library_path(container, tmp_path):
    """The image's Env LD_LIBRARY_PATH finds an op library's dependency (tests/test_image.py confirms it with the
    real ld.so); a profile made from the image records that variable and the directory, so a check against the
    profile finds it too, and without the variable it does not."""
    extra, op = op_library_needing(container, tmp_path)
    layers = [*changes(container)[:1], [("dir", "opt/extra"), ("dir", "opt/extra/lib"),
                                         ("file", "opt/extra/lib/libextra.so", extra, 0o755)]]
    layout = images.oci_layout(tmp_path / "layout", layers, env={"LD_LIBRARY_PATH": "/opt/extra/lib"})
    repo = onnxruntime_repository(tmp_path / "models", op)
    profile = tmp_path / "p.json"
    made = customops("profile", "create", "--image", f"oci:{layout}", "-o", str(profile), cache=tmp_path / "cache")
    assert made.returncode == 0, made.stderr
    recorded = json.loads(profile.read_text())
    assert recorded["environment"] == {"LD_LIBRARY_PATH": "/opt/extra/lib"}
    assert recorded["working_directory"] == "/opt/tritonserver"  # its WorkingDir: where relative paths start
    assert "/opt/extra/lib/libextra.so" in recorded["files"]

    def missing(against: Path) -> list[str]:
        out = customops("check", str(repo), "--profile", str(against), "--format", "json", "--cache-dir",
                        str(tmp_path / "cache"))
        return [f["code"] for f in json.loads(out.stdout)["findings"] if f["code"] == "CO302"]

    assert missing(profile) == []
    del recorded["environment"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(recorded))
    assert missing(bare) == ["CO302"]


def test_a_second_check_of_a_daemons_image_saves_nothing(archive, repository, tmp_path):
    """`docker image inspect` names the image by its configuration's digest (the classic image store): an image
    whose configuration and layers an earlier save kept is checked without a save; another ID saves anew."""
    import tarfile

    with tarfile.open(archive) as members:
        manifest = json.load(members.extractfile("manifest.json"))  # type: ignore[arg-type]
    image_id = "sha256:" + manifest[0]["Config"].removesuffix(".json")
    answer = tmp_path / "id"
    saves = tmp_path / "saves"
    env = fake_daemon(tmp_path / "bin", f'[ "$1 $2" = "image inspect" ] && exec cat {answer}\n'
                                        f'[ "$1" = save ] && echo saved >> {saves} && exec cat {archive}\nexit 1')

    def check() -> list[tuple]:
        out = subprocess.run([sys.executable, "-m", "customops", "check", str(repository), "--image",
                              "docker-daemon:triton:test", "--format", "json", "--cache-dir", str(tmp_path / "c")],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 1, out.stderr
        return sorted((f["code"], f.get("model"), f["message"]) for f in json.loads(out.stdout)["findings"])

    answer.write_text(image_id + "\n")
    first = check()
    assert saves.read_text().splitlines() == ["saved"]
    assert check() == first and saves.read_text().splitlines() == ["saved"]  # no second save
    answer.write_text("sha256:" + "0" * 64 + "\n")  # another image under that name now: checked anew
    assert check() == first and saves.read_text().splitlines() == ["saved", "saved"]


def test_an_archive_saved_anew_at_the_same_path_is_checked_anew(container, repository, tmp_path):
    """The report cache answers for the image the reference names now, not the one it named before."""
    layers = changes(container)
    archive = tmp_path / "image.tar"

    def check() -> list[tuple]:
        return findings(str(repository), "--image", f"docker-archive:{archive}", "--cache-dir", str(tmp_path / "c"))

    images.docker_archive(archive, layers[:1])
    before = check()
    images.docker_archive(archive, layers)  # libnvinfer.so.10 whited out, then back as another file
    assert check() != before


@pytest.mark.parametrize("library_path", ["lib;/nowhere", ":lib"])
def test_a_profile_searches_an_images_library_path_as_ld_so_splits_it(container, library_path, tmp_path):
    """`;` separates LD_LIBRARY_PATH entries as `:` does, and a relative entry starts at the server's working
    directory (the image's WorkingDir): the profile made from the image finds what the image check finds."""
    extra, op = op_library_needing(container, tmp_path)
    layers = [*changes(container)[:1], [("dir", "opt/extra"), ("dir", "opt/extra/lib"),
                                         ("file", "opt/extra/lib/libextra.so", extra, 0o755)]]
    layout = images.oci_layout(tmp_path / "layout", layers, env={"LD_LIBRARY_PATH": library_path},
                               workdir="/opt/extra")
    repo = onnxruntime_repository(tmp_path / "models", op)
    profile = tmp_path / "p.json"
    assert customops("profile", "create", "--image", f"oci:{layout}", "-o", str(profile),
                     cache=tmp_path / "cache").returncode == 0

    def missing(*against: str) -> list[str]:
        out = customops("check", str(repo), *against, "--format", "json", "--cache-dir", str(tmp_path / "c"))
        return [f["code"] for f in json.loads(out.stdout)["findings"] if f["code"] == "CO302"]

    assert missing("--image", f"oci:{layout}") == missing("--profile", str(profile)) == []
