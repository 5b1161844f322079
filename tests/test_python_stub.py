"""The Python backend's stub processes: each model the backend serves runs in a stub of its own, started with the
environment the backend gives it (EXECUTION_ENV_PATH's lib/ first on LD_LIBRARY_PATH), which then imports the model's
extension modules. Each verdict is confirmed by the real ld.so running the fixture stub (linked as the real one is:
libpython3.12, libstdc++ with GLIBCXX_3.4.30, libgcc_s, libc) inside the container, with that environment unpacked
where the backend unpacks it."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from oracle import OracleRun, run_in_container

from customops.app.check import run_check
from customops.triton.container import from_root
from customops.triton.manifest import load_manifest
from customops.triton.python_stub import EXTRACTED, written_path

STUB = "/opt/tritonserver/backends/python/triton_python_backend_stub"
CONFIG = 'backend: "python"\n'
ENV_PARAMETER = 'parameters: {{ key: "EXECUTION_ENV_PATH", value: {{ string_value: "{}" }} }}\n'
EXTENSION = ".cpython-312-x86_64-linux-gnu.so"


@dataclass
class Plan:
    """What the oracle runs in the stub: the extension modules, each dlopen()ed then its PyInit_ looked up."""

    dlopens: tuple
    ld_preload: str = ""
    library_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Module:
    path: str
    entry_points: tuple[str, ...]


class PythonRepo:
    """A model repository at /models inside a private copy of the fixture container, its models served by the Python
    backend, each with an execution environment made here."""

    def __init__(self, tree: Path, tmp: Path) -> None:
        self.tree, self.tmp = tree, tmp
        self.root = tmp / "root"
        shutil.copytree(tree / "container", self.root, symlinks=True)
        self.models = self.root / "models"
        self.models.mkdir()

    def environment(self, name: str = "env", python: str = "3.12", libstdcxx: str | None = None,
                    modules: dict[str, str] | None = None, libs: dict[str, str] | None = None) -> Path:
        """A conda-pack-like environment: bin/activate, lib/python3.X with its site-packages, `libs` in lib/."""
        env = self.tmp / name
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "activate").write_text("# conda-pack's activate\n")
        (env / "bin" / "python3").write_text("")
        site = env / "lib" / f"python{python}" / "site-packages"
        site.mkdir(parents=True)
        (site.parent / "os.py").write_text("")
        if libstdcxx:
            shutil.copy(self.tree / libstdcxx, env / "lib" / "libstdc++.so.6")
        for module, fixture in (modules or {}).items():
            shutil.copy(self.tree / fixture, site / f"{module}{EXTENSION}")
        for lib, fixture in (libs or {}).items():
            shutil.copy(self.tree / fixture, env / "lib" / lib)
        return env

    def model(self, name: str, model_py: str, env: Path | None = None, packed: bool = True,
              written: str | None = None) -> Path:
        directory = self.models / name
        (directory / "1").mkdir(parents=True)
        (directory / "1" / "model.py").write_text(model_py)
        config = CONFIG
        if env is not None:
            if packed:
                with tarfile.open(directory / "env.tar.gz", "w:gz") as archive:
                    archive.add(env, arcname=".")
                written = written or "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
            else:
                shutil.copytree(env, directory / "env")
                written = written or "$$TRITON_MODEL_DIRECTORY/env"
        if written is not None:
            config += ENV_PARAMETER.format(written)
        (directory / "config.pbtxt").write_text(config)
        return directory

    def check(self):  # type: ignore[no-untyped-def]
        return run_check([str(self.models)], load_manifest(None), from_root(str(self.root)), (),
                         cache_dir=str(self.tmp / "cache"))

    def in_the_stub(self, env: Path | None, modules: tuple[str, ...] = (), program: str = STUB,
                    call: bool = True) -> OracleRun:
        """The real ld.so running the stub in the container as the backend starts it: the environment unpacked at
        /tmp/python_env_XXXXXX/0, its lib/ twice before the server's LD_LIBRARY_PATH, the modules loaded (and, with
        `call`, their PyInit_ called: a real module's needs an interpreter running)."""
        extra: dict[str, str] = {}
        if env is not None:
            unpacked = self.root / EXTRACTED.lstrip("/") / "0"
            shutil.copytree(env, unpacked, dirs_exist_ok=True)
            extra["LD_LIBRARY_PATH"] = f"{EXTRACTED}/0/lib:{EXTRACTED}/0/lib"
        steps = tuple(Module(m, (f"PyInit_{os.path.basename(m).split('.')[0]}",) if call else ()) for m in modules)
        return run_in_container(str(self.root), Plan(steps), extra, program=program)


