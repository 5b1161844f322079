"""What the server's command line decides about a check, read in one place for every command that has one:
`check -- tritonserver ...`, `launch` and `env` (the line they start), and `check --profile` (the line
`profile create -- ...` recorded). So the same argv always gives the same plan, findings and exit status,
whichever command reads it."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from customops.errors import CustomopsError, InputError, printable
from customops.triton.mounts import Mounts, parse_mount, resolve_host
from customops.triton.serverargs import DEFAULT_BACKEND_DIRECTORY, ServerArgs, parse, tensorrt_plugins, unchecked

if TYPE_CHECKING:
    from customops.app.request import CheckRequest

# the core's own refusal (core/src/server.cc InferenceServer::Init): the server exits before loading anything
NO_REPOSITORY = "tritonserver would refuse to start: --model-repository must be specified"


@dataclass(frozen=True)
class ServerSettings:
    """The server options a check reads, from one command line."""

    backend_directory: str
    model_config_name: str | None
    models: frozenset[str] | None  # explicit mode: the --load-model names (None: every model)
    auto_complete: bool  # False: --disable-auto-complete-config or --strict-model-config=true
    model_namespacing: bool
    plugins: tuple[str, ...]  # --backend-config=tensorrt,plugins=A;B
    notes: tuple[str, ...]  # what the command line leaves unchecked, or loads nothing of


def settings(args: ServerArgs) -> ServerSettings:
    only = args.models_to_check
    return ServerSettings(args.backend_directory or DEFAULT_BACKEND_DIRECTORY, args.model_config_name,
                          frozenset(only) if only is not None else None, args.auto_complete, args.model_namespacing,
                          tensorrt_plugins(args), tuple(unchecked(args)))


def host_repositories(args: ServerArgs, root: str | None, mounts: Mounts) -> tuple[str, ...]:
    """The server's local model repositories as this machine holds them (`root`: the container root, None for
    this machine), resolved as tritonserver would resolve them inside the container; none at all (not even one
    in cloud storage) is the core's refusal to start."""
    if not args.repositories:
        raise CustomopsError(NO_REPOSITORY)
    found = []
    for repository in args.local_repositories:
        host = resolve_host(root, repository, mounts) if root else repository
        if host is None:  # resolved as tritonserver would: a symlink out of the root never reaches this machine
            raise InputError(repository, "model repository does not exist in the container" + (
                "" if root in (None, "/") else " nor as a directory of this machine (to mount at /models)"))
        found.append(os.path.abspath(host))
    return tuple(found)


def applied(request: CheckRequest, server: ServerSettings, *, recorded: bool = False) -> CheckRequest:
    """The request with the server's settings. A command line given after `--` replaces what check's own
    options would say (with_server_command refuses both); one a profile recorded is the default for each
    setting check's own options leave unsaid (`recorded`)."""
    if not recorded:
        return replace(request, container=replace(request.container, backend_directory=server.backend_directory),
                       model_config_name=server.model_config_name, models=server.models,
                       auto_complete=server.auto_complete, model_namespacing=server.model_namespacing,
                       server_notes=server.notes, server_plugins=server.plugins)
    return replace(request, model_config_name=request.model_config_name or server.model_config_name,
                   models=request.models if request.models is not None else server.models,
                   auto_complete=request.auto_complete and server.auto_complete,
                   model_namespacing=request.model_namespacing or server.model_namespacing,
                   server_notes=(*request.server_notes, *server.notes), server_plugins=server.plugins)



def with_server_command(request: CheckRequest, server: tuple[str, ...]) -> CheckRequest:
    """`check -- tritonserver ARGS`: the repositories, backend directory, config name, models to load, auto-complete
    setting and TensorRT plugins read from the server's own command line, as launch reads them; ValueError when
    check's own options say the same thing too."""
    given = [f for f, v in (("MODEL_REPOSITORY", request.repositories), ("--model-config-name",
             request.model_config_name), ("--load-model", request.models is not None),
             ("--backend-directory", request.container.backend_directory != DEFAULT_BACKEND_DIRECTORY)) if v]
    if given:
        raise ValueError(f"{given[0]} is read from the tritonserver command line after --; give it there only")
    sa = parse(list(server) if server else ["tritonserver"])
    root = os.path.abspath(request.container.root) if request.container.root else None
    repositories = host_repositories(sa, root, tuple(parse_mount(m) for m in request.mounts))
    return replace(applied(request, settings(sa)), repositories=repositories)


def profile_backend_directory(server_args: tuple[str, ...], given: str | None) -> str:
    """The backend directory a profile describes: the recorded server arguments' (read as a check against the
    profile reads them: a line the server would refuse is refused now, not at that check), or
    --backend-directory (`given`); both, if they differ, is a mistake."""
    recorded = parse(["tritonserver", *server_args])
    if given is not None and recorded.backend_directory not in (None, given):
        raise CustomopsError(f"--backend-directory {printable(given)} differs from the recorded server arguments' "
                             f"{printable(recorded.backend_directory or '')}: give it once")
    return given or settings(recorded).backend_directory
