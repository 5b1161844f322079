"""JUnit XML for test dashboards (customops.report.junit). Its exit-2 report: one test in error, the error's."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops.app.request import ReportOptions
from customops.report.formats.spec import ReportFormat, SideFile

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    from customops.report.junit import to_junit

    return to_junit(run.result, run.fail_on, base, run.seconds)


def error(message: str, where: str) -> str:
    from customops.report.escape import printable, xml

    text = printable(message)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="customops check" tests="1" failures="0" '
            'errors="1" time="0">\n  <testsuite name="customops check" tests="1" failures="0" errors="1" '
            f'time="0">\n    <testcase classname="customops.check" name="customops check" '
            f'file="{xml(printable(where), True)}" time="0"><error message="{xml(text, True)}" type="bad input">'
            f'{xml(text)}</error></testcase>\n  </testsuite>\n</testsuites>\n')


FORMAT = ReportFormat("junit", "junit (test dashboards)", render, error, side_file=SideFile(
    "JUnit XML", "written even when the run ends with exit 2"))
