"""What each probed library needs, as the container's loader finds it (issue #38 §5).

A probe runs on this machine, whose loader would look an op library's dependencies up in this machine's
directories: it would find this machine's files or none, and a probe that binds the checker's libc10.so, or fails
for want of a library only the container has, says nothing about the container. So the loader script is handed,
for each library, the files the container's loader resolves its DT_NEEDED entries to (the static model's link
map), each after the files it needs itself, and dlopens them by path before the library: ld.so then matches the
library's DT_NEEDED names against the objects already loaded (_dl_name_match_p) instead of searching. glibc's
own objects (those that define GLIBC_* version nodes) are never handed over: the probe's process runs on this
machine's glibc, which is why a probe says which glibc it ran on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the probe's runner imports this module's types, and must not import numpy
    from customops.linker.linkmap import LinkMap
    from customops.linker.prediction import Prediction

Need = tuple[str, str]  # (the name a DT_NEEDED entry asks for, the host path of the container's file)
Needs = Mapping[str, tuple[Need, ...]]  # a library's host path -> what it needs, in the order to load it


def container_needs(prediction: Prediction | None, libraries: Iterable[str]) -> dict[str, tuple[Need, ...]]:
    """For each library the static model loaded, the container's files it needs, directly or not, each after what
    it needs (a post-order walk of DT_NEEDED, each name resolved to the first loaded object that matches it, as
    _dl_map_object does); libraries the model did not load are left out (the probe then searches as this
    machine's loader does, and says nothing the static check has not said)."""
    if prediction is None:
        return {}
    ordered = sorted((o for o in prediction.relocated_objects.values() if o.loaded), key=lambda o: o.seq)
    by_host = {os.path.realpath(o.host): o for o in ordered}
    found: dict[str, tuple[Need, ...]] = {}
    for library in libraries:
        obj = by_host.get(os.path.realpath(library))
        if obj is not None:
            found[os.path.abspath(library)] = _post_order(obj, ordered)
    return found


def is_glibc(obj: LinkMap) -> bool:
    """glibc's own objects define its GLIBC_* version nodes (libc, libm, ld.so, libpthread, ...)."""
    return any(name.startswith("GLIBC_") for d in obj.info.version_definitions for name in d.names[:1])


def _provider(name: str, ordered: list[LinkMap]) -> LinkMap | None:
    return next((o for o in ordered if o.matches(name)), None)


def _post_order(root: LinkMap, ordered: list[LinkMap]) -> tuple[Need, ...]:
    """What `root` needs, deepest first, each object once; glibc's objects and what only they need left out."""
    result: list[Need] = []
    seen = {id(root)}
    stack: list[tuple[LinkMap, str, list[str]]] = [(root, "", list(reversed(root.info.needed)))]
    while stack:
        obj, asked_as, pending = stack[-1]
        if not pending:
            stack.pop()
            if obj is not root:
                result.append((asked_as, obj.host))
            continue
        name = pending.pop()
        provider = _provider(name, ordered)
        if provider is None or id(provider) in seen or is_glibc(provider):
            continue
        seen.add(id(provider))
        stack.append((provider, name, list(reversed(provider.info.needed))))
    return tuple(result)
