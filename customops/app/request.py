"""What `customops check` is asked: its command line as given (CheckCommand, with the reports it asks for and
how they look), and the options that decide its answer, parsed and typed (CheckRequest, the key of its cache)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from customops.codes import Severity

if TYPE_CHECKING:  # launch reads ProbeOptions on its cached path, which reads no container
    from customops.app.target import ContainerChoice


@dataclass(frozen=True)
class ProbeOptions:
    python: str | None = None  # --probe-python (default: this interpreter)
    onnxruntime: str | None = None  # --probe-onnxruntime


@dataclass(frozen=True)
class CheckRequest:
    repositories: tuple[str, ...]  # absolute
    container: ContainerChoice
    manifest: str | None = None  # --manifest (default: the repository's own)
    mounts: tuple[str, ...] = ()  # --mount HOST_DIR:CONTAINER_DIR, as given (parsed with the check)
    model_config_name: str | None = None
    models: frozenset[str] | None = None  # --load-model (None: every model)
    auto_complete: bool = True  # False: tritonserver --disable-auto-complete-config (a config is required)
    model_namespacing: bool = False  # tritonserver --model-namespacing: one name may be in several repositories
    server_notes: tuple[str, ...] = ()  # what the server's command line leaves unchecked (cloud repositories, ...)
    server_plugins: tuple[str, ...] | None = None  # its --backend-config=tensorrt,plugins=; None: no command line
    # was given after --, so a profile's recorded one is read
    fail_on: Severity | None = None  # None: the manifest's
    select: tuple[str, ...] | None = None  # replaces the manifest's select
    ignore: tuple[str, ...] = ()  # added to the manifest's ignore
    probe: ProbeOptions | None = None
    cache_dir: Path | None = None  # None: customops.cachedir.default_cache_dir()
    use_cache: bool = True


class RelativeTo(Enum):
    """The directory a report's paths are relative to."""

    REPOSITORY = "repository"  # the first model repository (its checkout when the manifest lies between the two)
    CHECKOUT = "checkout"  # --base-dir, else the git checkout: where code scanning and workflow annotations look


# ReportRequest, ReportOptions and CheckCommand are NamedTuples, several times cheaper than dataclasses to
# define: every start of check defines them, a cached one too, whose whole run takes a few tens of milliseconds.
class ReportRequest(NamedTuple):
    """One report the command asks for, with what app acts on of its format (app does not import the report
    layer, whose registry, customops.report.formats, the command builds this from)."""

    format: str  # its name in the registry
    output: str | None  # the file it is written to (None: standard output)
    relative_to: RelativeTo
    cached: bool  # False: rendered on every run (the text report, styled for the terminal it goes to)


class ReportOptions(NamedTuple):
    """How the reports look; the check's answer does not depend on it. Each format reads its own."""

    statistics: bool = False  # --statistics: per code, its count (text: instead of the findings, json: beside)
    verbosity: int = 0  # text: -1 --quiet, 1 --verbose
    color: str = "auto"  # text: --color (auto, always, never)


class CheckCommand(NamedTuple):
    """`customops check` as its command line asks it: the one object the command builds from argv and hands
    down. customops.app.check_command reads the CheckRequest from it (the repositories found, the server's
    command line read) in the order the mistakes are reported in."""

    repositories: tuple[str, ...]  # the MODEL_REPOSITORY arguments, as given
    container: ContainerChoice
    more_repositories: tuple[str, ...] = ()  # --model-repository
    server: tuple[str, ...] | None = None  # the server's command line after -- (None: none given)
    manifest: str | None = None
    mounts: tuple[str, ...] = ()
    model_config_name: str | None = None
    load_model: tuple[str, ...] | None = None
    fail_on: Severity | None = None
    select: tuple[str, ...] | None = None  # --select, as given: comma-separated codes and prefixes
    ignore: tuple[str, ...] = ()  # --ignore, as given
    probe: ProbeOptions | None = None
    cache_dir: Path | None = None
    use_cache: bool = True
    reports: tuple[ReportRequest, ...] = ()  # --format's first, then each --<format> FILE
    base_dir: str | None = None
    options: ReportOptions = ReportOptions()
    exit_zero: bool = False
    fail_on_target: str | None = None  # --fail-on-target: with several targets, the exit status is this one's
    columns: tuple[ContainerChoice, ...] = ()  # several containers named (--profile, --image, --container-root,
    # --triton-release): each a column of the upgrade matrix; empty for one (`container`)

    @property
    def named(self) -> tuple[str, ...]:
        """The model repositories the command line names (none: found under the working directory), absolute."""
        return tuple(os.path.abspath(r) for r in (*self.repositories, *self.more_repositories))
