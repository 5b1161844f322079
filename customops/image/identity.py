"""What names an image's content without reading it, for the caches that would otherwise answer for the image a
reference named before: a file's identity (an archive saved anew at the same path is another image), an OCI
layout's index, a daemon's image ID. A pipe has none: what comes through it is known only by reading it."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess

from customops.image.reference import ImageReference, Transport

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
RUNTIMES = {Transport.DOCKER_DAEMON: "docker", Transport.PODMAN: "podman"}


def inspected_id(ref: ImageReference) -> str | None:
    """The ID the daemon gives the image it holds under that name (`image inspect`), or None."""
    argv = [RUNTIMES[ref.transport], "image", "inspect", "--format", "{{.Id}}", ref.path]
    if shutil.which(argv[0]) is None:
        return None
    try:
        found = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    digest = found.stdout.decode("ascii", "replace").strip()
    return digest if found.returncode == 0 and DIGEST.fullmatch(digest) else None


def identity(ref: ImageReference) -> str | None:
    """A text that changes whenever what `ref` names may have changed; None where nothing says (a pipe)."""
    if ref.transport.streamed:
        found = inspected_id(ref)
        return None if found is None else f"{ref}={found}"
    path = os.path.join(ref.path, "index.json") if ref.transport is Transport.OCI else ref.path
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return f"{ref}={st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ctime_ns:x}"
