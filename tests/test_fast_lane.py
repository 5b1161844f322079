"""The fast lane (`./scripts/test.sh --fast`) leaves out exactly the suites conftest names, and each exists."""

from pathlib import Path

from conftest import ORACLE_SUITES, SLOW_SUITES

TESTS = Path(__file__).parent


def test_every_suite_the_fast_lane_leaves_out_exists():
    assert sorted(s for s in ORACLE_SUITES | SLOW_SUITES if not (TESTS / f"{s}.py").exists()) == []


def test_the_fast_lane_command_selects_by_the_two_markers():
    script = (TESTS.parent / "scripts" / "test.sh").read_text()
    assert 'fast=(-m "not oracle and not slow")' in script
