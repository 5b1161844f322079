"""Every report format of `customops check` is one module behind one signature, registered once
(customops.report.formats.FORMATS): each renders a run and its exit-2 report through the registry, the command
line offers exactly what the registry holds, and the command's argparse namespace never leaves commands/."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from customops.app.request import CheckCommand, ReportOptions
from customops.app.target import ContainerChoice
from customops.report.formats import FORMATS

PACKAGE = Path(__file__).resolve().parent.parent / "customops"


def customops(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=300)


@pytest.fixture
def example_run(example):
    """The bundled example's check, as the command runs it: (run, repository)."""
    from customops.app.check_command import check_request
    from customops.app.checking import check_repositories

    repo, container = example
    command = CheckCommand((str(repo),), ContainerChoice(root=str(container)), use_cache=False)
    return check_repositories(check_request(command)), repo


def test_every_format_renders_the_example_with_every_finding(example_run):
    run, repo = example_run
    codes = {f.code for f in run.result.findings}
    assert len(codes) > 3
    for name, report_format in FORMATS.items():
        text = report_format.render(run, str(repo), ReportOptions(), None)
        assert isinstance(text, str), name
        assert all(str(code) in text for code in codes), name


def test_every_format_renders_the_exit_2_report_the_command_writes(tmp_path):
    """A run that cannot check: each format's file holds exactly its error report, or, for a format without one,
    the file an earlier run left there is gone (its verdict is not this run's)."""
    missing = tmp_path / "missing"
    for name, report_format in FORMATS.items():
        output = tmp_path / f"report.{name}"
        output.write_text("an earlier run's report")
        result = customops("check", str(missing), "--triton-release", "25.03", "--format", name, "--output",
                           str(output), cwd=tmp_path)
        message = result.stderr.strip().removeprefix("customops: ")
        assert result.returncode == 2 and message.endswith("model repository does not exist"), name
        expected = report_format.error(message, ".")
        if expected is None:
            assert not output.exists(), name
        else:
            assert output.read_text() == expected.removesuffix("\n") + "\n", name  # a file ends its last line
            assert "model repository does not exist" in expected, name


def _check_parser() -> argparse.ArgumentParser:
    from customops.cli import build_parser

    (sub,) = (a for a in build_parser("check")._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["check"]


def test_the_command_line_offers_exactly_the_registered_formats_and_their_files():
    options = {o: action for action in _check_parser()._actions for o in action.option_strings}
    assert tuple(options["--format"].choices) == tuple(FORMATS)
    files = {o.removeprefix("--") for o, action in options.items() if action.metavar == "FILE"
             and o.removeprefix("--") in FORMATS}
    assert files == {name for name, f in FORMATS.items() if f.side_file is not None}
    assert all(f.description in options["--format"].help for f in FORMATS.values())


def test_statistics_is_refused_exactly_for_the_formats_that_do_not_count(tmp_path):
    for name, report_format in FORMATS.items():
        result = customops("check", str(tmp_path / "missing"), "--triton-release", "25.03", "--format", name,
                           "--statistics", cwd=tmp_path)
        refused = "--statistics applies to the" in result.stderr
        assert result.returncode == 2 and refused is not report_format.statistics, name


def test_the_argparse_namespace_stays_in_the_commands():
    """app/ takes the CheckCommand the command builds from argv, never the parser's namespace."""
    mentions = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted((PACKAGE / "app").rglob("*.py"))
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if "argparse" in line or "Namespace" in line]
    assert mentions == []
