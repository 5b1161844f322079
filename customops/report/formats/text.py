"""The text report, for people (customops.report.text): styled for the terminal it goes to, so never cached. Its
own options: --quiet, --verbose, --color and --statistics. No exit-2 report: the error line on standard error
says it all."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops.app.request import RelativeTo, ReportOptions
from customops.report.formats.spec import ReportFormat

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    """The report as a console for `stream` writes it (its colours, with --color auto, only on a terminal)."""
    from customops.report.escape import console
    from customops.report.text import render_text

    out = console(stream, options.color)
    with out.capture() as captured:
        render_text(run.result, run.fail_on, run.exit_code, base, out, options.verbosity, options.statistics)
    return captured.get()


def error(message: str, where: str) -> None:
    return None


FORMAT = ReportFormat("text", "text for people", render, error, RelativeTo.REPOSITORY, statistics=True,
                      cached=False)
