"""Hostile images (issue #31): each is refused in one line naming the image and the reason, exit 2, or read
without anything written outside customops' cache: members that climb out of the root, links out, device nodes,
FIFOs and setuid files, members claiming more than a layer may hold, sparse members, layers that lie about their
digest or end early, too many layers, an index that lists itself, configurations of another shape, compressed
streams that are not what they claim, and streams holding more JSON than an image has."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

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
    import io

    from customops.errors import InputError
    from customops.image import layers

    monkeypatch.setattr(layers, "LAYER_LIMIT", 1 << 20)
    bomb = images.zstd_frames(images.layer_tar([("file", f"usr/zeros{n}", b"\0" * (512 << 10), 0o644)
                                                for n in range(16)]))
    assert len(bomb) < 4096
    with pytest.raises(InputError, match="more than 1 MB uncompressed"):
        layers.keep_layer(io.BytesIO(bomb), tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


def test_a_stream_holding_more_json_than_an_image_has_is_refused(tmp_path, monkeypatch):
    import io
    import tarfile

    from customops.errors import InputError
    from customops.image import stream

    monkeypatch.setattr(stream, "DOCUMENTS_LIMIT", 4096)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for n in range(8):
            body = json.dumps({"pad": "x" * 1000}).encode()
            info = tarfile.TarInfo(f"doc{n}.json")
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    out.seek(0)
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
