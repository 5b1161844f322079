"""Shell completion (issue #18): `customops completion bash|zsh|fish` prints a script generated from the
parsers themselves, so it offers exactly this version's subcommands, options and choices. The bash script
is run in a real bash the way readline calls it (COMP_WORDS, COMP_CWORD)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from customops.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent


def script(shell: str) -> str:
    result = subprocess.run([sys.executable, "-m", "customops", "completion", shell], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    return result.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "customops.bash"
    path.write_text(script("bash"))
    return path


def complete(bash_script: Path, *words: str, cwd: Path | None = None) -> list[str]:
    """What bash offers for the command line `words` (the last one is being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ("customops", *words))
    program = (f"source {bash_script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; COMPREPLY=(); _customops; "
               "printf '%s\\n' \"${COMPREPLY[@]}\"")
    result = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_bash_completes_every_subcommand(bash_script):
    assert complete(bash_script, "") == list(SUBCOMMANDS)


def test_bash_completes_a_subcommands_own_options(bash_script):
    assert complete(bash_script, "check", "--fa") == ["--fail-on", "--fail-on-target"]
    assert complete(bash_script, "scan", "--fa") == []  # scan has no --fail-on


def test_bash_completes_an_options_choices(bash_script):
    assert complete(bash_script, "check", "--format", "") == ["text", "json", "sarif", "junit", "github", "gitlab"]
    assert complete(bash_script, "check", "examples", "--color", "a") == ["auto", "always"]


def test_bash_completes_file_names_for_a_path_option_and_the_repository(bash_script, tmp_path):
    (tmp_path / "models").mkdir()
    assert complete(bash_script, "check", "--manifest", "mo", cwd=tmp_path) == ["models"]
    assert complete(bash_script, "check", "mo", cwd=tmp_path) == ["models"]


def test_bash_completes_a_nested_subcommand(bash_script):
    assert complete(bash_script, "profile", "") == ["create"]
    assert "--output" in complete(bash_script, "profile", "create", "--")


def test_bash_script_is_valid_bash(bash_script):
    assert subprocess.run(["bash", "-n", str(bash_script)], timeout=60).returncode == 0


def test_zsh_script_loads_the_bash_function_through_bashcompinit():
    text = script("zsh")
    assert text.startswith("#compdef customops\n") and "bashcompinit" in text and "_customops()" in text
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n", "-c", text], timeout=60).returncode == 0


def test_fish_script_completes_subcommands_and_choices():
    text = script("fish")
    assert "complete -c customops -n __fish_use_subcommand -a check" in text
    assert "-l format -l output-format -x -a 'text json sarif junit github gitlab'" in text
    if shutil.which("fish"):
        assert subprocess.run(["fish", "--no-execute", "-c", text], timeout=60).returncode == 0


def test_an_unknown_shell_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "customops", "completion", "tcsh"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert result.returncode == 2 and "usage: customops completion" in result.stderr
