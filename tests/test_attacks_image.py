"""Hostile images (issue #31): each is refused in one line naming the image and the reason, exit 2, or read
without anything written outside customops' cache: members that climb out of the root, links out, device nodes,
FIFOs and setuid files, members claiming more than a layer may hold, sparse members, layers that lie about their
digest or end early, too many layers, an index that lists itself, configurations of another shape, compressed
streams that are not what they claim, and streams holding more JSON than an image has."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile

import pytest
from image_tools import EXAMPLE, customops, raw_layer

from customops.image.layout import read_image
from customops.image.reference import parse
from customops.image.root import materialize
from fixtures import images


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


def test_a_member_claiming_more_bytes_than_a_layer_may_hold_ends_the_read_in_one_line(tmp_path):

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


def test_a_zstd_layer_that_is_not_zstd_after_its_magic_is_refused_in_one_line(tmp_path):
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=test\n", 0o644)]],
                               compress=False)
    blob = next(p for p in (layout / "blobs/sha256").iterdir() if p.read_bytes()[:1] != b"{")
    lying = b"\x28\xb5\x2f\xfd" + os.urandom(64)
    blob.write_bytes(lying)  # read as zstd, by its magic, before its digest is known to be wrong
    result = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result
    assert str(layout) in result.stderr and "layer sha256:" in result.stderr


def test_a_zstd_bomb_ends_the_read_at_the_layer_limit(tmp_path, monkeypatch):
    """A small zstd layer that expands beyond what a layer may hold (here a limit of 1 MB, for speed: the real one
    is 256 GB) is refused as it expands, and nothing of it is kept."""

    from customops.errors import InputError
    from customops.image import layers

    monkeypatch.setattr(layers, "LAYER_LIMIT", 1 << 20)
    bomb = images.zstd_frames(images.layer_tar([("file", f"usr/zeros{n}", b"\0" * (512 << 10), 0o644)
                                                for n in range(16)]))
    assert len(bomb) < 4096
    with pytest.raises(InputError, match="more than 1 MB uncompressed"):
        layers.keep_layer(io.BytesIO(bomb), tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


def archive_stream(members: list[tuple[str, bytes]]) -> io.BytesIO:
    """An image archive's bytes, as a stream holding these members (name, content), from its start."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    out.seek(0)
    return out


def test_a_stream_holding_more_json_than_an_image_has_is_refused(tmp_path, monkeypatch):

    from customops.errors import InputError
    from customops.image import stream

    monkeypatch.setattr(stream, "DOCUMENTS_LIMIT", 4096)
    out = archive_stream([(f"doc{n}.json", json.dumps({"pad": "x" * 1000}).encode()) for n in range(8)])
    with pytest.raises(InputError, match="more JSON than an image"):
        stream.layers_and_documents(out, tmp_path / "layers", "the image")


