"""GitLab Code Quality (customops.report.check.to_gitlab). Its exit-2 report: one blocker issue, the error's."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from customops.app.request import ReportOptions
from customops.report.formats.spec import ReportFormat, SideFile

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


def render(run: CheckRun, base: str, options: ReportOptions, stream: TextIO | None) -> str:
    from customops.report.check import to_gitlab

    return to_gitlab(run.result, base)


def error(message: str, where: str) -> str:
    import hashlib

    from customops.report.escape import dumps, printable

    text = printable(message)
    return dumps([{"description": text, "check_name": "customops", "fingerprint": hashlib.sha256(
        text.encode("utf-8", "replace")).hexdigest(), "severity": "blocker",
        "location": {"path": where, "lines": {"begin": 1}}}], indent=2)


FORMAT = ReportFormat("gitlab", "gitlab (GitLab Code Quality)", render, error, side_file=SideFile(
    "GitLab Code Quality", "written even when the run ends with exit 2"))
