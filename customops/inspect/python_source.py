"""The imports of a Python source file, read with `ast` and never run: what the Python backend's stub will import
when it imports a model's model.py, and where that cannot be known without running it (`importlib.import_module`
of a computed name)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
DYNAMIC = frozenset({"import_module", "__import__"})


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


def imports_of(source: bytes, name: str) -> Imports:
    """Every import of the source, in the order the statements run (the module's own body first by line)."""
    try:
        tree = ast.parse(source, filename=name)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Imports((), (), f"{type(exc).__name__}: {exc}")
    walker = _Walker()
    walker.visit(tree)
    return Imports(tuple(walker.found), tuple(walker.dynamic))


class _Walker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[Import] = []
        self.dynamic: list[int] = []
        self.guarded = 0
        self.deferred = 0

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append(Import(alias.name, 0, node.lineno, guarded=self.guarded > 0,
                                     deferred=self.deferred > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.found.append(Import(node.module or "", node.level, node.lineno,
                                     None if alias.name == "*" else alias.name, self.guarded > 0, self.deferred > 0))

    def visit_Try(self, node: ast.Try) -> None:
        handles = any(_catches_import_error(h.type) for h in node.handlers)
        self.guarded += handles
        for statement in node.body:
            self.visit(statement)
        self.guarded -= handles
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    def visit_TryStar(self, node: ast.TryStar) -> None:
        self.visit_Try(node)  # type: ignore[arg-type]  # the same fields: body, handlers, orelse, finalbody

    def _deferred(self, node: ast.AST) -> None:
        self.deferred += 1
        self.generic_visit(node)
        self.deferred -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _deferred

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        called = function.attr if isinstance(function, ast.Attribute) else \
            function.id if isinstance(function, ast.Name) else None
        if called in DYNAMIC and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and called == "import_module" \
                    and not (len(node.args) > 1 or node.keywords):
                self.found.append(Import(first.value.lstrip("."), len(first.value) - len(first.value.lstrip(".")),
                                         node.lineno, guarded=self.guarded > 0, deferred=self.deferred > 0))
            else:
                self.dynamic.append(node.lineno)
        self.generic_visit(node)


def _catches_import_error(handler: ast.expr | None) -> bool:
    if handler is None:
        return True
    names = handler.elts if isinstance(handler, ast.Tuple) else [handler]
    return any((isinstance(n, ast.Name) and n.id in IMPORT_ERRORS)
               or (isinstance(n, ast.Attribute) and n.attr in IMPORT_ERRORS) for n in names)
