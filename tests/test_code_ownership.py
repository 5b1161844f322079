"""Every finding code has one home, its emitter: the function registered for it with `@emits(Code.COxxx)`
(customops.emitters). Which function makes a code is a lookup in the registry, and a Finding of a code made
anywhere else is refused when it is made, so a new code without an emitter, or a finding made outside its
emitter, fails here or in its own tests rather than in a user's CI."""

import ast
import importlib
from pathlib import Path

import pytest

from customops.codes import CODES, Code
from customops.emitters import REGISTRY, emits, making
from customops.findings import Finding, amended

PACKAGE = Path(__file__).parent.parent / "customops"
# what registers every emitter, through its imports: the check's flow, what it imports when it probes, and the
# manifest's reader (CO106)
for _module in ("customops.app.check", "customops.rules.probed", "customops.triton.manifest"):
    importlib.import_module(_module)
DECIDED_OUTSIDE_RULES = {  # codes decided before the rules run (reading the repository, the manifest, planning
    # the loads, which models are served together) or after them (suppressions): their emitters are there
    **dict.fromkeys(("CO101", "CO102", "CO103"), "customops.triton.repository"),
    "CO104": "customops.triton.loaders.tensorflow",
    **dict.fromkeys(("CO105", "CO201", "CO203"), "customops.triton.loaders.backend"),
    "CO106": "customops.triton.manifest",
    "CO107": "customops.app.suppressions",
    **dict.fromkeys(("CO108", "CO109", "CO110"), "customops.triton.model_set"),
    **dict.fromkeys(("CO310", "CO312"), "customops.triton.python_stub"),  # the stub a model gets, its environment
}


def test_every_code_in_the_table_has_one_emitter():
    emitted = {code for code, entry in CODES.items() if entry.emitted}
    assert sorted(set(REGISTRY) - emitted) == [], "a reserved code (emitted=False in the table) has an emitter"
    assert sorted(emitted - set(REGISTRY)) == [], "a code in the table has no emitter"
    assert all(REGISTRY[code].code == code for code in REGISTRY)


def test_emitters_live_in_the_rules_except_for_the_codes_decided_elsewhere():
    outside = {code: e.module for code, e in REGISTRY.items() if not e.module.startswith("customops.rules.")}
    assert outside == DECIDED_OUTSIDE_RULES


def test_every_emitter_says_what_it_reports():
    for emitter in REGISTRY.values():
        function = importlib.import_module(emitter.module)
        for part in emitter.name.split("."):
            function = getattr(function, part)
        assert (function.__doc__ or "").strip(), f"{emitter} has no docstring"


def test_a_second_emitter_for_a_code_is_refused():
    with pytest.raises(ValueError, match="CO402 has two emitters"):
        @emits(Code.CO402)
        def another(message: str) -> Finding:
            return Finding(Code.CO402, message)


def test_a_finding_is_made_only_by_its_codes_emitter():
    from customops.rules.collisions import strong_duplicates
    from customops.rules.loading import undefined_at_load

    with pytest.raises(RuntimeError, match=r"a CO402 finding made outside any emitter: only "
                                           r"customops.rules.collisions.strong_duplicates makes CO402"):
        Finding(Code.CO402, "m")
    assert strong_duplicates.__name__ == "strong_duplicates" and undefined_at_load("m").code is Code.CO304


def test_inside_an_emitter_only_its_code_is_made():
    @emits(Code.CO506)  # reserved: no emitter of its own
    def wrong(message: str) -> Finding:
        return Finding(Code.CO304, message)

    try:
        with pytest.raises(RuntimeError, match=r"a CO304 finding made while .*wrong runs: only "
                                               r"customops.rules.loading.undefined_at_load makes CO304"):
            wrong("m")
    finally:
        del REGISTRY[Code.CO506]


def test_a_copy_is_still_its_emitters_finding():
    from customops.rules.loading import undefined_at_load

    made = undefined_at_load("m")
    copy = amended(made, line=3)
    assert (copy.code, copy.line, copy.message) == (Code.CO304, 3, "m")


def test_a_findings_code_is_a_code():
    with making(Code.CO304), pytest.raises(TypeError, match="a finding's code is a Code"):
        Finding("CO304", "m")  # type: ignore[arg-type]


def test_rule_modules_share_one_signature():
    import inspect

    from customops import rules
    from customops.rules import probed
    from customops.rules.context import RuleContext

    for rule in (*rules.RULES, probed):
        parameters = list(inspect.signature(rule.check).parameters.values())
        assert [p.annotation for p in parameters] in (["RuleContext"], [RuleContext]), rule.__name__
        assert isinstance(rule.NEEDS_PREDICTION, bool), rule.__name__


def _modules() -> dict[str, ast.Module]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): ast.parse(p.read_text(), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


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
