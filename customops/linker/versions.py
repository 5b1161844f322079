"""elf/dl-version.c _dl_check_map_versions: every version node an object needs must be defined by the
file its verneed entry names (when that file is loaded)."""

from __future__ import annotations

from collections.abc import Callable

from customops.linker.linkmap import LinkMap
from customops.linker.messages import no_version_information, weak_version_warning
from customops.linker.types import Failure, FailureKind


def check_versions(objects: list[LinkMap], object_named: Callable[[str], LinkMap | None],
                   progname: str) -> tuple[list[Failure], list[str]]:
    """The missing version nodes of these objects (fatal), and ld.so's warnings: a provider without version
    information at all, a weak version reference (VER_FLG_WEAK) the provider does not define."""
    errors: list[Failure] = []
    warnings: list[str] = []
    for obj in objects:
        required_by = obj.name or progname
        for need in obj.info.version_needs:
            provider = object_named(need.file)
            if provider is None:
                continue
            if not provider.info.version_definitions:
                warnings.append(no_version_information(provider.name, required_by))
                continue
            defined = {(d.hash, d.name) for d in provider.info.version_definitions}
            for req in need.versions:
                if (req.hash, req.name) in defined:
                    continue
                failure = Failure(FailureKind.MISSING_VERSION, provider.name, version=req.name,
                                  required_by=required_by)
                if req.is_weak:
                    warnings.append(weak_version_warning(failure))
                else:
                    errors.append(failure)
    return errors, warnings
