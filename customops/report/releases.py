"""`customops releases`: the release table as text (one line a release, `?` for what no source states) or JSON
(schema customops.releases/1: each release's values, the source and line of each, what follows from them by rule,
and what is unknown)."""

from __future__ import annotations

import json
from typing import Any

from customops import schemas
from customops.frameworks import ONNXRUNTIME, OPENVINO, PYTHON, TENSORFLOW, TENSORRT
from customops.triton.releases import Release

COLUMNS = (("release", "release"), ("server", "server"), ("ubuntu", "Ubuntu"), ("glibc", "glibc"),
           ("glibcxx", "libstdc++"), (PYTHON.backend, PYTHON.label), ("cuda", "CUDA"),
           *((f.backend, f.label) for f in (TENSORRT, ONNXRUNTIME, OPENVINO)),
           (f"{TENSORFLOW.backend}_backend", "TF backend"))


def row(release: Release) -> dict[str, str]:
    derived = release.derived()
    found = {"release": release.name}
    for key, _ in COLUMNS[1:]:
        value = release.values.get(key, derived.get(key))
        found[key] = ("yes" if value else "no") if isinstance(value, bool) else (value or "?")
    found["glibc"] = found["glibc"].removeprefix("GLIBC_")
    found["glibcxx"] = found["glibcxx"].removeprefix("GLIBCXX_")
    return found


def render_text(releases: tuple[Release, ...]) -> str:
    rows = [row(r) for r in releases]
    widths = [max(len(title), *(len(r[key]) for r in rows)) for key, title in COLUMNS]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(COLUMNS, widths, strict=True)).rstrip()]
    lines += ["  ".join(r[key].ljust(w) for (key, _), w in zip(COLUMNS, widths, strict=True)).rstrip() for r in rows]
    lines.append("? = no cited source states it (`customops releases YY.MM` gives each value's source)")
    return "\n".join(lines) + "\n"


def render_one(release: Release) -> str:
    lines = [f"Triton {release.name}"]
    for key, value in release.values.items():
        url, quote = release.sources[key]
        shown = ("yes" if value else "no") if isinstance(value, bool) else value
        lines += [f"  {key}: {shown}", f"    {url}", f"    > {quote}"]
    derived = release.derived()
    if derived:
        lines.append("  derived (customops.triton.releases):")
        lines += [f"    {key}: {value}" for key, value in derived.items()]
    if release.unknown:
        lines.append(f"  unknown (no cited source states it): {', '.join(release.unknown)}")
    return "\n".join(lines) + "\n"


def as_json(releases: tuple[Release, ...]) -> str:
    body: dict[str, Any] = {"schema": schemas.RELEASES, "releases": [
        {"release": r.name, "values": r.values,
         "sources": {key: {"url": url, "quote": quote} for key, (url, quote) in r.sources.items()},
         "derived": r.derived(), "unknown": list(r.unknown)} for r in releases]}
    return json.dumps(body, indent=2) + "\n"
