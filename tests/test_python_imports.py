"""How the stub's Python finds a module, held to this machine's real Python: a tree of packages, modules, extension
modules, namespace packages and .pth files, each name resolved by customops (customops.triton.python_modules) and
by importlib.util.find_spec in a real interpreter with the same sys.path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from customops.inspect.python_source import imports_of
from customops.triton.python_modules import Interpreter, origin_of, pth_directories

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f".cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"


def host(path: str) -> str | None:
    return path if Path(path).exists() else None


@pytest.fixture
def site(tmp_path) -> Path:
    """A site directory as pip and conda leave one."""
    root = tmp_path / "site"
    files = {
        "plain.py": "",
        "pkg/__init__.py": "", "pkg/sub.py": "", "pkg/fast" + TAG: "",
        "both/__init__.py": "", "both.py": "",  # a package beside a module of its name: the package wins
        "ext" + TAG: "", "ext.py": "",  # an extension module beside a source: the extension wins
        "stable.abi3.so": "", "bare.so": "",
        "ns/part_a.py": "",  # a namespace package, its portions in two directories
        "compiled.pyc": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    other = tmp_path / "other"
    (other / "ns").mkdir(parents=True)
    (other / "ns" / "part_b.py").write_text("")
    (other / "fromcpth.py").write_text("")
    (root / "extra.pth").write_text(f"# a comment\n{other}\nimport os  # run by site, not a path\n")
    return root


def python_for(site: Path) -> Interpreter:
    """This interpreter as customops models a stub's, with `site` (and what its .pth files add) as its path."""
    return Interpreter(VERSION, "/nowhere", (str(site), *pth_directories(str(site), host)),
                       frozenset(sys.builtin_module_names), (TAG, ".abi3.so", ".so"))


NAMES = ["plain", "pkg", "pkg.sub", "pkg.fast", "both", "ext", "stable", "bare", "ns", "ns.part_a", "ns.part_b",
         "compiled", "fromcpth", "nothere", "pkg.nothere", "sys", "posix"]


def real_origins(path: list[str], names: list[str]) -> dict[str, str | None]:
    """find_spec in a real interpreter (-S -I: no site, no user directories), sys.path exactly `path`."""
    script = ("import importlib.util, json, sys\nsys.path[:] = json.loads(sys.argv[1])\nout = {}\n"
              "for name in json.loads(sys.argv[2]):\n"
              "    try:\n        spec = importlib.util.find_spec(name)\n    except ModuleNotFoundError:\n"
              "        spec = None\n"
              "    out[name] = None if spec is None else spec.origin if spec.origin not in (None, 'built-in') "
              "else ('built-in' if spec.origin == 'built-in' else 'namespace')\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-S", "-I", "-c", script, json.dumps(path), json.dumps(names)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_each_name_is_found_where_the_real_import_system_finds_it(site):
    python = python_for(site)
    real = real_origins(list(python.sys_path), NAMES)
    ours = {name: origin_of(name, python, host) for name in NAMES}
    assert ours == real


def test_a_pth_file_adds_its_directories_and_not_its_import_lines(site, tmp_path):
    assert pth_directories(str(site), host) == [str(tmp_path / "other")]


def test_imports_a_function_makes_are_deferred_and_try_except_import_error_guards(tmp_path):
    found = imports_of(b"import a\ntry:\n    import b\nexcept ImportError:\n    b = None\n"
                       b"def f():\n    from . import c\n    import importlib\n    importlib.import_module(name)\n"
                       b"class K:\n    import d\n", "m.py")
    assert [(i.module, i.level, i.name, i.guarded, i.deferred) for i in found.imports] == [
        ("a", 0, None, False, False), ("b", 0, None, True, False), ("", 1, "c", False, True),
        ("importlib", 0, None, False, True), ("d", 0, None, False, False)]
    assert found.dynamic == (9,)


NUMPY = "1.26.4"
FROM_C = {"numpy.core._multiarray_tests"}  # imported by numpy's C code through __import__ (add_newdoc): not in a source


def test_the_extension_modules_importing_numpy_loads_are_those_the_real_interpreter_loads(tmp_path):
    """A published numpy wheel unpacked as a site directory: every extension module customops predicts `import
    numpy` to load (required or optional) is one this real interpreter loads, and every numpy module it loads is
    predicted but those named from C (FROM_C)."""
    import sysconfig
    import zipfile

    from customops.triton.python_modules import imports
    from fixtures import wheels

    try:
        wheel = wheels.wheel("numpy", NUMPY, this_python=True)
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    stdlib = sysconfig.get_paths()["stdlib"]
    python = Interpreter(VERSION, "/nowhere", (str(site), stdlib, f"{stdlib}/lib-dynload"),
                         frozenset(sys.builtin_module_names), (TAG, ".abi3.so", ".so"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.py").write_text("import numpy\n")
    predicted = {m.module for m in imports(str(model / "model.py"), str(model), python, host).extensions}
    script = ("import json, sys\nsys.path[:0] = [sys.argv[1]]\nimport numpy\n"
              "print(json.dumps(sorted(n for n, m in list(sys.modules.items()) "
              "if str(getattr(m, '__file__', '')).endswith('.so'))))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-S", "-I", "-c", script, str(site)],
                                           capture_output=True, text=True, check=True).stdout))
    assert predicted <= loaded, predicted - loaded
    assert {m for m in loaded if m.startswith("numpy.")} - predicted == FROM_C


def test_a_sources_imports_are_kept_in_the_cache_and_a_damaged_entry_is_read_again(site, tmp_path):
    from customops.triton.python_modules import imports

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.py").write_text("import pkg.fast\nimport ext\n")
    cache = tmp_path / "cache"
    python = python_for(site)

    def found() -> list[str]:
        return [m.module for m in imports(str(model / "model.py"), str(model), python, host,
                                          cache_dir=str(cache)).extensions]

    first = found()
    entries = sorted((cache / "python-imports").rglob("*"))
    entries = [e for e in entries if e.is_file()]
    assert first == ["pkg.fast", "ext"] and entries
    for entry in entries:
        entry.write_text('{"format": "damaged"')
    assert found() == first
