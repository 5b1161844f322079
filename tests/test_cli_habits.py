"""The habits users bring from ruff, shellcheck, mypy and docker (issue #18): -V, a subcommand's own usage
on a usage error, help for every option, -q/-v, --color, --statistics, and `scan --symbols` for grep."""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import run_on_terminal

from customops.cli import SUBCOMMANDS, Formatter, build_parser
from customops.findings import amended
from fixtures.example import install

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "model_repository"
SGR = re.compile(r"\x1b\[[0-9;]*m")
COLOUR_VARIABLES = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE", "COLUMNS")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    repo = tmp_path_factory.mktemp("habits") / "model_repository"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("*.so"))
    return repo, install(repo)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in COLOUR_VARIABLES}
    env["CUSTOMOPS_CACHE_DIR"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "customops-test-cache")
    return {**env, "TERM": "xterm-256color", **extra}


def customops(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "customops", *args], capture_output=True, text=True,
                          env=environment(**env), cwd=ROOT)


def on_terminal(*args: str, **env: str) -> str:
    """customops with its standard output on a pseudo-terminal."""
    return run_on_terminal([sys.executable, "-m", "customops", *args], environment(**env), ROOT)[1]


def check(example, *args: str, **env: str) -> subprocess.CompletedProcess:
    repo, container = example
    return customops("check", str(repo), "--container-root", str(container), *args, **env)


def example_result(example):  # type: ignore[no-untyped-def]
    from customops.app.check import run_check
    from customops.triton.container import from_root
    from customops.triton.manifest import load_manifest

    repo, container = example
    return run_check([str(repo)], load_manifest(str(repo / "customops.toml")), from_root(str(container)), ())


def rendered(result, **options) -> str:  # type: ignore[no-untyped-def]
    from customops.codes import Severity
    from customops.report.check import render_text
    from customops.report.escape import console

    buffer = io.StringIO()
    render_text(result, Severity.ERROR, 1, None, console(buffer), **options)
    return buffer.getvalue()


def test_dash_V_is_version():
    short, long = customops("-V"), customops("--version")
    assert short.returncode == 0 and short.stdout == long.stdout and short.stdout.startswith("customops ")


def test_unknown_option_of_a_subcommand_prints_its_usage():
    for args, prog in ((["check", "--bogus", "x"], "customops check"),
                       (["profile", "create", "-o", "p.json", "--bogus"], "customops profile create"),
                       (["scan", "--bogus", "lib.so"], "customops scan"),
                       (["launch", "--bogus", "--", "tritonserver"], "customops launch")):
        result = customops(*args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"{prog}: error: unrecognized arguments: --bogus\n"), result.stderr
        assert result.stderr.splitlines()[1].startswith(f"usage: {prog} "), result.stderr


def test_missing_option_of_a_subcommand_prints_its_usage():
    for args, prog, error in ((["profile", "create"], "customops profile create", "-o/--output"),
                              (["check", "models", "--format"], "customops check", "expected one argument"),
                              (["scan"], "customops scan", "FILE")):
        result = customops(*args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"usage: {prog} ") and f"{prog}: error: " in result.stderr
        assert error in result.stderr


def test_a_subcommand_parsed_alone_is_the_one_the_whole_command_line_has():
    """main registers only the subcommand it runs (a cached launch should not import the other eight): its
    parser must be the same as in the full command line."""
    whole = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in SUBCOMMANDS:
        alone = build_parser(name)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert list(alone) == [name]
        assert alone[name].format_help() == whole[name].format_help(), name


