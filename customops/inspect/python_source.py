"""The imports of a Python source file, read with `ast` and never run: what the Python backend's stub will import
when it imports a model's model.py, and where that cannot be known without running it (`importlib.import_module`
of a computed name)."""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from typing import cast

from customops.cachedir import Text

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
DYNAMIC = frozenset({"import_module", "__import__"})
TRIES: tuple[type[ast.stmt], ...] = (ast.Try, *([ast.TryStar] if hasattr(ast, "TryStar") else []))


@dataclass(frozen=True)
class Import:
    """One name an import statement imports: `module` as written (relative with `level` dots), and for
    `from M import a` the name `a` (a submodule of M, or only an attribute: the resolver decides)."""

    module: str
    level: int
    line: int
    name: str | None = None
    guarded: bool = False  # inside try/except ImportError: a failure the source expects and handles
    deferred: bool = False  # inside a function or class body: run when called, not when the module is imported


@dataclass(frozen=True)
class Imports:
    imports: tuple[Import, ...]
    dynamic: tuple[int, ...]  # lines importing a name computed at run time
    error: str | None = None  # why the source could not be read as Python (the stub then fails to import it)

    def to_json(self) -> dict:
        return {"imports": [asdict(i) for i in self.imports], "dynamic": list(self.dynamic), "error": self.error}

    @classmethod
    def from_json(cls, data: dict) -> Imports:
        """From to_json's form, which must have IMPORTS_SHAPE (customops.cachedir.matches)."""
        return cls(tuple(Import(**row) for row in data["imports"]), tuple(data["dynamic"]), data["error"])


# to_json's form, as a cache entry must have it
IMPORT_SHAPE = {"module": Text(), "level": int, "line": int, "name": (Text(), None), "guarded": bool,
                "deferred": bool}
IMPORTS_SHAPE = {"imports": [IMPORT_SHAPE], "dynamic": [int], "error": (Text(), None)}


def imports_of(source: bytes, name: str) -> Imports:
    """Every import of the source, in the order the statements run (the module's own body first by line)."""
    try:
        tree = ast.parse(source, filename=name)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Imports((), (), f"{type(exc).__name__}: {exc}")
    found: list[Import] = []
    dynamic: list[int] = []
    _statements(tree.body, found, guarded=False, deferred=False)
    if any(word.encode() in source for word in DYNAMIC):  # only then are expressions searched for the calls
        _calls(tree, found, dynamic)
    return Imports(tuple(found), tuple(dynamic))


def _statements(body: list[ast.stmt], found: list[Import], guarded: bool, deferred: bool) -> None:
    """The import statements of a body and of the bodies nested in it (statements only: expressions hold none)."""
    for node in body:
        if isinstance(node, ast.Import):
            found += [Import(alias.name, 0, node.lineno, guarded=guarded, deferred=deferred) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found += [Import(node.module or "", node.level, node.lineno, None if alias.name == "*" else alias.name,
                             guarded, deferred) for alias in node.names]
        elif isinstance(node, TRIES):
            node = cast(ast.Try, node)  # try/except*: the same fields
            handles = any(_catches_import_error(h.type) for h in node.handlers)
            _statements(node.body, found, guarded or handles, deferred)
            for handler in node.handlers:
                _statements(handler.body, found, guarded, deferred)
            _statements(node.orelse, found, guarded, deferred)
            _statements(node.finalbody, found, guarded, deferred)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _statements(node.body, found, guarded, deferred=True)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                _statements(case.body, found, guarded, deferred)
        else:  # if, for, while, with, class bodies: run where they stand
            for field in ("body", "orelse", "finalbody"):
                nested = getattr(node, field, None)
                if isinstance(nested, list):
                    _statements(nested, found, guarded, deferred)


def _calls(tree: ast.Module, found: list[Import], dynamic: list[int]) -> None:
    """`importlib.import_module("name")` of a literal name, as an import; of anything else, its line in `dynamic`.
    Where such a call stands is not weighed: it counts as a deferred import."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        called = function.attr if isinstance(function, ast.Attribute) else \
            function.id if isinstance(function, ast.Name) else None
        if called not in DYNAMIC or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and called == "import_module" \
                and len(node.args) == 1 and not node.keywords and not first.value.startswith("."):
            found.append(Import(first.value, 0, node.lineno, deferred=True))
        else:
            dynamic.append(node.lineno)


def _catches_import_error(handler: ast.expr | None) -> bool:
    if handler is None:
        return True
    names = handler.elts if isinstance(handler, ast.Tuple) else [handler]
    return any((isinstance(n, ast.Name) and n.id in IMPORT_ERRORS)
               or (isinstance(n, ast.Attribute) and n.attr in IMPORT_ERRORS) for n in names)
