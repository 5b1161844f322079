"""Findings from probing TensorRT plugin libraries (`check --probe`), against customops' recording stand-in for
libnvinfer (customops.probe.tensorrt_standin): TensorRT's registry keeps the first creator registered under a
(namespace, name, version) and refuses the rest, so the library loaded first in the server wins.

- CO406: a library registers a creator that an earlier library of the server registered first; or one of
  TensorRT's built-in plugins (the container's libnvinfer_plugin.so.N, initialized after the plugin
  libraries: customops.probe.groups._tensorrt_group), which then wins over TensorRT's own.
- CO410: a library whose registrations the probe could not see (it registered nothing, failed or crashed
  against the stand-in, or needs a major the stand-in has no layout for).
"""

from __future__ import annotations

import os

from customops.findings import Finding
from customops.probe.groups import BuiltinPlugins, ProbedGroup
from customops.probe.results import ProbeStatus
from customops.probe.tensorrt_standin import Registration
from customops.rules.registrations import duplicate_registration
from customops.triton.plan import LoadStep

CODES = frozenset({"CO410"})  # its CO406 is made by customops.rules.registrations


def check(group: ProbedGroup) -> list[Finding]:
    """The findings of the TensorRT group: the libraries in the server's load order."""
    paths = {os.path.abspath(step.source): step.path for step in group.steps}
    found: list[Finding] = []
    for step, alone, together in group.members():
        if alone.status is not ProbeStatus.LOADED or not alone.registered:
            found.append(_unseen(step, alone.message, alone.status))
            continue
        refused = [r for r in (Registration.parse(n) for n in together.registered) if r.refused_by]
        if refused:
            found.append(_shadowed(step, refused, paths, group.version))
    return found + _builtins_shadowed(group)


def notes(group: ProbedGroup) -> list[str]:
    """Which of the container's built-in plugin libraries was probed, and what it registered; or why none."""
    builtin = group.builtin
    if builtin is None:
        return []
    if builtin.result is None:
        return [f"not probed: TensorRT's built-in plugins ({builtin.not_probed})"]
    if builtin.result.status is not ProbeStatus.LOADED:
        return [f"not probed: TensorRT's built-in plugins of {builtin.path} ({builtin.result.status.value}: "
                f"{builtin.result.message})"]
    names = [Registration.parse(n) for n in builtin.result.registered]
    refused = sum(1 for r in names if r.refused_by)
    return [f"probed TensorRT's built-in plugins: {builtin.path}'s initLibNvInferPlugins registered {len(names)} "
            f"plugin creator(s) after the plugin libraries" + (f", {refused} of them refused" if refused else "")]


def registered(group: ProbedGroup) -> dict[str, list[str]]:
    """What each library registers alone (the container path: "namespace::name/version" names)."""
    return {step.path: list(alone.registered) for step, alone, _ in group.members()
            if alone.status is ProbeStatus.LOADED}


def _shadowed(step: LoadStep, refused: list[Registration], paths: dict[str, str], standin: str) -> Finding:
    names = [f"{r.namespace}::{r.name}/{r.version}" for r in refused]
    first = refused[0]
    winner = paths.get(os.path.abspath(first.refused_by or ""), first.refused_by)
    return duplicate_registration(
        f"{step.path} registers {len(names)} TensorRT plugin creator(s) that {winner} registered first "
        f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): TensorRT's registry refuses the second "
        "registration, so engines get the first library's plugin", model=step.model, library=step.path,
        file=step.source, symbol=names[0],
        predicted=f"Plugin creator already registered - {first.namespace}::{first.name} version {first.version}",
        evidence=(f"probe ({standin}): loaded after {winner}, its registerCreator calls were refused for "
                  f"{', '.join(names[:10])}", "TensorRT says so only in its verbose log; the server starts"),
        hint="Keep one creator per (namespace, name, version): drop one library from plugins=, or give one "
             "creator another namespace (setPluginNamespace) or version.")


def _unseen(step: LoadStep, message: str, status: ProbeStatus) -> Finding:
    what = "registered no plugin creator" if status is ProbeStatus.LOADED else f"could not be probed: {message}"
    return Finding("CO410", f"TensorRT plugin library {step.path} {what}", model=step.model, library=step.path,
                   file=step.source, evidence=(f"probe: {message}",) if message else ())


def _builtins_shadowed(group: ProbedGroup) -> list[Finding]:
    """CO406 on each library that registered one of the built-in plugins first: TensorRT refused its own."""
    builtin = group.builtin
    if builtin is None or builtin.result is None or builtin.result.status is not ProbeStatus.LOADED:
        return []
    steps = {os.path.abspath(step.source): step for step in group.steps}
    taken: dict[str, list[Registration]] = {}
    for registration in (Registration.parse(n) for n in builtin.result.registered):
        if registration.refused_by and os.path.abspath(registration.refused_by) in steps:
            taken.setdefault(os.path.abspath(registration.refused_by), []).append(registration)
    return [_shadows_builtin(steps[source], refused, builtin, group.version) for source, refused in taken.items()]


def _shadows_builtin(step: LoadStep, refused: list[Registration], builtin: BuiltinPlugins, standin: str) -> Finding:
    names = [f"{r.namespace}::{r.name}/{r.version}" for r in refused]
    first = refused[0]
    return duplicate_registration(
        f"{step.path} registers {len(names)} of TensorRT's built-in plugin creator(s) of {builtin.path} "
        f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): the server initializes TensorRT's plugins "
        "(initLibNvInferPlugins) after loading the plugin libraries, so the registry refuses the built-in and "
        f"engines built with TensorRT's {first.name} get {step.path}'s plugin instead", model=step.model,
        library=step.path, file=step.source, symbol=names[0],
        predicted=f"Plugin creator already registered - {first.namespace}::{first.name} version {first.version}",
        evidence=(f"probe ({standin}): {builtin.path}'s initLibNvInferPlugins, called after the plugin libraries, "
                  f"was refused {', '.join(names[:10])}, registered first by {step.path}",
                  "TensorRT says so only in its verbose log; the server starts"),
        hint="Give the creator a name, version or namespace (setPluginNamespace) of its own, unless replacing "
             "TensorRT's built-in plugin is intended.")
