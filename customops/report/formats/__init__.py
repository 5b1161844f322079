"""The report formats of `customops check`, one module each behind one signature (spec.ReportFormat: render a
run, render the exit-2 report, and the options the format reads), in FORMATS, --format's order: the command
builds --format, --statistics's check and each --<format> FILE option from it. Every start of check reads it, a
cached one too, so a format module imports its renderer only when it renders."""

from __future__ import annotations

from customops.report.formats import github, gitlab, json, junit, sarif, text
from customops.report.formats.spec import ReportFormat

FORMATS: dict[str, ReportFormat] = {f.name: f for f in (text.FORMAT, json.FORMAT, sarif.FORMAT, junit.FORMAT,
                                                         github.FORMAT, gitlab.FORMAT)}
