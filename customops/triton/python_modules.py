"""What a model's Python code imports in the stub's interpreter, resolved as that Python's import system would and
without running anything: its sys.path (the stub's working directory, PYTHONPATH, the standard library of its
prefix, the site directories and their .pth files, then the model's version directory, its directory and the
backend's), then for each imported name a regular package, an extension module (`.cpython-3XY-<arch>.so`,
`.abi3.so`, `.so`), a source or a namespace package, directory by directory (importlib's FileFinder).

The model's own files (model.py and the modules beside it) are followed into every function, since the backend calls
initialize() and execute(); a library's modules only at their top level. An import inside try/except ImportError is
one the code handles, and is not followed."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from customops import cachedir, safeio
from customops.elf.constants import EM_AARCH64, EM_X86_64
from customops.errors import InputError
from customops.inspect.python_source import IMPORTS_SHAPE, Import, imports_of
from customops.inspect.python_source import Imports as ParsedImports
from customops.memo import once

SOURCE_LIMIT = 4 * safeio.MiB  # one module's source
READER = "1"  # bump when what the import reader records changes: its cached results are then read again
MAX_MODULES = 5000  # modules followed for one model (a deep framework import stops here, with a note)
PTH_LIMIT = safeio.SMALL_TEXT_LIMIT
LIBPYTHON = re.compile(r"^libpython(3)\.(\d+)\.so")
ARCH = {EM_X86_64: "x86_64-linux-gnu", EM_AARCH64: "aarch64-linux-gnu"}  # CPython's platform tag, by e_machine
Host = Callable[[str], "str | None"]  # a container path's file on this machine, or None


@dataclass(frozen=True)
class Interpreter:
    """The stub's Python as it starts: its version, and where it looks for modules, in order."""

    version: str  # "3.12"
    prefix: str  # where its standard library is (container path)
    sys_path: tuple[str, ...]
    builtins: frozenset[str]  # compiled into libpython (its PyInit_ functions)
    suffixes: tuple[str, ...]  # extension module suffixes, importlib's order


@dataclass(frozen=True)
class Imported:
    """An extension module the stub loads, and the chain of imports that brings it (model.py first)."""

    module: str
    path: str  # container path
    host_path: str
    chain: tuple[str, ...]
    optional: bool = False  # imported only where the code handles its ImportError


@dataclass
class Imports:
    extensions: list[Imported] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Spec:
    name: str
    origin: str | None  # the file (container path), None for a namespace package or a builtin
    package_dirs: tuple[str, ...] = ()  # a package's __path__
    extension: bool = False


def version_of(libpython: str) -> str | None:
    """'3.12' of libpython3.12.so.1.0."""
    match = LIBPYTHON.match(posixpath.basename(libpython))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def interpreter(version: str, builtins: frozenset[str], machine: int, host: Host, env_dir: str | None,
                search_path: str, pythonpath: str, cwd: str, appended: tuple[str, ...]) -> Interpreter:
    """The interpreter a stub linked with libpython`version` starts (CPython's getpath: `python3` found on PATH,
    the first with `lib/python3.X/os.py` above it; a venv's pyvenv.cfg names its base)."""
    short = version.replace(".", "")
    suffixes = (f".cpython-{short}-{ARCH.get(machine, 'x86_64-linux-gnu')}.so", ".abi3.so", ".so")
    lib = f"lib/python{version}"
    site: list[str] = []
    base = _prefix(version, host, env_dir, search_path)
    if env_dir and host(f"{env_dir}/pyvenv.cfg"):
        site.append(f"{env_dir}/{lib}/site-packages")
    if base == env_dir or not site:
        site += _site_dirs(base, version, host)
    stdlib = [f"{base}/lib/python{short}.zip", f"{base}/{lib}", f"{base}/{lib}/lib-dynload"]
    path = [cwd, *(p for p in pythonpath.split(":") if p), *stdlib]
    for directory in site:
        path.append(directory)
        path += pth_directories(directory, host)
    return Interpreter(version, base, tuple(dict.fromkeys([*path, *appended])), builtins, suffixes)


def _prefix(version: str, host: Host, env_dir: str | None, search_path: str) -> str:
    if env_dir:
        config = host(f"{env_dir}/pyvenv.cfg")
        home = _venv_home(config) if config else None
        if home:
            return posixpath.dirname(home.rstrip("/")) or "/"
    for directory in [d for d in search_path.split(":") if d]:
        prefix = posixpath.dirname(directory.rstrip("/")) or "/"
        if host(f"{directory}/python3") and host(f"{prefix}/lib/python{version}/os.py"):
            return prefix
    return "/usr"


def _venv_home(config: str) -> str | None:
    try:
        text = safeio.read_text(config, PTH_LIMIT, errors="replace")
    except InputError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip().startswith("/"):
            return value.strip()
    return None


