"""What names an image's content without reading it, for the caches that would otherwise answer for the image a
reference named before: a file's identity (an archive saved anew at the same path is another image), an OCI
layout's index, a daemon's image ID. A pipe has none: what comes through it is known only by reading it."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from functools import cache

from customops.image.reference import DIGEST, ImageReference, Transport

ID_LIMIT = 256  # bytes of `image inspect`'s answer read
RUNTIMES = {Transport.DOCKER_DAEMON: "docker", Transport.PODMAN: "podman"}


@cache
def inspected_id(ref: ImageReference) -> str | None:
    """The ID the daemon gives the image it holds under that name (`image inspect`), or None; asked once a run (the
    report cache's key, the kept configuration and what launch runs are that one image)."""
    argv = [RUNTIMES[ref.transport], "image", "inspect", "--format", "{{.Id}}", ref.path]
    if shutil.which(argv[0]) is None:
        return None
    try:
        with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            said = proc.stdout.read(ID_LIMIT)  # an ID is 71 bytes: nothing longer is read, however much comes
            proc.stdout.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                return None
    except OSError:
        return None
    digest = said.decode("ascii", "replace").strip()
    digest = f"sha256:{digest}" if re.fullmatch(r"[0-9a-f]{64}", digest) else digest  # podman gives the hex alone
    return digest if proc.returncode == 0 and DIGEST.fullmatch(digest) else None


def identity(ref: ImageReference) -> str | None:
    """A text that changes whenever what `ref` names may have changed; None where nothing says (a pipe)."""
    if ref.transport.streamed:
        found = inspected_id(ref)
        return None if found is None else f"{ref}={found}"
    if ref.transport is not Transport.OCI:
        return _file(ref.path) and f"{ref}={_file(ref.path)}"
    try:  # a layout: its index and every blob (one rewritten in place is another image, or a broken one)
        names = ["index.json", *(f"blobs/sha256/{n}" for n in sorted(os.listdir(os.path.join(ref.path,
                                                                                             "blobs/sha256"))))]
    except OSError:
        return None
    keys = [_file(os.path.join(ref.path, name)) for name in names]
    return None if None in keys else f"{ref}=" + ",".join(k for k in keys if k)


def _file(path: str) -> str | None:
    """A regular file's identity: it is unchanged while these are (ctime: no user can set it back)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return f"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ctime_ns:x}"
