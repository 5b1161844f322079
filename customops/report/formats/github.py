"""GitHub workflow annotations (customops.report.check.to_github). Its exit-2 report: one error annotation."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops.app.request import ReportOptions
from customops.report.formats.spec import ReportFormat

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    from customops.report.check import to_github

    return to_github(run.result, base)


def error(message: str, where: str) -> str:
    from customops.report.escape import github_data, github_property, printable

    file = f"file={github_property(where)}," if where != "." else ""
    return f"::error {file}title=customops::{github_data(printable(message))}\n"


FORMAT = ReportFormat("github", "github (workflow annotations)", render, error)