def environment_version(host: Host, env_dir: str) -> str | None:
    """The Python an environment was made with: its lib/python3.Y with an os.py (conda-pack), or site-packages."""
    lib = host(f"{env_dir}/lib")
    if lib is None or not os.path.isdir(lib):
        return None
    found = sorted(n[len("python"):] for n in os.listdir(lib)
                   if re.fullmatch(r"python3\.\d+", n) and (os.path.exists(os.path.join(lib, n, "os.py"))
                                                             or os.path.isdir(os.path.join(lib, n, "site-packages"))))
    return found[-1] if found else None


def _site_dirs(prefix: str, version: str, host: Host) -> list[str]:
    """The site directories of a prefix: Debian's and Ubuntu's site.py (which names dist-packages) use
    /usr/local/lib/python3.X/dist-packages, /usr/lib/python3/dist-packages and /usr/lib/python3.X/dist-packages;
    CPython's own, <prefix>/lib/python3.X/site-packages."""
    site_py = host(f"{prefix}/lib/python{version}/site.py")
    try:
        debian = site_py is not None and b"dist-packages" in safeio.read_bytes(site_py, SOURCE_LIMIT)
    except InputError:
        debian = False
    if debian:
        return [f"/usr/local/lib/python{version}/dist-packages", "/usr/lib/python3/dist-packages",
                f"/usr/lib/python{version}/dist-packages"]
    return [f"{prefix}/lib/python{version}/site-packages"]


def pth_directories(directory: str, host: Host) -> list[str]:
    """The directories a site directory's .pth files add (lines that `import` are run by site: not followed)."""
    found = host(directory)
    if found is None or not os.path.isdir(found):
        return []
    entries: list[str] = []
    for name in sorted(n for n in os.listdir(found) if n.endswith(".pth")):
        try:
            text = safeio.read_text(os.path.join(found, name), PTH_LIMIT, errors="replace")
        except InputError:
            continue
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            entry = posixpath.normpath(posixpath.join(directory, line))
            if host(entry) is not None and entry not in entries:
                entries.append(entry)
    return entries


def imports(model_py: str, model_dir: str, python: Interpreter, host: Host,
            implicit: tuple[str, ...] = (), environment: str | None = None, cache_dir: str | None = None) -> Imports:
    """The extension modules importing `model_py` (a container path) loads, in the order Python loads them; the
    stub's own imports (`implicit`) first."""
    return _Walk(model_dir, python, host, environment, cache_dir).run(model_py, implicit)


def origin_of(name: str, python: Interpreter, host: Host) -> str | None:
    """Where `name` is found, as importlib's find_spec says it: the file, "namespace" or "built-in"; None: nowhere."""
    spec = _Walk("", python, host).spec(name)
    if spec is None:
        return None
    return spec.origin or ("namespace" if spec.package_dirs else "built-in")


