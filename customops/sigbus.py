"""A file truncated while customops has it mapped: a one-line error and exit status 2, not a crash.

customops reads ELF files and models through read-only memory maps. If someone shrinks such a file
meanwhile (a build writing the library again, or hostile code), the next read of a page past the new
end raises SIGBUS, which would kill the process with no message. The handler installed here runs in
the faulting thread, prints one line and ends the process with the bad-input status: nothing can be
trusted after a mapped file changed under the reader, so there is no resuming.
"""

from __future__ import annotations

import ctypes
import os
import signal

MESSAGE = (b"customops: a file changed while it was being read (SIGBUS: truncated while mapped); "
           b"check again once nothing is writing to the checked files\n")
EXIT_BAD_INPUT = 2
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
_installed: list[object] = []  # keeps the callback alive for the life of the process


def _on_sigbus(_signum: int) -> None:
    os.write(2, MESSAGE)
    os._exit(EXIT_BAD_INPUT)


def install() -> None:
    """Install the handler once (a plain signal.signal handler would only run after the faulting read
    returned, which it never does)."""
    if _installed:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, _HANDLER)
    handler = _HANDLER(_on_sigbus)
    libc.signal(signal.SIGBUS, handler)
    _installed.append(handler)
