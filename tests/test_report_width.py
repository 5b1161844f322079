"""The text report at 80 columns (issue #18): on a terminal, findings wrap at spaces with a hanging indent;
a path or symbol longer than a line is cut after a separator, and every continuation line is indented, so
no line is cut mid-path where a reader would take it for the start of a new one."""

from __future__ import annotations

from customops.report.wrap import wrap


def test_short_text_stays_on_one_line():
    assert wrap("op library libfoo.so does not exist", 80, 14, 14) == ["op library libfoo.so does not exist"]


def test_text_wraps_at_spaces_with_a_hanging_indent():
    lines = wrap("word " * 30, 40, 10, 6)
    assert all(len(line) <= 40 for line in lines[1:]) and len(lines[0]) <= 30
    assert all(line.startswith("      word") for line in lines[1:])
    assert " ".join(line.strip() for line in lines).split() == ["word"] * 30


def test_a_path_longer_than_the_line_is_cut_after_a_slash():
    path = "/opt/tritonserver/backends/pytorch/" + "very_long_directory_name/" * 4 + "libtorch_op.so"
    lines = wrap(f"needed by {path} here", 60, 0, 8)
    assert "".join(line.strip() if i else line for i, line in enumerate(lines)).replace(" ", "") == (
        f"neededby{path}here")
    assert all(len(line) <= 60 for line in lines)
    assert all(line.rstrip().endswith("/") for line in lines[1:-2])


def test_a_word_without_separators_is_cut_at_the_line_end():
    lines = wrap("x" * 100, 40, 0, 4)
    assert lines == ["x" * 40, "    " + "x" * 36, "    " + "x" * 24]


def test_a_heading_too_long_for_a_rule_is_printed_whole(tmp_path):
    import io

    from customops.report.escape import console
    from customops.report.wrap import heading

    out = io.StringIO()
    shown = console(out, "never")
    shown.width = 40
    heading(shown, "a" * 10)
    heading(shown, "/very/long/" * 6)
    first, second = out.getvalue().splitlines()
    assert "a" * 10 in first and len(first) == 40
    assert second == "── " + "/very/long/" * 6


def test_the_example_report_at_80_columns_wraps_with_hanging_indents(tmp_path):
    """The README's example on an 80-column terminal (a pseudo-terminal, COLUMNS=80): no line longer than
    80 columns, every continuation of a finding indented under its text, and nothing lost or reordered
    against the report to a pipe, which keeps one line per finding."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from terminal import run_on_terminal

    from fixtures.example import install

    root = Path(__file__).resolve().parent.parent
    container = install()
    argv = [sys.executable, "-m", "customops", "check", "examples/model_repository", "--container-root",
            str(container)]
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root), "CUSTOMOPS_CACHE_DIR": str(tmp_path),
           "NO_COLOR": "1"}
    status, output = run_on_terminal(argv, env, root)
    assert status == 1
    wrapped = output.replace("\r\n", "\n").splitlines()
    plain = subprocess.run(argv, capture_output=True, text=True, cwd=root, env=env, timeout=300).stdout.splitlines()
    assert max(len(line) for line in wrapped) <= 80 < max(len(line) for line in plain)
    starts = re.compile(r"^(CO\d{3} |    \S|──|customops |no findings|note: |FAIL |OK )")
    for line in wrapped:
        assert starts.match(line) or line.startswith(("              ", "        ", "      ")), line

    def text(lines: list[str]) -> str:
        return "".join(line for line in lines if not line.startswith("──")).replace(" ", "")

    assert text(wrapped) == text(plain)  # nothing lost, nothing reordered
