"""`customops check` as its command line asks it (a CheckCommand): the check's request read from it (the
repositories named, found under the working directory or read from the server's command line), then its answer:
every report from the cache when an earlier run with the same inputs left them all (customops.app.report_cache),
else the run of one check for the command to render them from, and to keep in the cache as rendered. app renders
and writes nothing: the report layer does, through the command."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from customops import ownership
from customops.app import report_cache
from customops.app.request import CheckCommand, CheckRequest, RelativeTo, ReportRequest
from customops.app.target import root_warnings
from customops.errors import CustomopsError, printable
from customops.triton.manifest import checkout_root, find_manifest

if TYPE_CHECKING:  # a cached answer needs no check
    from customops.app.checking import CheckRun

SERVER_PROGRAM = "tritonserver"


class Cached(NamedTuple):
    """Every report the command asks for, as an earlier run rendered it, in the command's order."""

    texts: tuple[str, ...]
    exit_code: int  # the check's: 1 when findings reach --fail-on (before --exit-zero)
    summary: str  # the summary line
    warnings: tuple[str, ...]  # for standard error, before the reports


class ToRender(NamedTuple):
    """One report to render from the check's run: its paths relative to `base`; `key`: where the cache keeps it
    (None: it is not cached)."""

    report: ReportRequest
    base: str
    key: list[str] | None


class Checked(NamedTuple):
    """The check's run, and each report the command asks for, to render from it."""

    run: CheckRun
    reports: tuple[ToRender, ...]
    warnings: tuple[str, ...]

    def keep(self, report: ToRender, text: str, summary: str) -> None:
        """The report as rendered, for the next run with the same inputs (`summary`: the summary line, which a
        run whose reports all go to files writes to standard error)."""
        if report.key is not None:
            report_cache.store_report(report.key, text, self.run.exit_code, self.run.dependencies, summary)


def check_request(command: CheckCommand) -> CheckRequest:
    """The options that decide the check's answer; ValueError for an unknown code in --select/--ignore, or an
    option the server's command line after -- says too."""
    from customops.selection import parse_selectors

    named = [*command.repositories, *command.more_repositories]
    _not_the_server(command.repositories)
    if not named and command.server is None and command.container.image:
        from customops.app.target import baked_repositories
        from customops.cachedir import default_cache_dir

        named = baked_repositories(command.container.image, None if not command.use_cache
                                   else command.cache_dir or default_cache_dir(), command.container.platform)
    elif not named and command.server is None:
        from customops.triton.discovery import find_model_repositories

        named = find_model_repositories(os.getcwd())
    request = CheckRequest(
        repositories=tuple(os.path.abspath(r) for r in named), container=command.container,
        manifest=command.manifest, mounts=command.mounts, model_config_name=command.model_config_name,
        models=frozenset(command.load_model) if command.load_model else None, fail_on=command.fail_on,
        select=parse_selectors(command.select, "--select") if command.select is not None else None,
        ignore=parse_selectors(command.ignore, "--ignore"), probe=command.probe, cache_dir=command.cache_dir,
        use_cache=command.use_cache)
    if command.server is None:
        return request
    from customops.app.server_command import with_server_command

    return with_server_command(request, command.server)


def _not_the_server(repositories: tuple[str, ...]) -> None:
    """`check --container-root C tritonserver --model-repository=R` (the `--` forgotten): the server's program is
    no model repository; say where its command line goes rather than that ./tritonserver does not exist."""
    for repository in repositories:
        if os.path.basename(repository.rstrip("/")) == SERVER_PROGRAM and not os.path.isdir(repository):
            raise CustomopsError(f"{printable(repository)} is the server, not a model repository: give the server's "
                                 f"command line after --: customops check [OPTIONS] -- {SERVER_PROGRAM} "
                                 "--model-repository=DIR ...")


def answer(command: CheckCommand, request: CheckRequest) -> Cached | Checked:
    """Every report from the cache, or the check's run to render them from (caching off when the cache
    directory lies in a repository: report_cache.guarded)."""
    request, notes = report_cache.guarded(request)
    bases = [report_base(report, command.base_dir, request) for report in command.reports]
    keys = [report_cache.report_key(request, _variant(report, command), base) if report.cached else None
            for report, base in zip(command.reports, bases, strict=True)]
    hits = [hit for k in keys if k is not None and (hit := report_cache.cached_report(k)) is not None]
    if len(hits) == len(command.reports):
        return Cached(tuple(hit["report"] for hit in hits), int(hits[0]["exit_code"]), hits[0]["summary"],
                      _warnings(request))
    from customops.app.checking import check_repositories

    run = check_repositories(request, notes)
    reports = tuple(ToRender(report, base, key) for report, base, key in zip(command.reports, bases, keys,
                                                                              strict=True))
    return Checked(run, reports, _warnings(request))


def _variant(report: ReportRequest, command: CheckCommand) -> str:
    """The report's part of its cache key: its format, and the option that changes what it holds."""
    return f"{report.format} with statistics" if command.options.statistics else report.format


def _warnings(request: CheckRequest) -> tuple[str, ...]:
    """On the container (--container-root that is not a container's root) or on a discovered manifest or profile
    passed over (customops.ownership): standard error says them before the report whose findings they explain;
    the report's notes say them too."""
    return (*root_warnings(request.container), *ownership.warnings())


def report_base(report: ReportRequest, base_dir: str | None, request: CheckRequest) -> str:
    """The directory a report's paths are relative to: for the CI formats the git checkout (where code scanning
    and workflow annotations resolve them) or --base-dir; else the first repository, or its checkout when the
    manifest lies between the two (its findings' paths would otherwise be absolute)."""
    base = request.repositories[0] if request.repositories else os.getcwd()
    if report.relative_to is RelativeTo.CHECKOUT:
        return os.path.abspath(base_dir) if base_dir else checkout_root(base)
    manifest = request.manifest or find_manifest(list(request.repositories))
    checkout = checkout_root(base)
    if manifest and _inside(manifest, checkout) and not _inside(manifest, base):
        return checkout  # a manifest above the repository: every path relative to the checkout, its own too
    return base


def error_base(command: CheckCommand) -> str:
    """The directory the reports of a run that could not check place their error relative to: --base-dir, else
    the checkout holding the first repository named (else the working directory)."""
    named = command.named
    return os.path.abspath(command.base_dir) if command.base_dir else checkout_root(named[0] if named else
                                                                                      os.getcwd())


def _inside(path: str, directory: str) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(directory).rstrip("/") + "/")
