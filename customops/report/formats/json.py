"""The JSON report (customops.check/1, customops.report.check.to_json); with --statistics, a statistics object
beside the findings. No exit-2 report: the error line on standard error says it (a file an earlier run left,
`"ok": true` perhaps, is removed: its verdict is not this run's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops import schemas
from customops.app.request import RelativeTo, ReportOptions
from customops.report.formats.spec import ReportFormat

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    from customops.report.check import to_json

    return to_json(run.result, run.fail_on, run.exit_code, base, options.statistics)


def error(message: str, where: str) -> None:
    return None


FORMAT = ReportFormat("json", f"json ({schemas.CHECK})", render, error, RelativeTo.REPOSITORY, statistics=True)
