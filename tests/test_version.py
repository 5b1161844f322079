"""The version has one source, `customops.__version__`: the package metadata reads it from there, and the
changelog has a section for it."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import customops

ROOT = Path(__file__).parent.parent


def test_pyproject_takes_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "customops.__version__"}


def test_the_changelog_has_a_section_for_the_version():
    assert f"\n## [{customops.__version__}]" in (ROOT / "CHANGELOG.md").read_text()
