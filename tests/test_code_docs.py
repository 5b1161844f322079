"""The table of finding codes in docs/codes/README.md and docs/codes/CO*.md are generated from
customops/codes.py; this fails when they drift from it. To update them: python -m customops.codes --write-docs"""

import json
import re
from pathlib import Path

from customops.codes import CODES, Code, docs_url, explain, generated

ROOT = Path(__file__).parent.parent
FIX = "out of date: run `python -m customops.codes --write-docs`"


def test_the_codes_table_and_the_code_pages_match_the_code_table():
    stale = [str(path.relative_to(ROOT)) for path, content in generated(ROOT).items()
             if not path.exists() or path.read_text() != content]
    assert stale == [], FIX


def test_there_is_no_page_for_a_code_not_in_the_table():
    pages = {p.stem for p in (ROOT / "docs" / "codes").glob("CO*.md")}
    assert sorted(pages - set(CODES)) == [], FIX


def test_a_page_follows_the_explain_template():
    page = generated(ROOT)[ROOT / "docs" / "codes" / "CO304.md"]
    assert page.startswith("# CO304: undefined symbol: fails at load\n")
    for heading in ("What it detects", "Why it matters", "How to fix it", "How to suppress it"):
        assert f"\n## {heading}\n" in page
    assert "`&lt;lib&gt;: undefined symbol: &lt;name&gt;`" not in page  # a code span keeps <lib> as written
    assert "`# customops: ignore[CO304]`" in page


def test_sarif_rules_point_at_the_code_pages():
    from types import SimpleNamespace

    from customops.codes import Code
    from customops.emitters import making
    from customops.findings import Finding
    from customops.report.check import to_sarif

    with making(Code.CO304):
        undefined = Finding(Code.CO304, "m")
    with making(Code.CO104):
        relative = Finding(Code.CO104, "n")
    result = SimpleNamespace(findings=[undefined, relative], suppressed=[], models=[],
                             manifest=None, profile=None, loading_checked=True)
    rules = json.loads(to_sarif(result, None))["runs"][0]["tool"]["driver"]["rules"]
    assert [(r["id"], r["helpUri"]) for r in rules] == [("CO104", docs_url("CO104")), ("CO304", docs_url("CO304"))]
    assert docs_url("CO304").endswith("/docs/codes/CO304.md")


def test_the_table_has_a_row_for_every_code():
    assert set(CODES) == set(Code) and all(entry.code is code for code, entry in CODES.items())


def test_every_reported_code_has_an_example_from_a_test_that_exists_and_references():
    """An example is taken from the test named (tests/<file>::<test>[<parameter>]): that test must exist."""
    for code, entry in CODES.items():
        assert entry.references, code
        if not entry.emitted:
            continue
        assert entry.example is not None and entry.example.files, code
        path, _, name = entry.example.test.partition("::")
        source = (ROOT / path).read_text()
        function, _, parameter = name.rstrip("]").partition("[")
        assert re.search(rf"^def {re.escape(function)}\(", source, re.MULTILINE), (code, entry.example.test)
        assert f'"{parameter}"' in source if parameter else True, (code, entry.example.test)


def test_explain_and_the_page_show_the_example_and_the_references():
    text = explain("CO402")
    assert "Example (from tests/test_check_codes.py::test_co402_two_preloaded_libraries_define_the_same_strong_" \
           "symbol)\n  customops.toml\n    [host]\n" in text
    assert text.endswith("References\n  glibc elf/dl-lookup.c: do_lookup_x (the first definition in scope order "
                         "wins, for every referrer)")
    page = generated(ROOT)[ROOT / "docs" / "codes" / "CO402.md"]
    assert "\n## Example\n" in page and "\n```toml\n[host]\n" in page and "\n## References\n" in page
    assert "\n```console\n$ readelf -d" in generated(ROOT)[ROOT / "docs" / "codes" / "CO302.md"]


def test_sarif_help_is_the_explanation_without_example_or_references():
    from customops.codes import help_markdown

    assert "## Example" not in help_markdown("CO402") and "## References" not in help_markdown("CO402")
    assert help_markdown("CO402").endswith("\n`customops explain CO402` prints this explanation.\n")
