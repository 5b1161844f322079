"""customops profile create: record a Triton container's facts, to check against in CI without the image."""

from __future__ import annotations

import argparse
from pathlib import Path

from customops.errors import CustomopsError, printable
from customops.image.reference import DEFAULT_PLATFORM, platform


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="record a container's facts for CI", description=__doc__)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION",
                               help="customops profile ACTION --help describes it")
    create = actions.add_parser("create", help="write a profile of the container (default: this machine)")
    create.add_argument("--container-root", metavar="DIR",
                        help="the container's unpacked filesystem (default: /, when run inside the image)")
    create.add_argument("--backend-directory", metavar="DIR",
                        help="the server's --backend-directory, inside the container (default: the one the recorded "
                             "server arguments give, else /opt/tritonserver/backends)")
    create.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the profile to write (commit it as customops-profile.json next to the repository)")
    create.add_argument("--image", metavar="REFERENCE",
                        help="the image to profile, read as `check --image` reads it (docker-archive:FILE, "
                             "oci:DIR[:TAG], oci-archive:FILE[:TAG]); or, with --container-root or inside the image, "
                             "only its name as you pull it (nvcr.io/nvidia/tritonserver:24.12-py3): recorded, and "
                             "named by every check against the profile")
    create.add_argument("--platform", default=DEFAULT_PLATFORM, metavar="OS/ARCH", type=platform,
                        help="with --image: the image of a multi-platform index to profile (default: %(default)s)")
    create.add_argument("server_args", nargs="*", metavar="-- TRITONSERVER_ARG",
                        help="the server's arguments, recorded: a check against the profile reads its backend "
                             "directory, config name, models to load, auto-complete setting and TensorRT plugins "
                             "from them, as launch reads the line it starts")
    create.set_defaults(run=run)
    p.set_defaults(cache_dir=None)


def run(args: argparse.Namespace) -> int:
    from customops import progress
    from customops.app.server_command import profile_backend_directory
    from customops.app.target import image_container
    from customops.cachedir import default_cache_dir
    from customops.elf.cache import ElfReader
    from customops.image.reference import readable
    from customops.triton.container import from_root, write_profile

    if args.image is not None and not args.image.isprintable():
        raise CustomopsError(f"--image {printable(args.image)}: contains a control character")
    backend_directory = profile_backend_directory(tuple(args.server_args), args.backend_directory)
    reader = ElfReader(Path(args.cache_dir) if args.cache_dir else None)
    image = args.image if args.image and args.container_root is None and readable(args.image) else None
    with progress.shown(f"profiling {image or args.container_root or '/'}"):
        progress.stage("reading its facts")
        if image:
            container = image_container(image, backend_directory, reader, args.cache_dir or default_cache_dir(),
                                        args.platform)
        else:
            container = from_root(args.container_root or "/", backend_directory, reader)
        progress.stage("recording its libraries")
        server_args = tuple(args.server_args) or (container.server_args if image else ())  # else its Cmd's
        write_profile(container, args.output, server_args, container.image or args.image)
    print(f"wrote {args.output}")
    return 0

