"""What became of each plugin creator a TensorRT plugin library offered, as the probe reports it.

TensorRT's registry (measured on its own libnvinfer_dispatch and libnvinfer_lean 10 and 11:
tests/test_probe_tensorrt_real.py) files registerCreator(creator, ns) under (name, version, ns), replacing
what was filed there, unless something is filed under (name, version, the creator's own namespace), which
refuses it; getCreator(name, version, ns) finds a creator filed under ns whose own namespace is ns. Static
registrars (REGISTER_TENSORRT_PLUGIN) pass ns "". Creators that only a library's getCreators or
getPluginCreators returns are registered by IPluginRegistry::loadLibrary alone, which Triton never calls: its
TensorRT backend dlopen()s plugins= libraries.

The probe's loader (customops/probe/child_tensorrt.py) writes each one as "namespace::name/version" (the
creator's own namespace, possibly empty: "::GridAnchor_TRT/1", as TensorRT's log writes it) followed by
what became of it: " [refused: already registered by LIB]", or " [replaces the one registered by LIB]"
and/or " [unreachable: registered in namespace 'NS']", or " [entry point: not registered by dlopen]".
Brackets in what a library registers are reported as parentheses, so that no name forges a marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import cast

_REPORTED = re.compile(
    r"(?P<identity>.*?)(?:"
    r" \[refused: already registered by (?P<refused>.*)\]"
    r"| \[entry point: not registered by dlopen\](?P<entry>)"
    r"|(?: \[replaces the one registered by (?P<replaced>.*?)\])?"
    r"(?: \[unreachable: registered in namespace '(?P<filed>[^\]]*)'\])?)", re.DOTALL)


class Fate(str, Enum):
    """What the registry did with one creator."""

    FOUND = "found"  # registered where getCreator finds it (until a later registration replaces it)
    REFUSED = "refused"  # something was already filed under its identity
    UNREACHABLE = "unreachable"  # registered under a namespace other than its own: getCreator never finds it
    ENTRY_POINT = "entry point"  # returned by getCreators/getPluginCreators only: not registered under Triton

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Registration:
    """One creator a library offered, as a reported name holds it."""

    namespace: str  # the creator's own (the one an engine built with it records)
    name: str
    version: str
    fate: Fate
    other: str | None = None  # REFUSED: the library whose registration refused it; else the one it replaced
    filed_in: str | None = None  # UNREACHABLE: the namespace it was registered in

    @classmethod
    def parse(cls, text: str) -> Registration:
        """From the reported form (see the module doc)."""
        found = cast(re.Match[str], _REPORTED.fullmatch(text))  # every text matches: the markers are optional
        identity, _, version = found["identity"].rpartition("/")
        namespace, _, name = identity.partition("::")
        if found["refused"] is not None:
            return cls(namespace, name, version, Fate.REFUSED, found["refused"])
        if found["entry"] is not None:
            return cls(namespace, name, version, Fate.ENTRY_POINT)
        fate = Fate.FOUND if found["filed"] is None else Fate.UNREACHABLE
        return cls(namespace, name, version, fate, found["replaced"], found["filed"])

    @property
    def identity(self) -> str:
        return f"{self.namespace}::{self.name}/{self.version}"

    @property
    def registered(self) -> bool:
        """Whether the registry took it (found by getCreator or not)."""
        return self.fate in (Fate.FOUND, Fate.UNREACHABLE)