@pytest.fixture
def python_repo(tree, tmp_path) -> PythonRepo:
    return PythonRepo(tree, tmp_path)


def stub_findings(result):  # type: ignore[no-untyped-def]
    return [f for f in result.findings if f.code in ("CO302", "CO304", "CO306", "CO310", "CO311", "CO312")]


def site_module(module: str) -> str:
    return f"{EXTRACTED}/0/lib/python3.12/site-packages/{module}{EXTENSION}"


# -- the user reports, reproduced ----------------------------------------------------------------------------


def test_server_5933_an_environment_with_an_older_libstdcxx_stops_the_stub(python_repo):
    """server#5933 (23.05), again #7913 (24.12): conda-pack puts the environment's libstdc++ first on the stub's
    LD_LIBRARY_PATH, and it lacks the GLIBCXX node the stub needs: the stub never starts."""
    env = python_repo.environment(libstdcxx="py/oldcxx/libstdc++.so.6")
    python_repo.model("pm", "import triton_python_backend_utils as pb_utils\n", env)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO306" and finding.model == "pm" and finding.version == "GLIBCXX_3.4.30"
    assert f"{EXTRACTED}/0/lib/libstdc++.so.6" in finding.message
    assert "conda install -c conda-forge 'libstdcxx-ng>=12'" in finding.hint
    assert finding.evidence[0].endswith("failed to load 'pm' version 1: Internal: Stub process '' is not healthy.")
    oracle = python_repo.in_the_stub(env)
    assert oracle.returncode == 1 and oracle.stderr.strip() == finding.predicted


def test_server_4398_a_stub_built_for_another_python_finds_no_libpython(python_repo):
    """server#4398: a stub built for Python 3.10 in a container whose Python is 3.12: `libpython3.10.so.1.0:
    cannot open shared object file`. The model directory's own stub is the one the backend runs."""
    model = python_repo.model("pm", "x = 1\n")
    shutil.copy(python_repo.tree / "py/py310/triton_python_backend_stub", model / "triton_python_backend_stub")
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO302" and "libpython3.10.so.1.0" in finding.message
    assert finding.library == "/models/pm/triton_python_backend_stub"
    oracle = python_repo.in_the_stub(None, program="/models/pm/triton_python_backend_stub")
    assert oracle.returncode == 127 and oracle.stderr.strip() == finding.predicted


def test_co311_an_environment_of_another_python_than_the_stub(python_repo):
    """The stub links libpython3.12; the environment was made with Python 3.10: its packages are not the stub's."""
    env = python_repo.environment(python="3.10")
    python_repo.model("pm", "import fastops\n", env)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO311"
    assert "Python 3.12" in finding.message and "Python 3.10" in finding.message


