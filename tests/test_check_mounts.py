"""Checking from CI: one repository as a checkout, the container as a root or a profile, mapped onto each
other the way `docker run -v HOST:CONTAINER` does; the verdicts do not depend on where it is checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops.app.check import default_mounts, run_check
from customops.triton.container import from_root, read_profile, write_profile
from customops.triton.manifest import load_manifest
from fixtures.example import install

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "model_repository"


def verdicts(result) -> list:  # type: ignore[no-untyped-def]
    return sorted((f.code, f.model, f.predicted, f.file and os.path.basename(f.file)) for f in result.findings)


@pytest.fixture
def three_places(tree, tmp_path):
    """The example repository inside a container root (at /models), and the same as a checkout outside it."""
    root = tmp_path / "root"
    shutil.copytree(tree / "container", root, symlinks=True)
    shutil.copytree(EXAMPLE, root / "models", ignore=shutil.ignore_patterns("*.so"))
    install(root / "models")
    checkout = tmp_path / "checkout" / "model_repository"
    shutil.copytree(root / "models", checkout)
    return root, checkout


def test_one_repository_checked_three_ways_gives_the_same_verdicts(three_places, tmp_path):
    root, checkout = three_places
    inside = run_check([str(root / "models")], load_manifest(str(root / "models/customops.toml")),
                       from_root(str(root)), ())
    container = from_root(str(root))
    mounted = run_check([str(checkout)], load_manifest(str(checkout / "customops.toml")), container,
                        default_mounts([str(checkout)], container, ((("/models", str(checkout))),)))
    profile = tmp_path / "customops-profile.json"
    write_profile(container, str(profile))
    shutil.rmtree(root)
    via_profile = read_profile(str(profile), str(tmp_path / "cache"))
    profiled = run_check([str(checkout)], load_manifest(str(checkout / "customops.toml")), via_profile,
                         default_mounts([str(checkout)], via_profile))
    assert verdicts(inside) == verdicts(mounted) == verdicts(profiled)
    assert len(verdicts(inside)) == 10  # one CO501 for the TensorRT 8 plugin (no CO302 beside it); the stub CO306
    assert "mounted" in " ".join(profiled.notes) and str(checkout) in " ".join(profiled.notes)


def test_a_library_under_another_prefix_gets_the_exact_mount_that_would_fix_it(three_places):
    root, checkout = three_places
    shutil.rmtree(root / "models")  # only the checkout has the repository, mounted at the wrong place
    container = from_root(str(root))
    mounts = default_mounts([str(checkout)], container, (("/srv/models", str(checkout)),))
    result = run_check([str(checkout)], load_manifest(str(checkout / "customops.toml")), container, mounts)
    missing = [f for f in result.findings if f.code == "CO301" and f.model == "text_tf"]
    assert missing and f"--mount {checkout}:/models" in missing[0].message
    assert missing[0].file == str(checkout / "text_tf" / "config.pbtxt")  # the file that names the library
    assert "/models/text_tf/ops/libtf_op.so" in missing[0].message


def test_the_profile_beside_the_repository_is_found_and_named(three_places, tmp_path):
    root, checkout = three_places
    write_profile(from_root(str(root)), str(checkout / "customops-profile.json"))
    if os.path.isdir("/opt/tritonserver"):
        pytest.skip("this machine has /opt/tritonserver, which check prefers")
    env = {**os.environ, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(checkout), "--format", "json"],
                         capture_output=True, text=True, env=env)
    report = json.loads(out.stdout)
    assert report["container"]["source"] == "profile"
    assert any("customops-profile.json" in n for n in report["notes"])
    assert {f["code"] for f in report["findings"]} >= {"CO308", "CO504", "CO202"}


def test_recorded_server_arguments_decide_where_the_repository_is_mounted(three_places, tmp_path):
    root, checkout = three_places
    profile = tmp_path / "p.json"
    write_profile(from_root(str(root)), str(profile), ("--model-repository=/srv/models",))
    container = read_profile(str(profile), str(tmp_path / "cache"))
    assert default_mounts([str(checkout)], container) == (("/srv/models", str(checkout)),)


def test_sarif_locations_are_relative_to_the_checkout(three_places):
    root, checkout = three_places
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(checkout), "--container-root", str(root),
                          "--mount", f"{checkout}:/models", "--format", "sarif"], capture_output=True, text=True)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in json.loads(out.stdout)["runs"][0]["results"] if "locations" in r]
    assert uris and all(not u.startswith("/") for u in uris)
    assert "detector_ort/config.pbtxt" in uris and "tokenizer_ort/config.pbtxt" in uris
    related = [r["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"]
               for r in json.loads(out.stdout)["runs"][0]["results"] if "relatedLocations" in r]
    assert "detector_ort/ops/libort_noentry.so" in related


def test_launch_dry_run_maps_the_repository_through_a_mount(three_places):
    root, checkout = three_places
    out = subprocess.run([sys.executable, "-m", "customops", "launch", "--container-root", str(root), "--mount",
                          f"{checkout}:/models", "--warn-only", "--dry-run", "--", "tritonserver",
                          "--model-repository=/models"], capture_output=True, text=True)
    assert "LD_PRELOAD=/models/ranker_pt/ops/libc10_interposer.so:/models/ranker_pt/ops/libtorch_op.so" in out.stdout


def test_a_merged_usr_container_checked_through_its_profile_gives_the_same_verdicts(three_places, tmp_path):
    """Ubuntu's /lib -> usr/lib (every current Triton image): the profile records the link and the one real
    directory, and the skeleton resolves the search through it as the container does."""
    root, checkout = three_places
    for name in os.listdir(root / "lib" / "x86_64-linux-gnu"):
        shutil.move(str(root / "lib" / "x86_64-linux-gnu" / name), str(root / "usr" / "lib" / "x86_64-linux-gnu"))
    shutil.rmtree(root / "lib")
    (root / "lib").symlink_to("usr/lib")
    container = from_root(str(root))
    mounts = default_mounts([str(checkout)], container, (("/models", str(checkout)),))
    direct = run_check([str(checkout)], load_manifest(str(checkout / "customops.toml")), container, mounts)
    profile = tmp_path / "customops-profile.json"
    write_profile(container, str(profile))
    recorded = json.loads(profile.read_text())
    assert recorded["links"]["/lib"] == "usr/lib"
    assert not any(p.startswith("/lib/") for p in (*recorded["files"], *recorded["directories"]))
    via_profile = read_profile(str(profile), str(tmp_path / "cache"))
    profiled = run_check([str(checkout)], load_manifest(str(checkout / "customops.toml")), via_profile,
                         default_mounts([str(checkout)], via_profile))
    assert verdicts(direct) == verdicts(profiled) and len(verdicts(direct)) == 10


def test_the_directory_holding_two_mount_points_exists_as_docker_creates_it(tree, tmp_path):
    """Two repositories of this machine are mounted at /models/a and /models/b; the container has no
    /models, and docker creates it: an op library under one mount and a backend under the other are found."""
    (tmp_path / "a" / "ort" / "1").mkdir(parents=True)
    shutil.copy2(tree / "example" / "libort_op.so", tmp_path / "a" / "ort" / "libop.so")
    (tmp_path / "a" / "ort" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmodel_operations { op_library_filename: "/models/a/ort/libop.so" }\n')
    (tmp_path / "b" / "custom" / "1").mkdir(parents=True)
    shutil.copy2(tree / "example" / "libtriton_mybackend.so", tmp_path / "b" / "custom" / "libtriton_mybackend.so")
    (tmp_path / "b" / "custom" / "config.pbtxt").write_text('backend: "mybackend"\n')
    assert not (tree / "container" / "models").exists()
    repositories = [str(tmp_path / "a"), str(tmp_path / "b")]
    container = from_root(str(tree / "container"))
    mounts = default_mounts(repositories, container)
    assert [c for c, _h in mounts] == ["/models/a", "/models/b"]
    result = run_check(repositories, load_manifest(None), container, mounts)
    assert verdicts(result) == []
    loaded = {s.path for s in result.plan.dlopens}
    assert loaded >= {"/models/a/ort/libop.so", "/models/b/custom/libtriton_mybackend.so"}