@pytest.mark.parametrize("cut", ["plain", "gzip"])
def test_a_piped_archive_that_ends_early_is_refused_in_one_line(tmp_path, cut):
    import subprocess
    import sys

    from image_tools import ROOT

    archive = images.docker_archive(tmp_path / "image.tar", [[("file", "etc/os-release", b"ID=x\n" * 5000, 0o644)]])
    data = archive.read_bytes() if cut == "plain" else gzip.compress(archive.read_bytes())
    result = subprocess.run([sys.executable, "-m", "customops", "check", str(EXAMPLE), "--image",
                             "docker-archive:/dev/stdin", "--cache-dir", str(tmp_path / "cache")],
                            input=data[:len(data) // 2], capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and result.stdout == b"", result
    (line,) = result.stderr.decode().splitlines()
    assert "docker-archive:/dev/stdin" in line


# Found by review (session 8): daemons that block, archives that describe two images, what a run leaves behind -----


def daemon_check(tmp_path, script: str, *args: str, runtime: str = "docker", timeout: int = 120):  # type: ignore[no-untyped-def]
    """`customops check EXAMPLE --image RUNTIME:triton:test ARGS` with a `runtime` command of the test's own."""
    import subprocess
    import sys

    from image_tools import ROOT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / runtime).write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / runtime).chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    transport = "docker-daemon" if runtime == "docker" else "podman"
    return subprocess.run([sys.executable, "-m", "customops", "check", str(EXAMPLE), "--image",
                           f"{transport}:triton:test", "--cache-dir", str(tmp_path / "cache"), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def small_archive(tmp_path):  # type: ignore[no-untyped-def]
    return images.docker_archive(tmp_path / "image.tar", [[("dir", "etc"), ("file", "etc/os-release", b"ID=x\n",
                                                                                0o644)]])


def test_a_daemon_that_says_much_before_its_archive_is_read_as_it_sends_it(tmp_path):
    archive = small_archive(tmp_path)
    said = daemon_check(tmp_path, f'[ "$1" = save ] || exit 1\nhead -c 300000 /dev/zero | tr "\\0" x >&2\n'
                                  f'exec cat {archive}')
    assert said.returncode in (0, 1) and "Traceback" not in said.stderr, said.stderr[-500:]


@pytest.mark.parametrize("after", ["garbage", "more"])
def test_a_daemon_that_does_not_stop_sending_is_refused_in_one_line(tmp_path, after):
    archive = small_archive(tmp_path)
    first = f"cat {archive}; " if after == "more" else ""
    said = daemon_check(tmp_path, f'[ "$1" = save ] || exit 1\n{first}head -c 3000000 /dev/urandom\nexit 0')
    assert said.returncode == 2 and len(said.stderr.splitlines()) == 1, said.stderr[-500:]


def test_a_podman_id_without_its_prefix_names_the_kept_configuration(tmp_path):
    archive = small_archive(tmp_path)
    with tarfile.open(archive) as members:
        config = json.load(members.extractfile("manifest.json"))[0]["Config"].removesuffix(".json")  # type: ignore[arg-type]
    saves = tmp_path / "saves"
    script = (f'[ "$1 $2" = "image inspect" ] && echo {config} && exit 0\n'
              f'[ "$1 $2" = "image save" ] && echo saved >> {saves} && exec cat {archive}\nexit 1')
    for _ in range(2):
        assert daemon_check(tmp_path, script, runtime="podman").returncode in (0, 1)
    assert saves.read_text().splitlines() == ["saved"]


def test_a_fifo_where_a_configuration_is_kept_does_not_block_the_check(tmp_path):
    archive = small_archive(tmp_path)
    with tarfile.open(archive) as members:
        config = json.load(members.extractfile("manifest.json"))[0]["Config"].removesuffix(".json")  # type: ignore[arg-type]
    (tmp_path / "cache" / "images" / "configs").mkdir(parents=True)
    os.mkfifo(tmp_path / "cache" / "images" / "configs" / config)
    script = f'[ "$1 $2" = "image inspect" ] && echo sha256:{config} && exit 0\n[ "$1" = save ] && exec cat {archive}'
    assert daemon_check(tmp_path, script, timeout=60).returncode in (0, 1)


def test_an_image_name_that_would_be_an_option_is_refused(tmp_path):
    said = daemon_check(tmp_path, "exit 1", "--format", "json")
    refused = __import__("subprocess").run(
        [__import__("sys").executable, "-m", "customops", "check", str(EXAMPLE), "--image", "docker-daemon:-v=/:/x"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(__import__("image_tools").ROOT)})
    assert said.returncode == 2 and refused.returncode == 2 and "starts with '-'" in refused.stderr


def two_descriptions(tmp_path):  # type: ignore[no-untyped-def]
    """An archive whose manifest.json names one image and whose index.json another (docker 25 writes both)."""

    layout = images.oci_layout(tmp_path / "a", [[("dir", "etc"), ("file", "etc/os-release", b"ID=a\n", 0o644)]])
    docker = images.docker_archive(tmp_path / "b.tar", [[("dir", "etc"), ("file", "etc/os-release", b"ID=b\n",
                                                                              0o644)]])
    both = tmp_path / "both.tar"
    with tarfile.open(both, "w") as out, tarfile.open(docker) as theirs:
        for member in theirs.getmembers():
            out.addfile(member, theirs.extractfile(member) if member.isfile() else None)
        for name in ("oci-layout", "index.json", "blobs"):
            out.add(layout / name, arcname=name)
    return both


def test_an_archive_describing_two_images_is_refused_however_it_is_given(tmp_path):
    import subprocess
    import sys

    from image_tools import ROOT

    both = two_descriptions(tmp_path)
    (tmp_path / "both.tar.gz").write_bytes(gzip.compress(both.read_bytes()))
    runs = [customops("check", str(EXAMPLE), "--image", ref, "--cache-dir", str(tmp_path / f"c{n}"))
            for n, ref in enumerate((str(both), f"docker-archive:{both}", f"oci-archive:{both}",
                                     str(tmp_path / "both.tar.gz")))]
    piped = subprocess.run([sys.executable, "-m", "customops", "check", str(EXAMPLE), "--image",
                            "docker-archive:/dev/stdin", "--cache-dir", str(tmp_path / "cp")], input=both.read_bytes(),
                           capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert [r.returncode for r in runs] == [2] * 4 and piped.returncode == 2
    assert all("describe different images" in r.stderr for r in runs) and b"different images" in piped.stderr


def test_a_blob_that_is_neither_a_layer_nor_json_is_passed_by_unless_the_image_names_it(tmp_path):

    layout = images.oci_layout(tmp_path / "layout", [[("dir", "etc"), ("file", "etc/os-release", b"ID=x\n", 0o644)]])
    sbom = b"SPDXVersion: SPDX-2.3\nDataLicense: CC0-1.0\n" * 50
    (layout / "blobs/sha256" / hashlib.sha256(sbom).hexdigest()).write_bytes(sbom)
    archive = images.oci_archive(layout, tmp_path / "image.tar")
    packed = tmp_path / "image.tar.gz"
    with tarfile.open(archive) as check_members:
        assert any(m.name.endswith(hashlib.sha256(sbom).hexdigest()) for m in check_members.getmembers())
    packed.write_bytes(gzip.compress(archive.read_bytes()))
    plain = customops("check", str(EXAMPLE), "--image", f"oci-archive:{archive}", "--cache-dir", str(tmp_path / "a"))
    streamed = customops("check", str(EXAMPLE), "--image", f"oci-archive:{packed}", "--cache-dir", str(tmp_path / "b"))
    assert plain.returncode == streamed.returncode != 2, streamed.stderr


def test_no_cache_leaves_nothing_behind(tmp_path):
    import subprocess
    import sys

    from image_tools import ROOT

    layout = images.oci_layout(tmp_path / "layout", [[("dir", "etc"), ("file", "etc/os-release", b"ID=x\n", 0o644)]])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    ran = subprocess.run([sys.executable, "-m", "customops", "check", str(EXAMPLE), "--image", f"oci:{layout}",
                          "--no-cache"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temporary)})
    assert ran.returncode in (0, 1), ran.stderr
    assert list(temporary.iterdir()) == []


def test_a_layout_whose_blob_is_rewritten_in_place_is_checked_anew(tmp_path):
    """The report cache keys a layout by its index and every blob: a manifest rewritten in place is read again,
    and refused (a layer's content stays what its digest names: the layer cache answers by digest)."""
    layout = images.oci_layout(tmp_path / "layout", [[("file", "etc/os-release", b"ID=test\n", 0o644)]])
    first = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                      str(tmp_path / "cache"))
    assert first.returncode in (0, 1), first.stderr
    manifest = next(p for p in (layout / "blobs/sha256").iterdir() if b"image.manifest.v1+json" in p.read_bytes())
    manifest.write_bytes(manifest.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion": 2 '))
    again = customops("check", str(EXAMPLE), "--image", f"oci:{layout}", "--format", "json", "--cache-dir",
                      str(tmp_path / "cache"))
    assert again.returncode == 2 and "does not have the digest" in again.stderr


def test_a_stream_of_more_layers_than_an_archive_may_hold_is_refused(tmp_path, monkeypatch):

    from customops.errors import InputError
    from customops.image import stream

    monkeypatch.setattr(stream, "STREAM_LAYERS", 3)
    out = archive_stream([(f"{n}/layer.tar", images.layer_tar([("file", f"etc/f{n}", b"x", 0o644)]))
                          for n in range(5)])
    with pytest.raises(InputError, match="more than 3 layers in one archive"):
        stream.layers_and_documents(out, tmp_path / "layers", "the image")
    assert len(list((tmp_path / "layers").iterdir())) == 3


def test_a_large_member_that_is_neither_a_layer_nor_a_document_is_refused(tmp_path, monkeypatch):

    from customops.errors import InputError
    from customops.image import stream

    monkeypatch.setattr(stream, "JSON_LIMIT", 1024)
    out = archive_stream([("0123/VERSION", b"0" * 4096)])
    with pytest.raises(InputError, match="4096 bytes of neither a layer nor a document"):
        stream.layers_and_documents(out, tmp_path / "layers", "the image")


def test_an_endless_image_id_is_read_no_further_than_an_id(tmp_path, monkeypatch):
    import time

    from customops.image.identity import inspected_id
    from customops.image.reference import parse

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexec yes sha256:00\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    started = time.monotonic()
    assert inspected_id(parse("docker-daemon:triton:test")) is None
    assert time.monotonic() - started < 30
