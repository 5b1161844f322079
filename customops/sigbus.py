"""A file truncated while customops has it mapped: a one-line error and exit status 2, not a crash.

customops reads ELF files and models through read-only memory maps. If someone shrinks such a file
meanwhile (a build writing the library again, or hostile code), the next read of a page past the new
end raises SIGBUS, which would kill the process with no message. The handler installed here runs in
the faulting thread, prints one line and ends the process with the bad-input status: nothing can be
trusted after a mapped file changed under the reader, so there is no resuming.

The CLI arms it at start and the handler is installed before the first file is mapped (safeio, elf.parse):
a launch that starts the server from a cached verdict maps nothing and does not import ctypes (~3 ms).
"""

from __future__ import annotations

import os
import signal

MESSAGE = (b"customops: a file changed while it was being read (SIGBUS: truncated while mapped); "
           b"check again once nothing is writing to the checked files\n")
EXIT_BAD_INPUT = 2
_installed: list[object] = []  # keeps the callback alive for the life of the process
_armed: list[bool] = []


def _on_sigbus(_signum: int) -> None:
    os.write(2, MESSAGE)
    os._exit(EXIT_BAD_INPUT)


def arm() -> None:
    """This process (the CLI) wants the handler: before_mapping installs it."""
    _armed.append(True)


def before_mapping() -> None:
    """Called before a file is mapped: installs the handler in an armed process."""
    if _armed:
        install()


def install() -> None:
    """Install the handler once (a plain signal.signal handler would only run after the faulting read
    returned, which it never does)."""
    if _installed:
        return
    import ctypes

    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, prototype)
    handler = prototype(_on_sigbus)
    libc.signal(signal.SIGBUS, handler)
    _installed.append(handler)