def test_a_venv_made_here_is_another_python_than_the_containers_stub(python_repo, tmp_path):
    """A real `python -m venv --copies` environment of this interpreter, packed with tar: its pyvenv.cfg names this
    machine's Python as its base, and its site-packages are this Python's, not the stub's 3.12."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(venv)], check=True)
    python_repo.model("pm", "import json\n", venv)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO311"
    assert f"Python {sys.version_info.major}.{sys.version_info.minor}" in finding.message


# -- extension modules ---------------------------------------------------------------------------------------


def test_the_extension_modules_model_py_imports_load_in_the_stub(python_repo):
    env = python_repo.environment(modules={"fastops": "py/fastops.so", "needsdep": "py/needsdep.so"},
                                  libs={"libdep.so": "py/libdep.so"})
    python_repo.model("pm", "import fastops\n\ndef initialize(args):\n    import needsdep\n", env)
    result = python_repo.check()
    assert stub_findings(result) == []
    oracle = python_repo.in_the_stub(env, (site_module("fastops"), site_module("needsdep")))
    assert [error for _, error in oracle.dlopens] == [None, None]
    assert [name for name, _ in oracle.calls] == ["PyInit_fastops", "PyInit_needsdep"]


def test_an_extension_modules_dependency_missing_from_the_environment_fails_its_import(python_repo):
    env = python_repo.environment(modules={"needsdep": "py/needsdep.so"})
    python_repo.model("pm", "import needsdep\n", env)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO302" and finding.library == site_module("needsdep")
    assert finding.evidence[0] == "imported by model.py -> needsdep"
    oracle = python_repo.in_the_stub(env, (site_module("needsdep"),))
    assert finding.predicted == f"ImportError: {oracle.error_of(site_module('needsdep'))}"


def test_an_import_the_model_guards_fails_into_its_handler_and_a_note(python_repo):
    """try: import needsdep / except ImportError: the module still loads where it can (it is modelled), and its
    failure is the code's to handle: a note, not a finding. Imported again unguarded, it is required."""
    env = python_repo.environment(modules={"needsdep": "py/needsdep.so"})
    guarded = "try:\n    import needsdep\nexcept ImportError:\n    needsdep = None\n"
    python_repo.model("pm", guarded, env)
    result = python_repo.check()
    assert stub_findings(result) == []
    assert any(n.startswith("pm: ") and "needsdep" in n and "try/except ImportError" in n for n in result.notes)
    python_repo.model("pn", guarded + "def execute(requests):\n    import needsdep\n", env)
    assert [(f.code, f.model) for f in stub_findings(python_repo.check())] == [("CO302", "pn")]


def test_an_import_of_a_name_computed_at_run_time_is_said_to_be_unchecked(python_repo):
    python_repo.model("pm", "import importlib\nmod = importlib.import_module(NAME)\n")
    result = python_repo.check()
    assert any("/models/pm/1/model.py:2 imports a module named at run time" in n for n in result.notes)


# -- EXECUTION_ENV_PATH --------------------------------------------------------------------------------------


def test_co312_an_environment_that_is_not_there(python_repo):
    python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/missing.tar.gz")
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO312"
    assert finding.predicted == ("failed to load 'pm' version 1: Internal: Failed to get the canonical path for "
                                 "/models/pm/missing.tar.gz.")


def test_co312_an_environment_without_an_activate_script(python_repo):
    env = python_repo.environment()
    (env / "bin" / "activate").unlink()
    python_repo.model("pm", "x = 1\n", env, packed=False)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO312" and "/models/pm/env/bin/activate does not exist" in finding.predicted


def test_co312_an_archive_the_backends_libarchive_cannot_open(python_repo):
    model = python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/env.tar.xz")
    (model / "env.tar.xz").write_bytes(b"\xfd7zXZ\x00" + bytes(100))
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO312" and finding.predicted.endswith("archive_read_open_filename() failed.")


@pytest.mark.parametrize("member", ["../../etc/evil.sh", "/etc/evil.sh"])
def test_co312_an_archive_member_that_climbs_out_is_never_written(python_repo, member):
    model = python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    with tarfile.open(model / "env.tar.gz", "w:gz") as archive:
        data = b"#!/bin/sh\n"
        info = tarfile.TarInfo(member)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO312" and f"member: {member}" in finding.evidence
    cache = python_repo.tmp / "cache"
    assert [p for p in python_repo.tmp.rglob("evil.sh") if cache not in p.parents] == []
    assert not os.path.lexists("/etc/evil.sh")


