"""What a report format of `customops check` declares, one module of customops.report.formats each: its name
and description for --format, its options, how it renders a check's run, and its exit-2 report."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TextIO

from customops.app.request import RelativeTo, ReportOptions

if TYPE_CHECKING:
    from customops.app.checking import CheckRun


class SideFile(NamedTuple):
    """A `--<format> FILE` option: this report also written to FILE, whatever --format prints."""

    what: str  # in its help: "also write the <what> report to FILE"
    on_exit_2: str  # in its help: what becomes of FILE when the run cannot check


class ReportFormat(NamedTuple):
    """One format (a NamedTuple: every start of check defines the registry, a cached one too)."""

    name: str
    description: str  # its part of --format's help
    # the report of a run, its paths relative to the base directory, for the stream it goes to (None: standard
    # output; the text report's colours follow that stream's terminal)
    render: Callable[[CheckRun, str, ReportOptions, TextIO | None], str]
    # the report of a run that could not check (exit 2): the error message, where it points (relative to the base
    # directory); None: this format has none, and a file an earlier run left is removed (its verdict is not this
    # run's)
    error: Callable[[str, str], str | None]
    relative_to: RelativeTo = RelativeTo.CHECKOUT
    side_file: SideFile | None = None
    statistics: bool = False  # --statistics changes it (for the others it is a usage error)
    cached: bool = True  # False: rendered on every run, never kept in the cache
