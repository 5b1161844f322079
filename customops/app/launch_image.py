"""`customops launch --image REF -- tritonserver ...`: the check against the image, then the server started in that
image by the daemon that holds it (`docker run`, `podman run`), with what the check modelled: the image's own
environment (its Env and its entrypoint's exports) under the variables customops sets, passed with `--env`; each
model repository of this machine mounted read-only where the check mounted it (/models, or --mount's place), the
server told that path; the TensorRT plugins customops adds. Only a daemon's image can be started: an archive or a
layout is checked, then refused with the command that loads it."""

from __future__ import annotations

import os
from functools import partial

from customops.app.launch import environment_for, mounts_for, prepare
from customops.app.launch_decision import Decision, FailureReport, LaunchRequest
from customops.app.server_command import settings
from customops.errors import CustomopsError
from customops.image.identity import RUNTIMES, inspected_id
from customops.image.reference import DEFAULT_PLATFORM
from customops.triton.mounts import Mounts, container_of, parse_mount
from customops.triton.serverargs import option_named, parse


def decide_in_image(request: LaunchRequest, image: str, failure_report: FailureReport,
                    platform: str = DEFAULT_PLATFORM, run_args: tuple[str, ...] = ()) -> Decision:
    """What to start: `RUNTIME run --rm RUN_ARGS --volume=... --env=... NAME SERVER_ARGV`, and whether the check
    lets it start. Never cached: the image's layers are (customops' image cache), the verdict is checked anew."""
    from customops.app.probing import probe_settings
    from customops.app.target import image_container
    from customops.cachedir import default_cache_dir
    from customops.elf.cache import ElfReader
    from customops.image.reference import parse as parse_reference

    ref = parse_reference(image)
    runtime = RUNTIMES.get(ref.transport)
    if runtime is None:
        raise CustomopsError(f"--image {image}: launch starts the server in the image through the daemon that holds "
                             "it: load it (docker load -i FILE, or skopeo copy) and name it docker-daemon:NAME or "
                             "podman:NAME (`customops check --image` checks it as it is)")
    checked_id = inspected_id(ref)  # run that image, not whatever the name names when docker run resolves it
    argv = list(request.server_argv)
    server = settings(parse(argv))
    reader = ElfReader(use_cache=request.use_cache)
    cache = default_cache_dir() if request.use_cache else None
    container = image_container(image, server.backend_directory, reader, cache, platform)
    assert container.target is not None  # an image's root is read like an unpacked one
    root = container.target.root
    mounts = mounts_for(parse(argv).local_repositories, root, tuple(parse_mount(m) for m in request.mounts))
    options = request.probe
    probe = None if options is None else partial(probe_settings, python=options.python,
                                                 onnxruntime=options.onnxruntime, cache_dir=cache)
    launch = prepare(argv, root, request.manifest, request.fail_on, run_the_check=request.check,
                     existing_preload=request.existing_preload, environ=dict(container.environment), mounts=mounts,
                     probe=probe, reader=reader, container=container) if request.check else None
    if launch is None:
        server_argv, environment = environment_for(argv, root, request.manifest, request.existing_preload, mounts,
                                                   dict(container.environment))
        notes, report = list(container.notes), None
    else:
        server_argv, environment = launch.argv, launch.environment
        report = failure_report(launch)
        notes = [*container.notes, *launch.shown_notes(report is not None)]
    command = run_command(runtime, checked_id or ref.path, (f"--platform={platform}", *run_args), mounts, environment,
                          in_container(server_argv, root, mounts))
    return Decision(command, {}, notes, report)


def run_command(runtime: str, image: str, run_args: tuple[str, ...], mounts: Mounts, environment: dict[str, str],
                server_argv: list[str]) -> list[str]:
    """`image`: the ID the daemon gave the image checked (else its name)."""
    volumes = [f"--volume={host}:{inside}:ro" for inside, host in mounts]
    variables = [f"--env={name}={value}" for name, value in sorted(environment.items())]
    return [runtime, "run", "--rm", *run_args, *volumes, *variables, image, *server_argv]


def in_container(argv: list[str], root: str, mounts: Mounts) -> list[str]:
    """The server's argv with each model repository of this machine named where it is mounted in the container
    (`./models` -> `/models`); a repository the image has stays as it is."""
    repository = option_named("model-repository")
    assert repository is not None
    names = {f"--{name}" for name in (repository.name, *_aliases(repository.id))}
    found = list(argv)
    i = 1
    while i < len(found):
        name, eq, value = found[i].partition("=")
        if name in names and eq:
            found[i] = f"{name}={_mounted(value, root, mounts)}"
        elif name in names and i + 1 < len(found):
            found[i + 1] = _mounted(found[i + 1], root, mounts)
            i += 1
        i += 1
    return found


def _aliases(option_id: str) -> tuple[str, ...]:
    from customops.triton.serverargs import server_options

    return tuple(name for name, option in server_options().items() if option.id == option_id)


def _mounted(value: str, root: str, mounts: Mounts) -> str:
    host = os.path.abspath(value)
    mounted = container_of(root, host, mounts)
    return mounted if mounted != host or not value.startswith("/") else value
