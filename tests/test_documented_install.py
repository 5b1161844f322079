"""The install commands the documents give, run as they are written, each into a fresh virtual environment and
ending with `customops --version`: README's (the wheel built in a checkout of the commit you want) and docs/ci.md's
(the wheel of a checkout of the commit CUSTOMOPS_REF names, which every CI example runs line for line:
tests/test_deployment_files.py holds them equal).

The repository they install from is a clone of this checkout with the working tree's changes committed on top (what
is tested is the tree as it is), plus one later commit that changes the version: the pinned commit, not the branch's
tip, is what must get installed. docs/ci.md's URL is pointed at the clone and its /opt paths at a scratch directory.

pip runs offline: no index, no build isolation (PIP_NO_BUILD_ISOLATION=0 is pip's spelling of --no-build-isolation),
and this test's environment on PYTHONPATH, pip itself left out, so that the fresh environment's own pip runs while
the build backend (setuptools >= 77) and customops' dependencies come from here. What is measured is the commands,
not the network. One more run, where the package index answers, takes docs/ci.md's commands with nothing provided:
the build requirement and the pinned dependencies come from the index, as users get them (about 15 s).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from test_deployment_files import PROJECT_URL, pins_for, sh_block

ROOT = Path(__file__).resolve().parent.parent
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
LATER = "9.9.9"  # the version of the commit after the pinned one

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists() or not shutil.which("git"),
                                reason="needs git and a git checkout to clone")


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def git(*argv: str | Path, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return run("git", *argv, cwd=cwd, env=env).stdout.strip()


def version_of(tree: Path) -> str:
    (version,) = re.findall(r'^__version__ = "(.+)"$', (tree / "customops" / "__init__.py").read_text(), re.MULTILINE)
    return version


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A clone of this checkout whose commit `pinned` is the working tree (tracked files and the untracked ones git
    does not ignore), followed by a commit that changes the version: (the clone, pinned, the pinned version)."""
    clone = tmp_path_factory.mktemp("repository") / "customops"
    git("clone", "-q", ROOT, clone, cwd=ROOT)
    for name in filter(None, git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")):
        source, target = ROOT / name, clone / name
        if source.is_file() or source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        elif not source.exists():  # deleted in the working tree
            target.unlink(missing_ok=True)
    git("add", "-A", cwd=clone)
    git("commit", "-q", "--allow-empty", "-m", "the working tree", cwd=clone)
    pinned, version = git("rev-parse", "HEAD", cwd=clone), version_of(clone)
    init = clone / "customops" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{version}"', f'__version__ = "{LATER}"'))
    git("commit", "-q", "-am", "a later version", cwd=clone)
    assert version_of(clone) == LATER
    return clone, pinned, version


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PIP_USER")}
    # `python3` is this test's interpreter: the fresh environment can then use this one's packages
    return {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NO_COLOR": "1"}


def offline_env(scratch: Path) -> dict[str, str]:
    """pip with no index and no build isolation; this environment's packages, but not its pip, on PYTHONPATH."""
    pins = pins_for(PYTHON)
    differ = {name: (metadata.version(name), pin) for name, pin in pins.items() if metadata.version(name) != pin}
    if differ:  # pip would then need the index to install the pinned versions
        pytest.skip(f"this environment's dependencies are not constraints.txt's pins (installed, pinned): {differ}")
    site = scratch / "site-packages"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not re.match(r"pip(-[\d.]+\.dist-info)?$|.*customops|.*\.pth$", entry.name):
            (site / entry.name).symlink_to(entry)
    return {**clean_env(), "PYTHONPATH": str(site), "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
            "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}


def readme_install() -> str:
    return sh_block((ROOT / "README.md").read_text(), "Installing customops elsewhere")


def ci_install() -> str:
    return sh_block((ROOT / "docs" / "ci.md").read_text(), "## Installing customops")


def in_scratch(script: str, scratch: Path, url: str | None = None) -> str:
    """The commands with /opt (where they install) under `scratch`, and the repository's URL replaced by `url`."""
    assert "/opt/customops" in script, script
    script = script.replace("/opt/", f"{scratch}/opt/")
    if url:
        assert PROJECT_URL in script, script
        script = script.replace(PROJECT_URL, url)
    (scratch / "opt").mkdir(parents=True, exist_ok=True)
    return script


def installed(venv: Path, env: dict[str, str]) -> Path:
    """Where the environment's customops is imported from."""
    code = "import customops; print(customops.__file__)"
    return Path(run(venv / "bin" / "python", "-c", code, cwd=venv, env=env).stdout.strip())


def test_the_readme_install_builds_the_wheel_in_a_checkout_and_installs_it(repository, tmp_path):
    clone, pinned, version = repository
    checkout = tmp_path / "checkout"  # a checkout of the commit you want, as the README says
    git("clone", "-q", clone, checkout, cwd=tmp_path)
    git("checkout", "-q", pinned, cwd=checkout)
    env = offline_env(tmp_path)
    done = run("sh", "-eu", "-c", in_scratch(readme_install(), tmp_path), cwd=checkout, env=env)
    assert done.stdout.splitlines()[-1] == f"customops {version}"
    venv = tmp_path / "opt" / "customops"
    assert installed(venv, env).is_relative_to(venv)  # from the wheel, not from the checkout or this environment
    assert list((checkout / "dist").glob("customops-*.whl"))


def test_the_ci_install_builds_and_installs_the_wheel_of_the_pinned_commit(repository, tmp_path):
    clone, pinned, version = repository
    env = {**offline_env(tmp_path), "CUSTOMOPS_REF": pinned}
    done = run("sh", "-eu", "-c", in_scratch(ci_install(), tmp_path, url=str(clone)), cwd=tmp_path, env=env)
    assert done.stdout.splitlines()[-1] == f"customops {version}"  # the pinned commit's, not LATER (the tip's)
    src, venv = tmp_path / "opt" / "customops-src", tmp_path / "opt" / "customops"
    assert git("rev-parse", "HEAD", cwd=src) == pinned
    assert installed(venv, env).is_relative_to(venv)


def index_answers(scratch: Path, env: dict[str, str]) -> bool:
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
                            "--timeout", "10", "--retries", "0", "-d", scratch / "probe", "cxxfilt==0.3.0"],
                           env=env, capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


def test_the_ci_install_gets_the_build_requirement_and_the_pinned_dependencies_from_the_index(repository, tmp_path):
    clone, pinned, version = repository
    env = {**clean_env(), "CUSTOMOPS_REF": pinned}  # the user's pip configuration (an index mirror) stays
    if not index_answers(tmp_path, env):
        pytest.skip("the package index does not answer (pip download cxxfilt failed)")
    done = run("sh", "-eu", "-c", in_scratch(ci_install(), tmp_path, url=str(clone)), cwd=tmp_path, env=env)
    assert done.stdout.splitlines()[-1] == f"customops {version}"
    venv = tmp_path / "opt" / "customops"
    frozen = run(venv / "bin" / "python", "-m", "pip", "list", "--format=freeze", "--exclude", "customops",
                 "--exclude", "pip", "--exclude", "setuptools", cwd=tmp_path, env=env).stdout.split()
    got = {re.sub(r"[-_.]+", "-", name).lower(): pin for name, _, pin in (line.partition("==") for line in frozen)}
    assert got == pins_for(PYTHON)  # exactly the constraints' pins, nothing unpinned
