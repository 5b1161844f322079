"""The Python backend's shared-memory message types a stub or a libtriton_python.so names: their C++ type
information (N6triton7backend6python13IPCMessageShmE) stays in the file, and a release that changes what the stub
and the backend exchange changes the set. Read from the file's bytes, never run."""

from __future__ import annotations

import re

from customops import safeio
from customops.errors import InputError

NAMESPACE = re.compile(rb"N6triton7backend6python(\d{1,3})")
SUFFIX = "Shm"  # the backend's naming of a structure placed in shared memory


def shared_memory_types(path: str) -> frozenset[str] | None:
    """The *Shm type names the file holds; None where it cannot be read."""
    try:
        data = safeio.map_regular(path, safeio.LIBRARY_LIMIT)
    except InputError:
        return None
    found: set[str] = set()
    for match in NAMESPACE.finditer(data):
        length = int(match.group(1))
        name = bytes(data[match.end():match.end() + length])
        if len(name) == length and name.isascii() and name.decode().endswith(SUFFIX) and name.isalnum():
            found.add(name.decode())
    return frozenset(found)
