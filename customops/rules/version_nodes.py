"""Part of customops.rules.loading: a version node that nobody defines (glibc elf/dl-version.c match_symbol).
A non-weak need its provider does not define refuses the object, whatever brought it in (a dlopen, a preload,
a dependency of either) and however lazily it is bound; a weak one is only ld.so's warning at start, and no
finding. CO306, and CO505 where the provider is ONNX Runtime's library."""

from __future__ import annotations

import os
from typing import Any

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.frameworks import ONNXRUNTIME
from customops.linker.types import Failure, StepOutcome
from customops.triton.plan import LoadPlan, LoadStep


def version_not_defined(subject: str, failure: Failure, message: str, about: dict) -> Finding:
    """A non-weak version need its provider does not define: ld.so refuses the object (elf/dl-version.c
    match_symbol), whatever brought it in and however lazily it is bound. `failure.name` is the provider ld.so
    checked: the object of that name already in the process (a backend's own copy) or the one found for it.
    ONNX Runtime's library defines only its own release's node, so there it means another release (CO505)."""
    name, provider = failure.version or "", failure.name
    if failure.required_by and failure.required_by != about.get("library"):
        subject = f"{subject.removesuffix(' needs')}: {failure.required_by}, which it needs, needs"
    if os.path.basename(provider).startswith(f"{ONNXRUNTIME.c_api}.so"):
        return onnxruntime_release_mismatch(
            f"{subject} ONNX Runtime's version node {name}, which {provider} does not define: it was linked "
            "against another ONNX Runtime release", version=name, predicted=message, **about)
    return version_missing(f"{subject} version {name}, which {provider} does not define", version=name,
                           predicted=message, **about)


def preload_bringing(name: str, outcome: StepOutcome, plan: LoadPlan) -> LoadStep | None:
    """The preload that is `name` or brought it in (through DT_NEEDED entries, as the start-up's searches
    found them): the entry the user wrote."""
    preloads = {s.path: s for s in plan.preloads}
    found_by = {s.found: s.requested_by for s in outcome.searches if s.found is not None}
    seen: set[str] = set()
    while name not in preloads and name in found_by and name not in seen:
        seen.add(name)
        name = found_by[name]
    return preloads.get(name)


@emits(Code.CO306)
def version_missing(message: str, **fields: Any) -> Finding:
    """A symbol version the providing library (or the container's facts) does not define, or ld.so's assertion
    on a provider without version information."""
    return Finding(Code.CO306, message, **fields)


@emits(Code.CO505)
def onnxruntime_release_mismatch(message: str, **fields: Any) -> Finding:
    """A library that needs a version node of libonnxruntime the container's does not define: linked against
    another ONNX Runtime release (each defines only its own node), so ld.so refuses it."""
    return Finding(Code.CO505, message, **fields)
