"""Running customops with its standard output on a pseudo-terminal, as a user's shell would."""

from __future__ import annotations

import os
import pty
import subprocess


def run_on_terminal(argv: list[str], env: dict[str, str], cwd: str | os.PathLike[str]) -> tuple[int, str]:
    """(exit status, what was written to the terminal); standard error is a pipe (so no progress line)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(argv, stdout=terminal, stderr=subprocess.PIPE, env=env, cwd=cwd)
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    status = process.wait(timeout=300)
    os.close(controller)
    return status, b"".join(chunks).decode()
