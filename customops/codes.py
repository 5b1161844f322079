"""The code table: every finding code, its default severity, its explanation, an example and references.

`Code` names every code (a `str` enum: it prints, formats and serializes as its text, "CO402"); its row, read
from customops/data/codes.json, is `CODES[code]`. One source for `customops explain CODE`, the SARIF rule
metadata, the table in docs/codes/README.md and the pages under docs/codes/ (written by `python -m customops.codes
--write-docs`; tests/test_code_docs.py fails when they drift). Which function makes each code's findings is
customops.emitters' registry. Codes are a public contract for CI users: a code's meaning never changes; new
codes are added, none are reused. Each explanation follows one template: what it detects, why it matters (the
runtime failure it predicts), how to fix it, how to suppress it, a minimal case that triggers it (from its
test) and the sources it models.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path

from customops import packagedata

FENCES = {".pbtxt": "pbtxt", ".toml": "toml", ".c": "c", ".cpp": "cpp"}  # an example's files, by suffix


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (expected error, warning or info)") from None


class Code(str, Enum):
    """A finding code. It is its text wherever it is shown: str(), format(), f-strings, JSON, comparisons and
    dictionary keys all see "CO402" (Python 3.12 made format() of a str mixin follow str(), hence both)."""

    CO101 = "CO101"
    CO102 = "CO102"
    CO103 = "CO103"
    CO104 = "CO104"
    CO105 = "CO105"
    CO106 = "CO106"
    CO107 = "CO107"
    CO108 = "CO108"
    CO109 = "CO109"
    CO110 = "CO110"
    CO201 = "CO201"
    CO202 = "CO202"
    CO203 = "CO203"
    CO301 = "CO301"
    CO302 = "CO302"
    CO303 = "CO303"
    CO304 = "CO304"
    CO305 = "CO305"
    CO306 = "CO306"
    CO307 = "CO307"
    CO308 = "CO308"
    CO309 = "CO309"
    CO310 = "CO310"
    CO311 = "CO311"
    CO312 = "CO312"
    CO401 = "CO401"
    CO402 = "CO402"
    CO403 = "CO403"
    CO404 = "CO404"
    CO405 = "CO405"
    CO406 = "CO406"
    CO407 = "CO407"
    CO408 = "CO408"
    CO409 = "CO409"
    CO410 = "CO410"
    CO411 = "CO411"
    CO501 = "CO501"
    CO502 = "CO502"
    CO503 = "CO503"
    CO504 = "CO504"
    CO505 = "CO505"
    CO506 = "CO506"
    CO507 = "CO507"
    CO601 = "CO601"
    CO602 = "CO602"
    CO603 = "CO603"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Snippet:
    """One file of an example: its name (config.pbtxt, customops.toml, op.c: what it is, after a space) and
    text; or, named `$`, a command line and what it prints."""

    name: str
    text: str

    @property
    def shell(self) -> bool:
        return self.name == "$"

    @property
    def lines(self) -> list[str]:
        lines = self.text.splitlines()
        return [f"$ {lines[0]}", *lines[1:]] if self.shell else lines

    @property
    def fence(self) -> str:
        """The language of its Markdown code block."""
        return "console" if self.shell else FENCES.get(Path(self.name.split()[0]).suffix, "text")


@dataclass(frozen=True)
class Example:
    """A minimal case that triggers the code, taken from the test named (tests/<file>::<test>)."""

    test: str
    files: tuple[Snippet, ...]


@dataclass(frozen=True)
class Entry:
    """A row of the code table."""

    code: Code
    severity: Severity
    title: str
    what: str
    why: str
    fix: str
    example: Example | None = None
    references: tuple[str, ...] = ()  # the sources it models: "<project> <path>: <function or section>"
    emitted: bool = True  # False: reserved, documented but not reported yet


def _entry(row: dict) -> Entry:
    example = None
    if "example" in row:
        example = Example(row["example"]["test"], tuple(Snippet(f["name"], f["text"]) for f in row["example"]["files"]))
    return Entry(Code(row["code"]), Severity.parse(row["severity"]), row["title"], row["what"], row["why"],
                 row["fix"], example, tuple(row.get("references", ())), row.get("emitted", True))


_TABLE = tuple(_entry(row) for row in json.loads(packagedata.read_text("codes.json")))
CODES: dict[Code, Entry] = {c.code: c for c in _TABLE}  # every Code (tests/test_code_docs.py), in the table's order


README_BEGIN = "<!-- finding codes: generated from customops/codes.py by `python -m customops.codes --write-docs` -->"
README_END = "<!-- end of finding codes -->"


def docs_url(code: str) -> str:
    """The code's documentation page, docs/codes/<code>.md in the project's repository (SARIF helpUri)."""
    from customops import PROJECT_URL

    return f"{PROJECT_URL}/blob/main/docs/codes/{code}.md"


def _sections(c: Entry) -> list[tuple[str, list[tuple[str, ...]]]]:
    """The template every explanation follows: (heading, lines); a line's parts alternate between prose and
    what is typed (a command, a manifest entry, a comment), which the docs show as code."""
    return [
        ("What it detects", [(c.what,)]),
        ("Why it matters", [(c.why,)]),
        ("How to fix it", [(c.fix,)]),
        ("How to suppress it", [
            ("Every finding of it: ", f"customops check --ignore {c.code}", ", or in customops.toml ",
             f'[check] ignore = ["{c.code}"]'),
            ("Some findings: ", f'[check] ignore = [{{ code = "{c.code}", library = "<glob>", symbol = "<glob>", '
             'reason = "<why>" }]'),
            ("One line of a config.pbtxt: ", f"# customops: ignore[{c.code}]", " on that line (",
             f"ignore-file[{c.code}]", " for the whole file)"),
        ]),
    ]


def explain(code: str) -> str:
    c = CODES[Code(code)]
    lines = [f"{c.code}: {c.title} (default severity: {c.severity})"]
    for heading, body in _sections(c):
        lines += ["", heading, *(f"  {''.join(parts)}" for parts in body)]
    if c.example is not None:
        lines += ["", f"Example (from {c.example.test})"]
        for snippet in c.example.files:
            lines += [f"  {'a command line' if snippet.shell else snippet.name}",
                      *(f"    {line}".rstrip() for line in snippet.lines)]
    if c.references:
        lines += ["", "References", *(f"  {reference}" for reference in c.references)]
    return "\n".join(lines)


def _markdown(text: str) -> str:
    """Prose for Markdown: <placeholders>, & and * outside `code spans` escaped, so that they show as written."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def _markdown_line(parts: tuple[str, ...]) -> str:
    return "".join(_markdown(part) if i % 2 == 0 else f"`{part}`" for i, part in enumerate(parts))


