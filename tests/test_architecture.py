"""The package layout is the data flow (ARCHITECTURE.md): a lower layer never imports a higher one, so the
ELF reader knows nothing of ld.so, the linker model nothing of Triton, rules nothing of the application,
and the command line sits on top of everything."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "customops"
LAYERS = (  # lowest first; modules directly in customops/ are the base layer
    ("base",),
    ("elf",),
    ("linker", "inspect"),
    ("triton",),
    ("probe",),
    ("rules",),
    ("app",),
    ("report",),
    ("commands", "cli", "__main__"),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def layer(module: str) -> str:
    """The layer of a dotted module name inside customops."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "base"


def imports(path: Path) -> set[str]:
    """Every customops module a file imports, at any depth of the file (local imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "customops" or name.startswith("customops.")}


def modules() -> list[tuple[str, Path]]:
    return [(".".join(("customops", *path.relative_to(PACKAGE).with_suffix("").parts)), path)
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - set(RANK) == {"schemas"}  # data (JSON schemas), read through customops.schemas


def test_no_module_imports_a_higher_layer():
    upward = [f"{name} ({layer(name)}) imports {target} ({layer(target)})"
              for name, path in modules() for target in sorted(imports(path))
              if RANK[layer(target)] > RANK[layer(name)]]
    assert upward == []


def test_the_layering_test_sees_an_upward_import(tmp_path):
    """The checker itself: a rule importing the application layer is found."""
    rule = tmp_path / "rule.py"
    rule.write_text("def f():\n    from customops.app.check import run_check\n")
    assert "customops.app.check" in imports(rule) and RANK[layer("customops.app.check")] > RANK["rules"]


MODULE_LINES = 400
FUNCTION_LINES = 60


def test_every_module_is_small_enough_to_read_in_one_sitting():
    long = {name: n for name, path in modules() if (n := len(path.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_every_function_fits_on_a_screen():
    long = [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for name, path in modules() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES]
    assert long == []
