"""The package layout is the data flow (ARCHITECTURE.md): a lower layer never imports a higher one, so the
ELF reader knows nothing of ld.so, the linker model nothing of Triton, rules nothing of the application,
and the command line sits on top of everything."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "customops"
LAYERS = (  # lowest first; modules directly in customops/ are the base layer
    ("base",),
    ("elf",),
    ("linker", "inspect", "image"),
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


def runtime_imports(path: Path) -> set[str]:
    """The customops modules a file imports when it runs, at any depth (an import inside a function counts:
    it runs when the function does); what only a type checker reads (`if TYPE_CHECKING:`) does not. A name
    imported from a package is the module of that name where there is one (`from customops.probe import
    sandbox`), else the package."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = []
    known = module_names()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name.removesuffix(".__init__") for name in found if name in known or f"{name}.__init__" in known}


@functools.cache
def module_names() -> frozenset[str]:
    return frozenset(name for name, _path in modules())


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself): Tarjan's
    algorithm, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        cycles.append(sorted(component))
    return cycles


def module_graph() -> dict[str, set[str]]:
    return {name.removesuffix(".__init__"): runtime_imports(path) for name, path in modules()}


def test_no_import_cycle_even_through_lazy_imports():
    """A cycle hidden by an import inside a function is still a cycle: the two modules cannot be understood,
    tested or moved apart (customops.probe.frameworks and .tensorrt_standin were one, through `Reported`)."""
    assert import_cycles(module_graph()) == []


def test_the_cycle_finder_sees_a_lazy_cycle(tmp_path):
    lazy = tmp_path / "a.py"
    lazy.write_text("from customops.probe import sandbox\n\ndef f():\n    from customops.probe import frameworks\n")
    assert runtime_imports(lazy) == {"customops.probe.sandbox", "customops.probe.frameworks"}
    typing_only = tmp_path / "b.py"
    typing_only.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from customops import cli\n")
    assert runtime_imports(typing_only) == set()
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}) == [["a", "b", "c"], ["e"]]


# What a rule may take of `os`: path strings, never the filesystem.
PURE_OS = {"os.path.basename", "os.path.dirname", "os.path.abspath", "os.path.join", "os.path.normpath",
           "os.path.split", "os.path.splitext", "os.sep"}
READING_MODULES = {"io", "glob", "zipfile", "tarfile", "pathlib", "shutil", "mmap", "tempfile", "subprocess",
                   "customops.safeio", "customops.inspect.files", "customops.elf.parse", "customops.elf.symtab"}
READING_NAMES = {"customops.inspect.onnxmodel.model_ops", "customops.inspect.tfmodel.model_ops",
                 "customops.inspect.protobuf_descriptors.read", "customops.inspect.protobuf_registrations.read",
                 "customops.linker.ldconf"}