def help_markdown(code: str) -> str:
    """The explanation as `customops explain` prints its template, in Markdown: SARIF's rule help."""
    return _page(CODES[Code(code)], [])


def doc_page(code: str) -> str:
    """docs/codes/<code>.md: the explanation, its example and its references, in Markdown."""
    c = CODES[Code(code)]
    extra: list[str] = []
    if c.example is not None:
        extra += ["", "## Example", "", f"From `{c.example.test}`:"]
        for snippet in c.example.files:
            extra += ["", "A command line:" if snippet.shell else f"{_markdown(snippet.name)}:", "",
                      f"```{snippet.fence}", *snippet.lines, "```"]
    if c.references:
        extra += ["", "## References", "", *(f"- {_markdown(reference)}".replace("_", "\\_")  # _dl_fixup
                                            for reference in c.references)]
    return _page(c, extra)


def _page(c: Entry, extra: list[str]) -> str:
    lines = [f"# {c.code}: {_markdown(c.title)}", "", f"Default severity: {c.severity}."]
    if not c.emitted:
        lines += ["", "Reserved: documented, but no check reports it yet."]
    for heading, body in _sections(c):
        bullet = "- " if len(body) > 1 else ""
        lines += ["", f"## {heading}", "", *(bullet + _markdown_line(parts) for parts in body)]
    lines += [*extra, "", f"`customops explain {c.code}` prints this explanation.", ""]
    return "\n".join(lines)


def readme_table() -> str:
    """The table of codes in docs/codes/README.md, between README_BEGIN and README_END."""
    rows = [f"| [{c.code}]({c.code}.md) | {c.severity} | {_markdown(c.title)}"
            f"{'' if c.emitted else ' (reserved: not reported yet)'} |" for c in _TABLE]
    return "\n".join([README_BEGIN, "| code | severity | meaning |", "|---|---|---|", *rows, README_END])


def generated(root: Path) -> dict[Path, str]:
    """Every generated file under the checkout `root` with the content it should have."""
    readme = root / "docs" / "codes" / "README.md"
    text = readme.read_text()
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    pages = {root / "docs" / "codes" / f"{code}.md": doc_page(code) for code in CODES}
    return {readme: text[:start] + readme_table() + text[end:], **pages}


def main(argv: list[str]) -> int:
    """`python -m customops.codes --write-docs [CHECKOUT]`: rewrite docs/codes/ (its table, a page per code)."""
    if not argv or argv[0] != "--write-docs":
        print("usage: python -m customops.codes --write-docs [CHECKOUT]", file=sys.stderr)
        return 2
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).parent.parent)
    (root / "docs" / "codes").mkdir(parents=True, exist_ok=True)
    for path, content in generated(root).items():
        path.write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
