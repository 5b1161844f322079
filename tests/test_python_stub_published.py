"""The Python backend's stub with this machine's real libpython, and a real published wheel in its execution
environment (ujson 5.10.0, fetched with pip download: one extension module linking libstdc++). The stub is the
fixture stub linked against this interpreter's libpython3.X.so.1.0 and put where the backend has it; the verdicts are
confirmed by the real ld.so in the container and, for the import, by this real Python."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
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


# -- --probe: the modules imported by the stub's Python, contained ---------------------------------------------

NEEDS_DEP = """#include <Python.h>
extern int dep_fn(void);
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "needs_dep", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_needs_dep(void) { (void)dep_fn(); return PyModule_Create(&definition); }
"""


def real_extension(tmp_path: Path, tree: Path) -> Path:
    """An extension module of this interpreter (its Python.h), linking a library of its own (libdep.so)."""
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        pytest.skip(f"needs this interpreter's headers ({include}/Python.h; on Debian: apt-get install python3-dev)")
    source = tmp_path / "needs_dep.c"
    source.write_text(NEEDS_DEP)
    out = tmp_path / module_file(THIS).replace("ujson", "needs_dep")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(source),
                    f"-L{tree / 'py'}", "-l:libdep.so"], check=True, capture_output=True)
    return out


def probed(repo: PythonRepo):  # type: ignore[no-untyped-def]
    from customops.app.check import run_check
    from customops.probe.groups import ProbeSettings
    from customops.triton.container import from_root
    from customops.triton.manifest import load_manifest

    settings = ProbeSettings(sys.executable, None, cache_dir=repo.tmp / "probe-cache")
    return run_check([str(repo.models)], load_manifest(None), from_root(str(repo.root)), (), probe=settings,
                     cache_dir=str(repo.tmp / "cache"))


def test_probe_imports_a_published_wheels_module_with_the_stubs_python(real_python_repo):
    env = real_python_repo.environment(python=THIS)
    shutil.copy(ujson(THIS), env / "lib" / f"python{THIS}" / "site-packages" / module_file(THIS))
    real_python_repo.model("pm", "import ujson\n", env)
    result = probed(real_python_repo)
    (group,) = [g for g in result.probes if g.model == "pm"]
    assert [r.status.value for r in group.alone] == ["loaded"] and group.version.startswith(THIS)
    assert stub_findings(result) == [] and not [f for f in result.findings if f.code == "CO409"]


def test_probe_confirms_an_extension_modules_missing_dependency(real_python_repo, tree, tmp_path):
    env = real_python_repo.environment(python=THIS)
    site = env / "lib" / f"python{THIS}" / "site-packages"
    module = real_extension(tmp_path, tree)
    shutil.copy(module, site / module.name)
    real_python_repo.model("pm", "import needs_dep\n", env)
    result = probed(real_python_repo)
    (finding,) = stub_findings(result)
    assert finding.code == "CO302" and finding.predicted == "ImportError: libdep.so: cannot open shared object " \
                                                            "file: No such file or directory"
    assert any(e.startswith("probe (python ") and "libdep.so: cannot open shared object file" in e
               for e in finding.evidence), finding.evidence
    (env / "lib" / "libdep.so").write_bytes((tree / "py" / "libdep.so").read_bytes())  # shipped: it loads, for real
    shutil.rmtree(real_python_repo.models / "pm")
    real_python_repo.model("pm", "import needs_dep\n", env)
    result = probed(real_python_repo)
    assert stub_findings(result) == []
    (group,) = [g for g in result.probes if g.model == "pm"]
    assert [r.status.value for r in group.alone] == ["loaded"]


def test_probe_with_another_python_than_the_stubs_says_it_cannot(tree, tmp_path):
    """The fixture container's stub runs Python 3.12; probing with this interpreter is not that Python: the probe
    says so, and the environment's own python3 is never run."""
    repo = PythonRepo(tree, tmp_path)
    env = repo.environment(modules={"fastops": "py/fastops.so"})
    repo.model("pm", "import fastops\n", env)
    result = probed(repo)
    assert any(f"it is Python {THIS}; the stub's is 3.12" in n for n in result.notes), result.notes


def test_customops_probe_imports_an_extension_module_with_the_python_given(tmp_path, tree):
    module = real_extension(tmp_path, tree)
    command = [sys.executable, "-m", "customops", "probe", "--framework", "python", str(module), "--format", "json"]
    failed = json.loads(subprocess.run(command, capture_output=True, text=True).stdout)
    assert failed[0]["status"] == "failed" and "libdep.so: cannot open shared object file" in failed[0]["message"]
    published = [sys.executable, "-m", "customops", "probe", "--framework", "python", str(ujson(THIS)), "--format",
                 "json"]
    loaded = json.loads(subprocess.run(published, capture_output=True, text=True).stdout)
    assert loaded[0]["status"] == "loaded"
