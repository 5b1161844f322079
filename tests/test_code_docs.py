"""The README's table of finding codes and docs/codes/*.md are generated from customops/codes.py; this fails
when they drift from it. To update them: python -m customops.codes --write-docs"""

import json
from pathlib import Path

from customops.codes import CODES, docs_url, generated

ROOT = Path(__file__).parent.parent
FIX = "out of date: run `python -m customops.codes --write-docs`"


def test_the_readme_table_and_the_code_pages_match_the_code_table():
    stale = [str(path.relative_to(ROOT)) for path, content in generated(ROOT).items()
             if not path.exists() or path.read_text() != content]
    assert stale == [], FIX


def test_there_is_no_page_for_a_code_not_in_the_table():
    pages = {p.stem for p in (ROOT / "docs" / "codes").glob("*.md")}
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
