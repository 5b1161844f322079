"""What `customops check` is asked: the options that decide its answer, parsed and typed (the presentation
options, such as the format, stay with the command)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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