@pytest.mark.parametrize("columns", ["100", "60", "0", "x", None])
def test_help_is_as_wide_as_shutil_says_the_terminal_is(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert Formatter("customops")._width == argparse.HelpFormatter("customops")._width == \
        shutil.get_terminal_size().columns - 2


def test_every_option_and_positional_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if not action.help:
                missing.append(f"{name}: {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                described = {choice.dest for choice in action._choices_actions if choice.help}
                missing.extend(f"{name} {sub}: no summary" for sub in action.choices if sub not in described)
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")

    walk(build_parser(), "customops")
    assert missing == []


def test_quiet_prints_only_findings_and_the_summary(example):
    normal, quiet = check(example), check(example, "-q")
    assert quiet.returncode == normal.returncode == 1
    lines = quiet.stdout.splitlines()
    assert lines[0].startswith("CO") and lines[-1].startswith("FAIL 7 error(s), 3 warning(s)")
    assert all(line.startswith(("CO", "    ")) for line in lines[:-1])
    assert "no findings" not in quiet.stdout and "note:" not in quiet.stdout and "customops check" not in quiet.stdout
    findings = [line for line in normal.stdout.splitlines() if line.startswith(("CO", "    "))]
    assert lines[:-1] == findings  # every finding, with its runtime message, evidence and fix


def test_verbose_adds_container_facts_and_what_each_clean_model_loads(example):
    normal, verbose = check(example), check(example, "-v")
    assert verbose.returncode == 1
    assert "container: backends onnxruntime, python, pytorch, tensorflow, tensorrt" in verbose.stdout
    assert re.search(r"container: .*TensorRT 10", verbose.stdout)
    assert re.search(r"no findings: text_tf \(backend tensorflow;.*1 op library; 1 load\(s\) predicted\)",
                     verbose.stdout)
    assert set(normal.stdout.splitlines()) - {"no findings: custom, text_tf, upscaler_trt"} <= set(
        verbose.stdout.splitlines())


def test_verbose_shows_every_evidence_line_the_default_report_cuts(example):
    result = example_result(example)
    long = amended(result.findings[0], evidence=tuple(f"evidence line {i}" for i in range(20)))
    result.findings[0] = long
    default, verbose = rendered(result), rendered(result, verbosity=1)
    assert "evidence line 11" in default and "evidence line 12" not in default
    assert "... 8 more evidence line(s) (--verbose shows them)" in default
    assert all(f"evidence line {i}" in verbose for i in range(20)) and "more evidence" not in verbose


def test_verbose_lists_suppressed_findings(example):
    result = example_result(example)
    result.suppressed.append(result.findings.pop())
    shown = rendered(result, verbosity=1)
    assert re.search(r"^suppressed: CO\d{3} \w+ ", shown, re.M) and "; 1 suppressed;" in shown
    assert "suppressed:" not in rendered(result)


def test_color_auto_styles_a_terminal_and_not_a_pipe(example):
    repo, container = example
    assert SGR.search(on_terminal("check", str(repo), "--container-root", str(container), "-q"))
    assert "\x1b" not in check(example).stdout


def test_no_color_removes_all_styling_including_bold(example):
    repo, container = example
    text = on_terminal("check", str(repo), "--container-root", str(container), NO_COLOR="1", FORCE_COLOR="1")
    assert "\x1b" not in text and "CO308 error" in text and "FAIL 7 error(s)" in text


def test_color_never_writes_no_escape_sequence_even_with_force_color(example):
    repo, container = example
    forced = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
    assert "\x1b" not in check(example, "--color", "never", **forced).stdout
    assert "\x1b" not in on_terminal("check", str(repo), "--container-root", str(container), "--color", "never",
                                     **forced)


def test_color_always_styles_a_pipe_even_with_no_color(example):
    result = check(example, "--color", "always", NO_COLOR="1", TERM="dumb")
    assert "\x1b[1;31mCO308 error  \x1b[0m" in result.stdout
    assert SGR.sub("", result.stdout) == check(example).stdout


def test_color_highlights_only_the_reports_own_styles(example):
    """rich's highlighter would colour every number, path and quoted string of a message."""
    result = check(example, "--color", "always", "-q")
    for line in result.stdout.splitlines():
        if line.startswith("\x1b[1;31mCO504"):
            message = line.split("\x1b[0m", 1)[1]
            assert "\x1b" not in message and "1 of its symbols" in message
            break
    else:
        raise AssertionError(result.stdout)


def test_statistics_prints_one_line_per_code_with_its_count(example):
    result = check(example, "--statistics")
    assert result.returncode == 1
    *lines, summary = result.stdout.splitlines()
    assert summary.startswith("FAIL 7 error(s), 3 warning(s)")
    assert len(lines) == 10 and all(re.fullmatch(r" +1  CO\d{3} (error  |warning) \S.*", line) for line in lines)
    assert "    1  CO501 error   TensorRT major version mismatch" in lines
    assert [line.split()[1] for line in lines] == sorted(line.split()[1] for line in lines)


def test_statistics_orders_codes_by_count(example):
    from customops.report.check import _statistics

    first = {}
    for f in example_result(example).findings:
        first.setdefault(f.code, f)
    a, b, c = (first[code] for code in sorted(first)[:3])
    assert [(n, code) for n, code, _ in _statistics([a, b, b, c, c, c])] == [(3, c.code), (2, b.code), (1, a.code)]



def test_scan_symbols_piped_prints_one_full_symbol_per_line(tree):
    library = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    if not os.path.exists(library):
        pytest.skip("no libstdc++ here")
    result = customops("scan", "--symbols", "--no-cache", "--defined-only", library)
    assert result.returncode == 0, result.stderr
    symbols = [line for line in result.stdout.splitlines() if re.match(r"(GLOBAL|WEAK|GNU_UNIQUE|LOCAL)\s", line)]
    assert len(symbols) > 1000
    longest = max(symbols, key=len)
    assert len(longest) > 200 and "…" not in result.stdout  # neither cut at 80 columns nor wrapped
    assert any(line.endswith("std::range_error::~range_error()") for line in symbols)


def test_scan_version_lists_are_sorted(tree):
    from customops.report.scan import version_key

    library = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    if not os.path.exists(library):
        pytest.skip("no libstdc++ here")
    result = customops("scan", "--no-cache", library)
    needed = re.search(r"^  libc\.so\.6: (.*)$", result.stdout, re.M)
    assert needed, result.stdout
    versions = needed.group(1).split(", ")
    assert versions == sorted(versions, key=version_key) and versions.index("GLIBC_2.14") > versions.index(
        "GLIBC_2.3")
    defined = re.search(r"^defines versions: (.*)$", result.stdout, re.M).group(1).split(", ")  # type: ignore[union-attr]
    assert defined == sorted(defined, key=version_key)
    import json

    record = json.loads(customops("scan", "--format", "json", library).stdout)["files"][0]
    assert all(v == sorted(v, key=version_key) for v in record["version_needs"].values())


def test_statistics_with_json_adds_a_statistics_object(example):
    """As `ruff --statistics --output-format json`: the counts as data, not exit 2."""
    import json

    result = check(example, "--statistics", "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    text = check(example, "--statistics").stdout.splitlines()[:-1]
    assert [(v["count"], code, v["severity"]) for code, v in report["statistics"].items()] == \
        [(int(n), code, level) for n, code, level, *_ in (line.split() for line in text)]
    assert report["findings"] and "statistics" not in json.loads(check(example, "--format", "json").stdout)


def test_statistics_with_a_format_that_lists_every_finding_is_a_usage_error(example):
    result = check(example, "--statistics", "--format", "sarif")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.startswith("usage: customops check ")
    assert "--statistics applies to the text and json reports only" in result.stderr


def test_output_format_is_an_alias_of_format_and_o_of_output(example, tmp_path):
    """ruff's --output-format and the -o every tool has."""
    result = check(example, "--output-format", "sarif", "-o", str(tmp_path / "r.sarif"))
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert '"version": "2.1.0"' in (tmp_path / "r.sarif").read_text()


def test_exit_zero_passes_the_command_whatever_the_findings_but_not_bad_input(example, tmp_path):
    result = check(example, "--exit-zero", "--format", "json")
    assert result.returncode == 0 and '"ok": false' in result.stdout  # the report still says what it found
    assert check(example, "--exit-zero").stdout.splitlines()[-1].startswith("FAIL ")
    bad = customops("check", str(tmp_path / "missing"), "--container-root", "/", "--exit-zero")
    assert bad.returncode == 2


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_prints_the_version(command):
    """`customops check --version`, as `ruff check --version` and `docker run --version` answer."""
    result = customops(command, "--version")
    assert result.returncode == 0 and result.stdout == customops("--version").stdout != "", result.stderr