def test_a_directory_environment_is_used_in_place(python_repo):
    env = python_repo.environment(libstdcxx="py/oldcxx/libstdc++.so.6")
    python_repo.model("pm", "x = 1\n", env, packed=False)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO306" and "/models/pm/env/lib/libstdc++.so.6" in finding.message


def test_the_keyword_anywhere_but_at_the_start_loses_characters_to_the_backends_replace():
    """python_be.cc replaces `pos + 24` characters at `pos`: the keyword at 3 eats three characters after it."""
    assert written_path("$$TRITON_MODEL_DIRECTORY/env.tar.gz", "/models/m") == "/models/m/env.tar.gz"
    assert written_path("/x/$$TRITON_MODEL_DIRECTORY/env.tar.gz", "/models/mymodel") == "/x//models/mymodelv.tar.gz"
    assert written_path("/envs/env.tar.gz", "/models/m") == "/envs/env.tar.gz"


def test_co310_a_python_backend_without_its_stub(python_repo):
    (python_repo.root / STUB.lstrip("/")).unlink()
    python_repo.model("pm", "x = 1\n")
    (finding,) = [f for f in python_repo.check().findings if f.code == "CO310"]
    assert finding.predicted == ("triton_python_backend_stub is not found. Searched paths: "
                                 "/opt/tritonserver/backends/python and /opt/tritonserver/backends/python")


# -- an execution environment's archive is untrusted input ---------------------------------------------------


def archive_of(model: Path, *members: tarfile.TarInfo, data: bytes = b"x") -> None:
    with tarfile.open(model / "env.tar.gz", "w:gz") as archive:
        for info in members:
            archive.addfile(info, io.BytesIO(data) if info.isfile() else None)


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size if kind == tarfile.REGTYPE else 0
    return info


def test_a_member_written_through_a_link_that_points_out_stays_in_the_cache(python_repo, tmp_path):
    """`lib -> /etc` then `lib/evil`: the runtimes' rule for layers (a path resolved through the root's own links,
    inside it) keeps it in customops' cache; nothing is written where the link points on this machine."""
    model = python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    outside = tmp_path / "outside"
    outside.mkdir()
    archive_of(model, member("bin/activate"), member("lib", tarfile.SYMTYPE, str(outside)), member("lib/evil"))
    python_repo.check()
    assert list(outside.iterdir()) == []


def test_device_nodes_and_fifos_in_an_archive_are_never_made(python_repo):
    model = python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    archive_of(model, member("bin/activate"), member("dev/null", tarfile.CHRTYPE), member("fifo", tarfile.FIFOTYPE))
    assert stub_findings(python_repo.check()) == []
    made = [p for p in (python_repo.tmp / "cache").rglob("*") if not (p.is_file() or p.is_dir() or p.is_symlink())]
    assert made == []


