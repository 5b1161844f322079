"""`customops check` without a repository finds the model repositories under the current directory, as ruff
finds its files: a directory with a model directory (one holding config.pbtxt) in it; outermost first, never
through a symbolic link, a hidden directory or a virtual environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from customops.errors import CustomopsError
from customops.triton.discovery import find_model_repositories


def model(directory: Path, name: str) -> None:
    (directory / name).mkdir(parents=True)
    (directory / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n')
    (directory / name / "1").mkdir()
    (directory / name / "1" / "model.py").write_text("")


def test_a_directory_whose_model_directories_hold_config_pbtxt_is_a_model_repository(tmp_path):
    model(tmp_path / "models", "a")
    model(tmp_path / "deploy" / "triton" / "repository", "b")
    assert find_model_repositories(str(tmp_path)) == [str(tmp_path / "models"),
                                                       str(tmp_path / "deploy" / "triton" / "repository")]


def test_the_search_does_not_enter_a_repository_it_found(tmp_path):
    model(tmp_path / "models", "a")
    model(tmp_path / "models" / "a" / "nested", "b")
    assert find_model_repositories(str(tmp_path)) == [str(tmp_path / "models")]


def test_hidden_directories_virtual_environments_and_symbolic_links_are_not_searched(tmp_path):
    model(tmp_path / ".git" / "models", "a")
    model(tmp_path / "venv" / "models", "b")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    model(tmp_path / "elsewhere" / "models", "c")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "work" / "loop").symlink_to(tmp_path / "work")
    with pytest.raises(CustomopsError):
        find_model_repositories(str(tmp_path / "work"))
    assert find_model_repositories(str(tmp_path)) == [str(tmp_path / "elsewhere" / "models")]


def test_a_model_directory_may_be_a_symbolic_link_as_triton_follows_it(tmp_path):
    model(tmp_path / "store", "a")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "a").symlink_to(tmp_path / "store" / "a")
    assert str(tmp_path / "models") in find_model_repositories(str(tmp_path))


def test_none_found_is_one_line_exit_2_saying_how_to_name_one(tmp_path):
    (tmp_path / "src").mkdir()
    result = subprocess.run([sys.executable, "-m", "customops", "check", "--triton-release", "25.03"],
                            capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "no model repository given, and none found here" in result.stderr
    assert "customops check MODEL_REPOSITORY" in result.stderr


def test_check_without_a_repository_checks_those_found(tmp_path):
    model(tmp_path / "models", "a")
    result = subprocess.run([sys.executable, "-m", "customops", "check", "--triton-release", "25.03", "--format",
                             "json", "--no-cache"], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert result.returncode == 0, result.stderr
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == ["a"]
