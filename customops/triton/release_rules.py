"""Which of Triton core's repository rules a container's release applies. The release each rule belongs to is
data (customops/data/releases.json, "repository_rules"); the container's release comes from its server version
(/opt/tritonserver/TRITON_VERSION, a profile's facts, or --triton-release's row). Triton ships one release a
month, each one server minor version further (24.05 is 2.46.0, 25.03 is 2.56.0: the release table checks it),
so a server version names its release. Without a known version every rule applies: today's core."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache

from customops import packagedata

SERVER_VERSION = re.compile(r"^2\.(\d{1,4})\.")
ANCHOR = ("24.05", 46)  # a release and its server minor version


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
    table = json.loads(packagedata.read_text("releases.json"))
    return {k: v for k, v in table["repository_rules"].items() if k != "note"}


def release_of(server_version: str | None) -> str | None:
    """The release (YY.MM) of a server version such as 2.56.0; None when it does not read as one."""
    match = SERVER_VERSION.match(server_version or "")
    if match is None:
        return None
    months = _months(ANCHOR[0]) + int(match.group(1)) - ANCHOR[1]
    return f"{months // 12:02d}.{months % 12 + 1:02d}"


def rules_for(server_version: str | None) -> RepositoryRules:
    release = release_of(server_version)
    if release is None:
        return TODAY
    return RepositoryRules(**{rule: _months(release) >= _months(first) for rule, first in since().items()})


def _months(release: str) -> int:
    year, month = release.split(".")
    return int(year) * 12 + int(month) - 1
