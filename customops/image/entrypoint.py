"""What an image's entrypoint script does to the loader's variables before it execs the server, read from the
script in the image (never run): NVIDIA's images start `tritonserver` through one, and an `export
LD_LIBRARY_PATH=...` there decides what ld.so finds as much as the image's Env does.

Only what is certain is applied: an assignment or `export` at the script's top level (not inside `if`, a loop, a
`case` or a function), whose value is literal text and `$NAME` / `${NAME}` of variables known so far; `.` and
`source` of a literal path are followed (8 deep). An assignment of LD_LIBRARY_PATH or LD_PRELOAD that is not
certain (conditional, or computed by a command) is reported as such, never guessed.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from customops import chroot

LOADER_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD")
ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
SOURCED = re.compile(r"^(?:\.|source)\s+(\S+)\s*$")
OPENERS = re.compile(r"^(if|for|while|until|case)\b|^[A-Za-z_][A-Za-z0-9_]*\s*\(\)\s*\{?|^function\b|^\{\s*$")
CLOSERS = re.compile(r"^(fi|done|esac)\b|^\}")
REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
SCRIPT_LIMIT = 1 << 20
MAX_DEPTH = 8


@dataclass
class Effect:
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)


def effect(root: str, entrypoint: list[str], environment: dict[str, str]) -> Effect:
    """The environment the entrypoint script leaves for the program it execs, and notes on what it may do
    beyond that; `environment` unchanged where the entrypoint is no shell script of the image."""
    result = Effect(dict(environment))
    if entrypoint:
        _read(root, entrypoint[0], result, 0)
    return result


def _read(root: str, path: str, result: Effect, depth: int) -> None:
    resolved = chroot.resolve(root, (), path) if path.startswith("/") else None
    if resolved is None or depth > MAX_DEPTH or not os.path.isfile(resolved[1]):
        return
    try:
        with open(resolved[1], "rb") as script:
            text = script.read(SCRIPT_LIMIT).decode("utf-8", "replace")
    except OSError:
        return
    if depth == 0 and not (text.startswith("#!") and "sh" in text.split("\n", 1)[0]):
        return  # not a shell script: what it does is not read
    nesting = 0
    for number, raw in enumerate(_lines(text), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if CLOSERS.match(line):
            nesting = max(0, nesting - 1)
            continue
        opened = bool(OPENERS.match(line)) and not re.search(r"\b(fi|done|esac)\s*;?\s*$|\}\s*$", line)
        assigned = ASSIGNMENT.match(line)
        if nesting or opened or "&&" in line or "||" in line:
            if any(re.search(rf"\b{name}=", line) for name in LOADER_VARIABLES):
                result.notes.append(f"the entrypoint script {path} may set {_named(line)} (line {number}, under a "
                                    "condition or in a function): not modelled")
            nesting += opened
            continue
        if assigned:
            value = _value(assigned.group(2), result.environment)
            if value is None:
                if assigned.group(1) in LOADER_VARIABLES:
                    result.notes.append(f"the entrypoint script {path} sets {assigned.group(1)} to a computed value "
                                        f"(line {number}): not modelled")
                continue
            result.environment[assigned.group(1)] = value
            continue
        sourced = SOURCED.match(line)
        if sourced and "$" not in sourced.group(1) and "*" not in sourced.group(1):
            _read(root, sourced.group(1), result, depth + 1)


def _lines(text: str) -> list[str]:
    """The script's logical lines (a trailing backslash continues one)."""
    return text.replace("\\\n", " ").splitlines()


def _value(text: str, environment: dict[str, str]) -> str | None:
    """The value of an assignment's right side, or None when a shell would compute it: a command, an operator
    expansion (`${A:-b}`), a special parameter (`$1`, `$@`), or single quotes around a `$`."""
    if "`" in text or "$(" in text or ("'" in text and "$" in text) or re.search(r"\$[0-9@*#?$!-]", text):
        return None
    if re.search(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*\})", text):
        return None
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        return None
    if len(words) != 1:
        return None if words else ""
    return REFERENCE.sub(lambda m: environment.get(m.group(1) or m.group(2), ""), words[0])


def _named(line: str) -> str:
    return next(name for name in LOADER_VARIABLES if f"{name}=" in line)
