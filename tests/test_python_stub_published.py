"""The Python backend's stub with this machine's real libpython, and a real published wheel in its execution
environment (ujson 5.10.0, fetched with pip download: one extension module linking libstdc++). The stub is the
fixture stub linked against this interpreter's libpython3.X.so.1.0 and put where the backend has it; the verdicts are
confirmed by the real ld.so in the container and, for the import, by this real Python."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_python_stub import STUB, PythonRepo, stub_findings

from fixtures import wheels
from fixtures.build import SRC
from fixtures.real_container import place_libpython

UJSON = "5.10.0"
THIS = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "3.12" if THIS != "3.12" else "3.11"


def module_file(python: str) -> str:
    return f"ujson.cpython-{python.replace('.', '')}-x86_64-linux-gnu.so"


def ujson(python: str) -> Path:
    try:
        return wheels.extract("ujson", UJSON, (module_file(python),), python=python)[module_file(python)]
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def real_python_repo(tree, tmp_path) -> PythonRepo:
    """The fixture container whose Python backend's stub links this interpreter's libpython, as a container with
    this Python has it."""
    repo = PythonRepo(tree, tmp_path)
    system = repo.root / "usr" / "lib" / "x86_64-linux-gnu"
    libpython = place_libpython(repo.root, system)
    stub = repo.root / STUB.lstrip("/")
    stub.unlink()
    subprocess.run(["g++", "-O1", "-o", str(stub), str(SRC / "python_stub.cpp"), f"-L{libpython.parent}",
                    f"-l:{libpython.name}"], check=True, capture_output=True)
    (repo.root / "usr" / "lib" / f"python{THIS}").mkdir(parents=True, exist_ok=True)
    (repo.root / "usr" / "lib" / f"python{THIS}" / "os.py").write_text("")
    return repo


def test_a_published_wheel_for_the_stubs_python_imports_in_the_stub(real_python_repo):
    env = real_python_repo.environment(python=THIS)
    site = env / "lib" / f"python{THIS}" / "site-packages"
    shutil.copy(ujson(THIS), site / module_file(THIS))
    real_python_repo.model("pm", "import ujson\n", env)
    result = real_python_repo.check()
    assert stub_findings(result) == []
    module = f"/tmp/python_env_XXXXXX/0/lib/python{THIS}/site-packages/{module_file(THIS)}"
    (step, outcome), = [pair for run in result.stubs for pair in run.outcomes]
    assert step.path == module and outcome.ok and [c.symbol for c in outcome.calls if c.status == "ok"] == [
        "PyInit_ujson"]
    oracle = real_python_repo.in_the_stub(env, (module,), call=False)
    assert oracle.returncode == 0 and oracle.dlopens == [(module, None)]
    imported = subprocess.run([sys.executable, "-S", "-c", "import ujson; print(ujson.dumps([1]))"],
                              env={"PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert imported.stdout.strip() == "[1]", imported.stderr  # this Python imports it, as the stub's would


def test_a_cp312_wheel_in_the_environment_of_a_cp311_stub(real_python_repo):
    """A wheel for another CPython in the environment: the environment is made for that Python, not the stub's."""
    env = real_python_repo.environment(python=OTHER)
    shutil.copy(ujson(OTHER), env / "lib" / f"python{OTHER}" / "site-packages" / module_file(OTHER))
    real_python_repo.model("pm", "import ujson\n", env)
    (finding,) = stub_findings(real_python_repo.check())
    assert finding.code == "CO311" and f"Python {THIS}" in finding.message and f"Python {OTHER}" in finding.message
    imported = subprocess.run([sys.executable, "-S", "-c", "import ujson"], capture_output=True, text=True,
                              env={"PYTHONPATH": str(env / "lib" / f"python{OTHER}" / "site-packages")})
    assert "No module named 'ujson'" in imported.stderr  # this Python does not even see a cp312 module


def test_a_published_wheel_needing_libstdcxx_gets_the_environments_older_one(real_python_repo, tree):
    """ujson links libstdc++; with the environment's GCC 11 libstdc++ first on the path, the stub itself stops
    first (it needs GLIBCXX_3.4.30): the one finding is the stub's, as the real ld.so says."""
    env = real_python_repo.environment(python=THIS, libstdcxx="py/oldcxx/libstdc++.so.6")
    shutil.copy(ujson(THIS), env / "lib" / f"python{THIS}" / "site-packages" / module_file(THIS))
    real_python_repo.model("pm", "import ujson\n", env)
    (finding,) = stub_findings(real_python_repo.check())
    assert finding.code == "CO306" and finding.version == "GLIBCXX_3.4.30"
    oracle = real_python_repo.in_the_stub(env)
    assert oracle.stderr.strip() == finding.predicted