def file_access(path: Path) -> list[str]:
    """What in a module could read the filesystem: open(), os beyond path strings, modules and functions
    that read files."""
    tree = ast.parse(path.read_text())
    outer = {id(n.value): n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # os.path -> its attr
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append(f"line {node.lineno}: open()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            name = f"os.{node.attr}" + (f".{outer.get(id(node), '')}" if node.attr == "path" else "")
            if name not in PURE_OS:
                found.append(f"line {node.lineno}: {name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            if node.module == "os" or names & (READING_MODULES | READING_NAMES):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name in READING_MODULES | READING_NAMES]
    return found


def test_rules_open_no_file():
    """Rules turn facts into findings (ARCHITECTURE.md): what they need from files is read before they run,
    in customops.rules.context (through customops.inspect.files); they may call only the two readers the
    context hands them, the run's ElfReader and the container's target."""
    reading = {name: found for name, path in modules()
               if name.startswith("customops.rules.") and name != "customops.rules.context"
               if (found := file_access(path))}
    assert reading == {}


def test_the_file_access_check_sees_reading(tmp_path):
    rule = tmp_path / "rule.py"
    rule.write_text("import os\nimport glob\nfrom customops.inspect.tfmodel import model_ops\n"
                    "def f(p):\n    os.path.basename(p)\n    os.listdir(p)\n    os.path.isfile(p)\n"
                    "    return open(p).read()\n")
    assert [line.split(": ", 1)[1] for line in file_access(rule)] == [
        "import glob", "from customops.inspect.tfmodel import ...", "os.listdir", "os.path.isfile", "open()"]


RULE_PARTS = {  # a module of rules/ that is part of a rule module, not one itself: what it is part of
    "customops.rules.descriptors": "customops.rules.collisions",  # its CO406 is made by .registrations' emitter
    "customops.rules.descriptor_pools": "customops.rules.collisions",  # so is this one's
    "customops.rules.framework_drift": "customops.rules.loading",  # CO504's facts: which framework, what version
    "customops.rules.constructors": "customops.rules.loading",  # a constructor's call of a function defined nowhere
    "customops.rules.probed_tensorrt": "customops.rules.probed",  # check(group), for the TensorRT group
    "customops.rules.version_nodes": "customops.rules.loading",  # CO306, CO505: a version node nobody defines
    "customops.rules.needed": "customops.rules.loading",  # CO302: a needed library the container lacks (versions too)
}


def test_every_rule_module_declares_its_needs_and_check():
    """ARCHITECTURE.md: each rule module declares NEEDS_PREDICTION and check(ctx: RuleContext); the
    modules of rules/ are those, the context, and the parts RULE_PARTS names, each imported by its whole."""
    import importlib
    import inspect

    from customops import rules
    from customops.rules import probed
    from customops.rules.context import RuleContext

    rule_modules = {rule.__name__ for rule in (*rules.RULES, probed)}
    everything = {name for name, _path in modules() if name.startswith("customops.rules.")}
    assert everything - rule_modules - set(RULE_PARTS) == {"customops.rules.__init__", "customops.rules.context"}
    for name in sorted(rule_modules):
        rule = importlib.import_module(name)
        parameters = [p.annotation for p in inspect.signature(rule.check).parameters.values()]
        assert parameters in (["RuleContext"], [RuleContext]), name
        assert isinstance(rule.NEEDS_PREDICTION, bool), name
    paths = dict(modules())
    assert all(part in imports(paths[whole]) for part, whole in RULE_PARTS.items())


LINKER_RECORDS = {"customops.linker.prediction", "customops.linker.types", "customops.linker.target"}


def test_reports_neither_run_the_linker_model_nor_read_elf_files():
    """customops/report/__init__.py: only report.resolve, which renders a Prediction, imports customops.linker,
    and only its records; no report imports customops.elf beyond demangling."""
    linker, elf = {}, {}
    known = module_names()
    for name, path in modules():
        if not name.startswith("customops.report."):
            continue
        modules_imported = imports(path) & known
        if found := {t for t in modules_imported if t.startswith("customops.linker.")}:
            linker[name] = found
        if found := {t for t in modules_imported if t.startswith("customops.elf.")} - {"customops.elf.demangle"}:
            elf[name] = found
    assert linker.keys() <= {"customops.report.resolve"} and set().union(*linker.values()) <= LINKER_RECORDS
    assert elf == {}


def documented_modules() -> dict[str, str]:
    """Each bullet of ARCHITECTURE.md's Modules section: its package ("base", "elf/", ...) and its text."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text().split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    bullets = {}
    for bullet in text.split("\n- "):
        head, _, rest = bullet.strip().lstrip("- ").partition(" ")
        bullets[head.strip("*")] = rest
    return bullets


def test_every_module_is_named_in_the_architecture():
    """Each module of customops/ appears, in backquotes, in the Modules bullet of its package (the base
    bullet for customops/*.py; a subpackage such as triton/loaders/ by its name; cli.py under commands/)."""
    bullets = documented_modules()
    missing = []
    for name, path in modules():
        parts = path.relative_to(PACKAGE).parts
        if parts[-1] == "__init__.py" and len(parts) < 3:
            continue
        bullet = ("commands/" if parts[0] == "cli.py" else "base" if len(parts) == 1 else f"{parts[0]}/")
        named = set(re.findall(r"`([^`]+)`", bullets.get(bullet, "")))
        if not ({Path(parts[-1]).stem, parts[-1], f"{parts[1]}/" if len(parts) > 2 else ""} & named):
            missing.append(name)
    assert missing == []
