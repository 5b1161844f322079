"""What a probe found for one library, and the form it has in the probe cache.

The cache keeps the status as its string (the on-disk form customops has always written); an entry read
back is untrusted input, matched against PROBE_RESULT_SHAPE before from_json turns it into a ProbeResult.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class ProbeStatus(str, Enum):
    """How loading one library ended. A str enum: each member is its value, which is what the cache, the
    JSON output and the text report hold (json.dumps and format write the value)."""

    LOADED = "loaded"
    FAILED = "failed"  # the framework's load call reported an error (dlerror, an ONNX Runtime status, ...)
    CRASHED = "crashed"  # the loader died or exited while loading it, or after reporting it loaded
    TIMED_OUT = "timeout"
    NOT_LOADED = "not loaded"  # an earlier library of the group failed first
    UNAVAILABLE = "unavailable"  # the framework or the sandbox could not run: nothing was learnt

    def __str__(self) -> str:
        return str(self.value)


FAILURES = frozenset({ProbeStatus.FAILED, ProbeStatus.CRASHED, ProbeStatus.TIMED_OUT})


@dataclass(frozen=True)
class ProbeResult:
    library: str
    status: ProbeStatus
    message: str
    signal: int | None
    output: str
    sandbox_files: tuple[str, ...]  # what the library wrote into its working directory
    registered: tuple[str, ...] = ()  # ops/schemas the framework registry gained (framework probes only)
    framework_version: str = ""  # of the framework that loaded it (framework probes only)
    builtin_namespaces: tuple[str, ...] = ()  # Torch: the namespaces the framework registers itself
    containment: str = ""  # what the library could and could not do (containment.Containment.describe)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON holds it (tuples become lists; the status, a str, is written as its value)."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ProbeResult:
        """From to_json's form, once it has matched PROBE_RESULT_SHAPE (so every field has its type)."""
        return cls(**{**value, "status": ProbeStatus(value["status"]), "sandbox_files": tuple(value["sandbox_files"]),
                      "registered": tuple(value["registered"]),
                      "builtin_namespaces": tuple(value["builtin_namespaces"])})


# to_json's form, field by field (cachedir.matches): a cached result of any other shape (field names, types,
# a status customops never writes) is probed again.
PROBE_RESULT_SHAPE: dict[str, object] = {
    "library": str, "status": frozenset(s.value for s in ProbeStatus), "message": str, "signal": (int, None),
    "output": str, "sandbox_files": [str], "registered": [str], "framework_version": str,
    "builtin_namespaces": [str], "containment": str}