class _Walk:
    """One model's imports, depth first in statement order, as Python runs them. A module reached only through an
    import the code guards (try/except ImportError) is optional: walked too (it loads when it can), its failure
    handled by the code; reached again unguarded, it and what it imports are walked again as required."""

    def __init__(self, model_dir: str, python: Interpreter, host: Host, environment: str | None = None,
                 cache_dir: str | None = None) -> None:
        self.own = model_dir.rstrip("/") + "/"
        self.cache_dir = cache_dir
        self.libraries = environment.rstrip("/") + "/" if environment else None  # an environment in the model's
        self.python, self.host = python, host
        self.specs: dict[str, _Spec | None] = {}
        self.walked: dict[str, bool] = {}  # module -> walked as optional only
        self.extensions: dict[str, Imported] = {}
        self.notes: list[str] = []

    def run(self, model_py: str, implicit: tuple[str, ...]) -> Imports:
        for name in implicit:
            self.module(name, ("(the stub)",), own=False, optional=False)
        self.file(model_py, "model", False, (posixpath.basename(model_py),), own=True, optional=False)
        return Imports(list(self.extensions.values()), self.notes)

    def module(self, name: str, chain: tuple[str, ...], own: bool, optional: bool,
               line: tuple[str, int] | None = None) -> bool:
        """Import `name` and its parents; whether it was found."""
        parts = name.split(".")
        for n in range(1, len(parts) + 1):
            dotted = ".".join(parts[:n])
            spec = self.spec(dotted)
            if spec is None:
                if own and not optional and line is not None and n == 1:
                    self.notes.append(f"{line[0]}:{line[1]} imports {name}, which is in none of the stub's "
                                      "sys.path directories")
                return False
            self.load(spec, (*chain, dotted), optional)
        return True

    def load(self, spec: _Spec, chain: tuple[str, ...], optional: bool) -> None:
        if spec.name in self.walked and (optional or not self.walked[spec.name]):
            return  # walked already, as required or as what this asks
        self.walked[spec.name] = optional
        if len(self.walked) > MAX_MODULES:
            if len(self.walked) == MAX_MODULES + 1:
                self.notes.append(f"more than {MAX_MODULES} modules imported: the rest are not followed")
            return
        if spec.origin is None:
            return
        if spec.extension:
            host = self.host(spec.origin)
            if host is not None:
                known = self.extensions.get(spec.name)
                self.extensions[spec.name] = Imported(spec.name, spec.origin, host, known.chain if known else chain,
                                                      optional)
            return
        if spec.origin.endswith(".py"):
            own = spec.origin.startswith(self.own) and not (self.libraries and spec.origin.startswith(self.libraries))
            self.file(spec.origin, spec.name, bool(spec.package_dirs), chain, own, optional)

    def file(self, path: str, name: str, package: bool, chain: tuple[str, ...], own: bool, optional: bool) -> None:
        host = self.host(path)
        if host is None:
            return
        try:
            source = safeio.read_bytes(host, SOURCE_LIMIT)
        except InputError as exc:
            self.notes.append(f"not followed: {path}: {exc.reason}")
            return
        found = once(("python imports", host, len(source), hash(source)), lambda: self.read(source, path))
        if own and not optional:
            if found.error:
                self.notes.append(f"{path} cannot be read as Python ({found.error}): the stub cannot import it")
            self.notes += [f"{path}:{line} imports a module named at run time: not checked" for line in found.dynamic]
        for statement in found.imports:
            if statement.deferred and not own:
                continue
            self.statement(statement, name, package, chain, own, optional or statement.guarded, path)

    def read(self, source: bytes, path: str) -> ParsedImports:
        """The source's imports, from customops' cache where an earlier run read the same bytes (ast.parse is
        most of the walk's time: a framework's package has hundreds of modules)."""
        key = [READER, hashlib.sha256(source).hexdigest()]
        cached = cachedir.load_result(self.cache_dir, "python-imports", key, IMPORTS_SHAPE)
        if cached is not None:
            return ParsedImports.from_json(cached)
        found = imports_of(source, path)
        cachedir.store_result(self.cache_dir, "python-imports", key, found.to_json())
        return found

    def statement(self, statement: Import, name: str, package: bool, chain: tuple[str, ...], own: bool,
                  optional: bool, path: str) -> None:
        base = statement.module
        if statement.level:
            anchor = name if package else name.rpartition(".")[0]
            parts = anchor.split(".") if anchor else []
            if statement.level - 1 > len(parts):
                return
            parts = parts[:len(parts) - (statement.level - 1)]
            base = ".".join([*parts, *([statement.module] if statement.module else [])])
        if not base or not self.module(base, chain, own, optional, (path, statement.line)):
            return
        if statement.name is not None:
            spec = self.spec(base)
            if spec is not None and spec.package_dirs:
                submodule = self.spec(f"{base}.{statement.name}")
                if submodule is not None:
                    self.load(submodule, (*chain, submodule.name), optional)

    def spec(self, name: str) -> _Spec | None:
        if name not in self.specs:
            self.specs[name] = self._find(name)
        return self.specs[name]

    def _find(self, name: str) -> _Spec | None:
        parent, _, tail = name.rpartition(".")
        if parent:
            above = self.spec(parent)
            if above is None or not above.package_dirs:
                return None
            search: tuple[str, ...] = above.package_dirs
        else:
            if name in self.python.builtins:
                return _Spec(name, None)
            search = self.python.sys_path
        portions: list[str] = []
        for directory in search:
            found = self._in(directory, name, tail, portions)
            if found is not None:
                return found
        return _Spec(name, None, tuple(portions)) if portions else None

    def _in(self, directory: str, name: str, tail: str, portions: list[str]) -> _Spec | None:
        """importlib's FileFinder in one directory: a package, else a module, else a namespace portion."""
        package = f"{directory}/{tail}"
        held = self.host(package)
        if held is not None and os.path.isdir(held):
            for suffix in (*self.python.suffixes, ".py", ".pyc"):
                if self._file(f"{package}/__init__{suffix}"):
                    return _Spec(name, f"{package}/__init__{suffix}", (package,), suffix in self.python.suffixes)
            portions.append(package)
        for suffix in self.python.suffixes:
            if self._file(f"{directory}/{tail}{suffix}"):
                return _Spec(name, f"{directory}/{tail}{suffix}", extension=True)
        for suffix in (".py", ".pyc"):
            if self._file(f"{directory}/{tail}{suffix}"):
                return _Spec(name, f"{directory}/{tail}{suffix}")
        return None

    def _file(self, path: str) -> bool:
        held = self.host(path)
        return held is not None and os.path.isfile(held)