def test_an_archive_beyond_the_bound_is_bad_input_naming_it(python_repo, monkeypatch):
    """A decompression bomb ends at the bound (32 GiB; 1 MiB here): an InputError naming the archive, exit 2."""
    from customops.errors import InputError
    from customops.image import environment

    monkeypatch.setattr(environment, "ENVIRONMENT_LIMIT", 1 << 20)
    model = python_repo.model("pm", "x = 1\n", written="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    archive_of(model, member("bin/activate"), member("zeros", size=2 << 20), data=bytes(2 << 20))
    with pytest.raises(InputError) as raised:
        python_repo.check()
    assert raised.value.path == str(model / "env.tar.gz")
    assert raised.value.reason == "cannot be read as an archive: more than 1 MB uncompressed"


def test_an_unpacked_environment_in_the_cache_is_reused_only_when_whole(python_repo):
    env = python_repo.environment(libstdcxx="py/oldcxx/libstdc++.so.6")
    python_repo.model("pm", "x = 1\n", env)
    first = stub_findings(python_repo.check())
    (entry,) = (python_repo.tmp / "cache" / "environments").iterdir()
    (entry / "escaping.json").write_text('{"not": "a list"}')  # tampered with: unpacked again
    assert stub_findings(python_repo.check()) == first
    assert (entry / "escaping.json").read_text() == "[]"


# -- a model's own stub --------------------------------------------------------------------------------------


def test_server_4132_a_models_own_stub_of_another_release_names_other_message_types(python_repo):
    """server#4132: a stub not built from the server's branch. Its shared-memory message types (C++ type names the
    file keeps) are compared with libtriton_python.so's, and the difference is said."""
    model = python_repo.model("pm", "x = 1\n")
    shutil.copy(python_repo.tree / "py/newer/triton_python_backend_stub", model / "triton_python_backend_stub")
    result = python_repo.check()
    (note,) = [n for n in result.notes if n.startswith("pm runs its own stub")]
    assert "their shared-memory message types differ (only the stub: CorrelationIdShm)" in note


def test_a_models_own_stub_of_the_servers_release(python_repo):
    model = python_repo.model("pm", "x = 1\n")
    shutil.copy(python_repo.root / STUB.lstrip("/"), model / "triton_python_backend_stub")
    (note,) = [n for n in python_repo.check().notes if n.startswith("pm runs its own stub")]
    assert note.endswith("names the same 3 shared-memory message types as "
                         "/opt/tritonserver/backends/python/libtriton_python.so")


def test_verbose_says_what_was_modelled_of_a_clean_models_stub(python_repo):
    env = python_repo.environment(modules={"fastops": "py/fastops.so"})
    python_repo.model("pm", "import fastops\n", env)
    out = subprocess.run([sys.executable, "-m", "customops", "check", str(python_repo.models), "--container-root",
                          str(python_repo.root), "--verbose", "--no-cache"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "300"})
    assert ("pm (backend python; version(s) 1; 0 op libraries; 1 load(s) predicted; stub "
            "/opt/tritonserver/backends/python/triton_python_backend_stub with /models/pm/env.tar.gz, Python 3.12, "
            "1 extension module(s) loaded in it)") in out.stdout, out.stdout + out.stderr


NEWER_GLIBC = """#include <stddef.h>
extern size_t strlcpy(char *dst, const char *src, size_t size);  /* GLIBC_2.38 */
extern void *PyModule_Create2(void *definition, int api);
static char definition[64], buffer[8];
void *PyInit_newglibc(void) { strlcpy(buffer, "x", sizeof buffer); return PyModule_Create2(definition, 1013); }
"""


def test_server_5094_an_extension_module_built_for_a_newer_glibc_than_the_containers(python_repo, tmp_path):
    """server#5094: a CUDA extension in the environment needs `GLIBC_2.32' and the container's glibc is older.
    Here a module linked against Debian trixie's glibc (strlcpy: GLIBC_2.38) in the fixture container (2.36)."""
    import glibc_release

    trixie = glibc_release.debian_libc("trixie")
    source = tmp_path / "newglibc.c"
    source.write_text(NEWER_GLIBC)
    module = tmp_path / f"newglibc{EXTENSION}"
    libpython = python_repo.root / "usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(module), str(source), str(trixie / glibc_release.LIBDIR /
                    "libc.so.6"), str(libpython)], check=True, capture_output=True)
    env = python_repo.environment()
    shutil.copy(module, env / "lib/python3.12/site-packages" / module.name)
    python_repo.model("pm", "import newglibc\n", env)
    (finding,) = stub_findings(python_repo.check())
    assert finding.code == "CO306" and finding.version == "GLIBC_2.38"
    oracle = python_repo.in_the_stub(env, (site_module("newglibc"),))
    assert finding.predicted == f"ImportError: {oracle.error_of(site_module('newglibc'))}"
