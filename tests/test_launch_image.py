"""`customops launch --image docker-daemon:NAME -- tritonserver ...` (issue #31): the check against the image, then
`docker run` of that image with exactly what the check modelled: the variables customops sets (over the image's own
LD_PRELOAD, where --existing-preload puts it), the repository of this machine mounted read-only at /models and the
server told so, the TensorRT plugins added. A `docker` of the tests' own records what it is asked to run (no daemon
runs here); a failing check starts nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image_tools import EXAMPLE, ROOT, container, example, fake_daemon

from fixtures import images

__all__ = ["container", "example"]  # fixtures of image_tools, used here


@pytest.fixture
def daemon(example: tuple[Path, Path], tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(the environment with a `docker` whose save gives the example image, whose run records its argv), the
    record."""
    container, _ = example
    archive = images.docker_archive(tmp_path / "image.tar", [images.tree(container)],
                                    env={"LD_PRELOAD": "/opt/vendor/libpre.so", "PATH": "/usr/bin:/bin"})
    ran = tmp_path / "ran"
    env = fake_daemon(tmp_path / "bin", f'[ "$1" = save ] && exec cat {archive}\n[ "$1" = image ] && exit 1\n'
                                        f'printf "%s\\n" "$@" > {ran}\nexit 0')
    return {**env, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}, ran


def launch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "customops", "launch", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


def test_the_server_runs_in_the_image_with_the_variables_and_mounts_the_check_modelled(example, daemon):
    env, ran = daemon
    _, repository = example
    started = launch(env, "--image", "docker-daemon:triton:test", "--warn-only", "--run-arg=--gpus=all", "--",
                     "tritonserver", f"--model-repository={repository}")
    assert started.returncode == 0, started.stderr
    argv = ran.read_text().splitlines()
    checked = json.loads(subprocess.run(
        [sys.executable, "-m", "customops", "check", str(repository), "--image", "docker-daemon:triton:test",
         "--format", "json"], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT).stdout)["plan"]
    image_at = argv.index("triton:test")
    assert argv[:4] == ["run", "--rm", "--platform=linux/amd64", "--gpus=all"]  # the platform checked
    assert f"--volume={repository}:/models:ro" in argv[:image_at]
    # customops' entries, which the check's plan lists, then the image's own, as the check's scenario merges them
    assert f"--env=LD_PRELOAD={checked['ld_preload']}:/opt/vendor/libpre.so" in argv[:image_at]
    # the server told where its repository is mounted, and given the plugins the check's plan adds
    assert argv[image_at + 1:] == ["tritonserver", "--model-repository=/models", *checked["server_args"]]
    assert checked["server_args"] and all(a.startswith("--backend-config=tensorrt,") for a in checked["server_args"])


def test_the_image_run_is_the_one_checked_by_its_id(example, tmp_path):
    """docker run resolves a name again when it runs (a re-tag, a pull): the ID the daemon gave the image that was
    checked is what runs."""
    container, repository = example
    archive = images.docker_archive(tmp_path / "image.tar", [images.tree(container)])
    ran = tmp_path / "ran"
    image_id = "sha256:" + "ab" * 32
    env = fake_daemon(tmp_path / "bin", f'[ "$1" = save ] && exec cat {archive}\n'
                                        f'[ "$1 $2" = "image inspect" ] && echo {image_id} && exit 0\n'
                                        f'printf "%s\\n" "$@" > {ran}\nexit 0')
    started = launch({**env, "CUSTOMOPS_CACHE_DIR": str(tmp_path / "cache")}, "--image", "docker-daemon:triton:test",
                     "--warn-only", "--", "tritonserver", f"--model-repository={repository}")
    assert started.returncode == 0, started.stderr
    argv = ran.read_text().splitlines()
    assert image_id in argv and "triton:test" not in argv


def test_a_failing_check_starts_nothing(example, daemon):
    env, ran = daemon
    _, repository = example
    refused = launch(env, "--image", "docker-daemon:triton:test", "--", "tritonserver",
                     f"--model-repository={repository}")
    assert refused.returncode == 1 and "not starting the server" in refused.stderr
    assert not ran.exists()


def test_existing_preload_first_puts_the_images_own_preload_first(example, daemon):
    env, ran = daemon
    _, repository = example
    dry = launch(env, "--image", "docker-daemon:triton:test", "--warn-only", "--dry-run", "--existing-preload",
                 "first", "--", "tritonserver", f"--model-repository={repository}")
    assert dry.returncode == 0 and not ran.exists(), dry.stderr
    assert "--env=LD_PRELOAD=/opt/vendor/libpre.so:/models/" in dry.stdout


def test_an_image_no_daemon_holds_is_checked_by_check_not_started(tmp_path):
    archive = images.docker_archive(tmp_path / "image.tar", [[("file", "etc/os-release", b"ID=x\n", 0o644)]])
    refused = launch({**os.environ, "PYTHONPATH": str(ROOT)}, "--image", f"docker-archive:{archive}", "--",
                     "tritonserver", f"--model-repository={EXAMPLE}")
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert "docker load" in line and "docker-daemon:NAME" in line


def test_run_args_without_an_image_are_a_usage_error():
    refused = launch({**os.environ, "PYTHONPATH": str(ROOT)}, "--run-arg=--gpus=all", "--", "tritonserver",
                     "--model-repository=/models")
    assert refused.returncode == 2 and "--run-arg" in refused.stderr


pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell for the test's docker")
