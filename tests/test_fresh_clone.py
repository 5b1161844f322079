"""The README's first command on a fresh clone of this repository, on a machine without gcc-multilib (#18).

The clone holds only what is committed (HEAD). The machine is simulated by PATH: a `gcc` and a `g++` that fail
every `-m32` build the way gcc does without gcc-multilib ("cannot find crti.o") and otherwise run the real ones,
and s390x/aarch64 `as`/`ld` that do not exist. The script under test is the clone's real scripts/example.sh; it
compiles the fixtures into the clone's own (empty) .fixture-cache and runs pip for real. The one thing provided
is the clone's .venv: a bare virtual environment that sees this test's own site-packages (a `.pth` line), with
pip offline (PIP_NO_INDEX), so that `pip install -e .` finds customops' dependencies installed instead of
downloading them: what is measured is the script, not the network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from test_check_example import readme_sample

ROOT = Path(__file__).resolve().parent.parent
STATUS_LINE = re.compile(r"(?s)(.*\n)\ncustomops check exited with status (\d+) \(.*\)\n")

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists() or not shutil.which("git"),
                                reason="needs git and a git checkout to clone")

FAILS_M32 = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = -m32 ]; then
    echo "/usr/bin/ld: cannot find crti.o: No such file or directory" >&2
    echo "collect2: error: ld returned 1 exit status" >&2
    exit 1
  fi
done
exec {real} "$@"
"""
NOT_FOUND = """#!/bin/sh
echo "$0: command not found" >&2
exit 127
"""


def no_multilib_path(bin_dir: Path) -> str:
    """A PATH on which gcc and g++ cannot build 32-bit code and the cross binutils are missing."""
    bin_dir.mkdir()
    for tool in ("gcc", "g++"):
        real = shutil.which(tool)
        assert real, f"{tool} is needed"
        (bin_dir / tool).write_text(FAILS_M32.format(real=real))
    for tool in ("s390x-linux-gnu-as", "s390x-linux-gnu-ld", "aarch64-linux-gnu-as", "aarch64-linux-gnu-ld"):
        (bin_dir / tool).write_text(NOT_FOUND)
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def script_env(path: str, cache: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": path, "COLUMNS": "80", "NO_COLOR": "1", "XDG_CACHE_HOME": str(cache),
           "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # pip's spelling of --no-build-isolation
    for name in ("FORCE_COLOR", "PYTHONPATH", "VIRTUAL_ENV", "CUSTOMOPS_CACHE_DIR", "PYTHON"):
        env.pop(name, None)
    return env


def readme_command(readme: str) -> str:
    """The README's first command: the first line of its first ```sh block, without the comment."""
    start = readme.index("```sh\n") + len("```sh\n")
    return readme[start:readme.index("\n", start)].partition("#")[0].strip()


def normalise(stdout: str, clone: Path) -> str:
    """What test_check_example.example_output does to the report: the fixture tree's hash and the checkout's
    path replaced by what the README shows."""
    (container,) = (clone / ".fixture-cache").glob("tree-*/container")
    shown = os.path.relpath(container, clone).replace(container.parent.name, "tree-…")
    return stdout.replace(str(container), shown).replace(str(clone) + "/", "")


class Clone:
    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.path = path
        self.env = env
        self.command = readme_command((path / "README.md").read_text())

    def run(self) -> tuple[subprocess.CompletedProcess[str], float]:
        start = time.monotonic()
        proc = subprocess.run(["bash", "-c", self.command], cwd=self.path, env=self.env, capture_output=True,
                              text=True, timeout=300)
        return proc, time.monotonic() - start


def make_venv(clone: Path) -> None:
    """A bare .venv whose interpreter also sees this test's site-packages (pip and customops' dependencies)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(clone / ".venv")], check=True)
    python = clone / ".venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))
    (Path(site) / "_test_fresh_clone_deps.pth").write_text("".join(f"{p}\n" for p in ours))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fresh")
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    make_venv(clone)
    repo = Clone(clone, script_env(no_multilib_path(tmp / "bin"), tmp / "cache"))
    proc, elapsed = repo.run()
    return repo, proc, elapsed


def test_the_simulated_machine_has_no_32_bit_or_cross_toolchain(tmp_path):
    """The fixture builder tries to build with a toolchain: `gcc --version` works, `gcc -m32` cannot link, so
    the 32-bit and foreign libraries are left out of the tree, without a traceback."""
    env = script_env(no_multilib_path(tmp_path / "bin"), tmp_path / "cache")
    assert subprocess.run(["gcc", "--version"], env=env, capture_output=True).returncode == 0
    code = ("import sys\nfrom pathlib import Path\nfrom fixtures.build import build, toolchain_available\n"
            "print(*(toolchain_available(t) for t in ('native', 'm32', 's390x', 'aarch64')))\n"
            "tree = build(Path(sys.argv[1]), only=('g/badc/libw.so', 'elf/libkinds32.so', 'elf/libbe.so',"
            " 'elf/libarm64.so', 'a/libfoo.so'))\n"
            "print(*sorted(str(p.relative_to(tree)) for p in tree.rglob('*.so')))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True False False False", "a/libfoo.so"]


def test_the_readme_command_works_on_a_fresh_clone_without_multilib(first_run):
    repo, proc, elapsed = first_run
    assert repo.command == "./scripts/example.sh"
    assert proc.returncode == 0, proc.stderr  # the script exits 0 when the check ran...
    match = STATUS_LINE.fullmatch(proc.stdout)
    assert match, proc.stdout
    assert match[2] == "1"  # ...and prints the check's own status last: the example is meant to fail
    readme = (repo.path / "README.md").read_text()
    start, end = readme_sample(readme)
    assert normalise(match[1], repo.path) == readme[start:end]
    # the slow first set-up says what it does, and builds nothing 32-bit or foreign
    assert "Traceback" not in proc.stderr
    assert "compiling" in proc.stderr and "installing customops" in proc.stderr, proc.stderr
    tree = next((repo.path / ".fixture-cache").glob("tree-*"))
    assert {p.name for p in tree.iterdir()} == {".complete", "container", "example", "fw", "py"}  # fw: libnvinfer.so.8,
    # py: the Python model's environment (its libstdc++, its extension module)
    assert elapsed < 90, f"first run took {elapsed:.1f} s"


def test_a_second_run_does_not_run_pip_again_until_pyproject_changes(first_run):
    repo, first, _ = first_run
    pip_log = repo.path / ".venv" / "pip.log"
    before = pip_log.stat().st_mtime_ns
    proc, elapsed = repo.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout
    assert proc.stderr == ""  # neither pip nor the compiler ran
    assert pip_log.stat().st_mtime_ns == before
    assert elapsed < 15, f"second run took {elapsed:.1f} s"  # ~1 s; the first run's pip alone takes longer

    pyproject = repo.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# changed\n")
    proc, _ = repo.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout
    assert "installing customops" in proc.stderr and "compiling" not in proc.stderr, proc.stderr
