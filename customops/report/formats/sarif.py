"""SARIF 2.1.0 for code scanning (customops.report.check.to_sarif). No exit-2 report: code scanning would take a
file without the findings for an analysis that found none and close every open alert; with no file, the upload
step skips and the alerts stay as the last complete run left them (docs/ci.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops.app.request import ReportOptions
from customops.report.formats.spec import ReportFormat, SideFile

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    from customops.report.check import to_sarif

    return to_sarif(run.result, base)


def error(message: str, where: str) -> None:
    return None


FORMAT = ReportFormat("sarif", "sarif (code scanning)", render, error, side_file=SideFile(
    "SARIF", "not written when the run ends with exit 2, so that no upload closes open alerts"))
