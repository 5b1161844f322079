"""Which of Triton core's repository rules a container's release applies. The release each rule belongs to is
data (customops/data/releases.json, "repository_rules"); the container's release comes from its server version
(/opt/tritonserver/TRITON_VERSION, a profile's facts, or --triton-release's row), read through the release table
(customops.triton.releases: 25.07 shipped 2.59.1, so a minor version is not a month's offset). Without a known
version every rule applies: today's core."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from customops.triton.releases import months, release_of_server, table


@dataclass(frozen=True)
class RepositoryRules:
    """Each rule on or off for one release."""

    runtime_field: bool = True  # config.pbtxt `runtime` names the backend library
    python_based_backends: bool = True  # <backend_dir>/<backend>/model.py served by libtriton_python.so
    torch_aoti_platform: bool = True  # platform "torch_aoti" and model.pt2 are PyTorch's
    libtorch_platform_alias: bool = True  # platform "libtorch" is auto-completed to the pytorch backend


TODAY = RepositoryRules()  # every rule: the core of today, for a container whose release is not known


@cache
def since() -> dict[str, str]:
    """rule -> the first release (YY.MM) that applies it."""
    return {k: v for k, v in table()["repository_rules"].items() if k != "note"}


def release_of(server_version: str | None) -> str | None:
    """The release (YY.MM) of a server version such as 2.56.0; None when it does not read as one."""
    return release_of_server(server_version)


@cache
def rules_for(server_version: str | None) -> RepositoryRules:
    release = release_of(server_version)
    if release is None:
        return TODAY
    return RepositoryRules(**{rule: months(release) >= months(first) for rule, first in since().items()})
