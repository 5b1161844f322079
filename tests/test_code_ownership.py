"""Every finding code has one home: exactly one module declares it (a module-level `CODES = frozenset({...})`)
and every Finding or Problem made with a literal code is made there. Read from the source with ast, so that a
new emitter that forgets to declare its codes fails here rather than in a user's CI."""

import ast
import re
from pathlib import Path

from customops.codes import CODES as TABLE

PACKAGE = Path(__file__).parent.parent / "customops"
CODE = re.compile(r"^CO\d{3}$")
CONSTRUCTORS = {"Finding", "Problem"}  # Problem: a repository problem, made a Finding by app/check
NOT_EMITTED = {code for code, c in TABLE.items() if not c.emitted}  # reserved codes: documented, reported by none


def _modules() -> dict[str, ast.Module]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): ast.parse(p.read_text(), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "COxxx" assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def _declared(tree: ast.Module) -> set[str] | None:
    """The codes of a module-level `CODES = frozenset({...})`, or None where the module has none."""
    constants = _constants(tree)
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id == "CODES" and isinstance(node.value, ast.Call):
            (literal,) = node.value.args
            assert isinstance(literal, ast.Set), ast.dump(literal)
            return {e.value if isinstance(e, ast.Constant) else constants[e.id] for e in literal.elts}  # type: ignore[attr-defined]
    return None


def _literal_codes(tree: ast.Module) -> list[tuple[str, int]]:
    """(code, line) of every Finding(...) or Problem(...) whose first argument is a code literal or a
    module-level constant holding one."""
    constants = _constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CONSTRUCTORS \
                and node.args:
            first = node.args[0]
            value = first.value if isinstance(first, ast.Constant) else \
                constants.get(first.id) if isinstance(first, ast.Name) else None
            if isinstance(value, str) and CODE.match(value):
                found.append((value, node.lineno))
    return found


def declarations() -> dict[str, set[str]]:
    trees = _modules()
    return {name: codes for name, tree in trees.items() if name != "customops.codes"
            if (codes := _declared(tree)) is not None}


def test_every_code_in_the_table_is_declared_by_exactly_one_module():
    owners: dict[str, list[str]] = {}
    for module, codes in declarations().items():
        for code in codes:
            owners.setdefault(code, []).append(module)
    assert {c: m for c, m in owners.items() if len(m) > 1} == {}, "a code is declared by two modules"
    assert sorted(set(owners) - set(TABLE)) == [], "a declared code is not in customops/codes.py"
    undeclared = sorted(set(TABLE) - set(owners) - NOT_EMITTED)
    assert undeclared == [], "a code in the table is declared by no module"
    assert NOT_EMITTED.isdisjoint(owners), "a code now emitted is still marked emitted=False in the table"


def test_findings_with_a_literal_code_are_made_in_the_module_that_declares_it():
    declared = declarations()
    misplaced = [f"{module}:{line}: {code}" for module, tree in _modules().items()
                 for code, line in _literal_codes(tree) if code not in declared.get(module, set())]
    assert misplaced == []


def test_rule_modules_share_one_signature():
    import inspect

    from customops import rules
    from customops.rules import probed
    from customops.rules.context import RuleContext

    for rule in (*rules.RULES, probed):
        parameters = list(inspect.signature(rule.check).parameters.values())
        assert [p.annotation for p in parameters] in (["RuleContext"], [RuleContext]), rule.__name__
        assert isinstance(rule.CODES, frozenset) and isinstance(rule.NEEDS_PREDICTION, bool), rule.__name__


def test_the_checker_sees_literal_codes():
    tree = ast.parse('UNUSED = "CO107"\nFinding(UNUSED, "m")\nFinding("CO101", "m")\nProblem("CO102", "m")\n'
                     'other("CO103")\n')
    assert _literal_codes(tree) == [("CO107", 2), ("CO101", 3), ("CO102", 4)]


FILE_READERS = {"open", "os.stat", "os.lstat", "os.listdir", "os.scandir", "os.path.isfile", "os.path.isdir",
                "os.path.exists", "glob.glob", "zipfile.ZipFile", "model_ops", "tf_model_ops", "torchscript_ops",
                "mentioned", "symtab_strings", "static_registrations", "safeio.sha256", "safeio.map_regular"}


def _called(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func, parts = node.func, []
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                names.add(".".join([func.id, *reversed(parts)]))
    return names


def test_rules_read_the_rule_context_not_files():
    """The file facts a rule needs are read before it runs (customops.rules.context.build and .probed, through
    customops.inspect.files), with the run's ElfReader: a rule's I/O would bypass both. The imports that would
    let a rule read a file: tests/test_architecture.py."""
    reading = {name: sorted(found) for name, tree in _modules().items()
               if name.startswith("customops.rules.") and name != "customops.rules.context"
               if (found := _called(tree) & FILE_READERS)}
    assert reading == {}
