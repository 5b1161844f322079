"""CO302, a library's DT_NEEDED dependency the container does not have: found nowhere ld.so searches
(customops.rules.loading, from the linker's prediction), or of another version than the one a release's facts say
its image ships (customops.rules.versions: another Python's libpython)."""

from __future__ import annotations

from typing import Any

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding


@emits(Code.CO302)
def needed_not_found(message: str, **fields: Any) -> Finding:
    """A library's DT_NEEDED dependency found nowhere ld.so searches (every path tried in the evidence), or absent
    by the container's facts."""
    return Finding(Code.CO302, message, **fields)
