"""What every report of a check says of the run as a whole: the counts, its summary line and its scope (what
it checked: a run that could not model the server's loads checked the configs only, and says so)."""

from __future__ import annotations

import os

from customops.codes import Severity
from customops.findings import Finding

CONFIGS_ONLY = "configs only: loading not checked"
NOT_MODELLED = ("the server's loads were not modelled, so an OK says nothing of whether the libraries load and "
                "resolve (check against a container root or a profile for that)")


def counts(findings: list[Finding]) -> dict[str, int]:
    return {str(s): sum(1 for f in findings if f.level == s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)}


def relative(path: str | None, base: str | None) -> str | None:
    """Paths inside the repository are reported relative to it, so that code-scanning annotations land."""
    if path is None or base is None:
        return path
    path, base = os.path.abspath(path), os.path.abspath(base)
    return os.path.relpath(path, base) if path.startswith(base.rstrip("/") + "/") else path


def summary_line(result, fail_on: Severity, exit_code: int) -> str:
    """The text report's last line, also written to standard error when every report went to a file, so that
    a CI log says what the run found; after the verdict, `(configs only: loading not checked)` when the run
    could not model the server's loads (its OK is then no full pass: see `scope`)."""
    c = counts(result.findings)
    only = "" if scope(result) == "full" else f" ({CONFIGS_ONLY})"
    return (f"{'FAIL' if exit_code else 'OK'}{only} {c['error']} error(s), {c['warning']} warning(s), "
            f"{c['info']} info; {len(result.suppressed)} suppressed; failing at {fail_on} and above")


def scope(result) -> str:
    """What the run checked: "full", or "configs only" when the server's loads were not modelled (a release's
    facts, a container root with no program to model the server with): the configs, the repository rules and
    the container's facts were checked; what the dynamic linker does with the libraries was not."""
    return "full" if result.loading_checked else "configs only"


def limited(summary: str) -> bool:
    """Whether a summary line (summary_line's, perhaps cached) is that of a run that checked the configs only."""
    return f"({CONFIGS_ONLY})" in summary.split(";", 1)[0]
