"""Findings from probing TensorRT plugin libraries (`check --probe`), against customops' recording stand-in for
libnvinfer (customops.probe.tensorrt_standin), which keeps TensorRT's registry rules
(customops.probe.tensorrt_registrations): the first creator filed under an identity wins, and a creator
registered in a namespace other than its own is filed where getCreator never finds it.

- CO406: a library registers a creator that an earlier library of the server registered first, or one whose
  registration replaces an earlier library's; or one of TensorRT's built-in plugins (the container's
  libnvinfer_plugin.so.N, initialized after the plugin libraries: customops.probe.groups._tensorrt_group).
- CO410: a library whose registrations the probe could not see (it registered nothing when dlopen()ed, failed
  or crashed against the stand-in, or needs a major the stand-in has no layout for).
- CO411: a library registers a creator where no lookup finds it.
"""

from __future__ import annotations

import os

from customops.codes import Code
from customops.emitters import emits
from customops.findings import Finding
from customops.probe.groups import BuiltinPlugins, ProbedGroup
from customops.probe.results import ProbeResult, ProbeStatus
from customops.probe.tensorrt_registrations import Fate, Registration
from customops.rules.registrations import duplicate_registration
from customops.triton.plan import LoadStep

NOTE = "TensorRT says so only in its verbose log; the server starts"


def check(group: ProbedGroup) -> list[Finding]:
    """The findings of the TensorRT group: the libraries in the server's load order."""
    paths = {os.path.abspath(step.host_path): step.path for step in group.steps}
    offered = {r.library: _parsed(r) for r in group.together}
    found: list[Finding] = []
    for step, alone, together in group.members():
        if alone.status is not ProbeStatus.LOADED or all(r.fate is Fate.ENTRY_POINT for r in _parsed(alone)):
            found.append(unseen(step, alone.message, alone.status))
            continue
        mine = _parsed(together)
        refused = [r for r in mine if r.fate is Fate.REFUSED]
        if refused:
            found.append(_shadowed(step, refused, paths, offered, group.version))
        found += [_replaces(step, r, paths, group.version) for r in mine if r.fate is Fate.UNREACHABLE and r.other]
        lost = [r for r in mine if r.fate is Fate.UNREACHABLE and not r.other]
        if lost:
            found.append(unreachable(step, lost, group.version))
    return found + _builtins_shadowed(group, offered)


def _parsed(result: ProbeResult) -> list[Registration]:
    return [Registration.parse(name) for name in result.registered]


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
    names = _parsed(builtin.result)
    refused = sum(1 for r in names if r.fate is Fate.REFUSED)
    return [f"probed TensorRT's built-in plugins: {builtin.path}'s initLibNvInferPlugins registered {len(names)} "
            f"plugin creator(s) after the plugin libraries" + (f", {refused} of them refused" if refused else "")]


def registered(group: ProbedGroup) -> dict[str, list[str]]:
    """What each library registers alone (the container path: "namespace::name/version" names)."""
    return {step.path: list(alone.registered) for step, alone, _ in group.members()
            if alone.status is ProbeStatus.LOADED}


def _winner(registration: Registration, paths: dict[str, str],
            offered: dict[str, list[Registration]]) -> tuple[str, bool]:
    """Who holds what refused `registration`, and whether engines find that."""
    source = os.path.abspath(registration.other or "")
    winner = paths.get(source, registration.other or "?")
    held = next((r for r in offered.get(source, ()) if r.registered and (r.name, r.version) ==
                 (registration.name, registration.version) and (r.namespace if r.filed_in is None else r.filed_in)
                 == registration.namespace),
                None)
    if held is not None and held.fate is Fate.UNREACHABLE:
        return (f"{winner} (whose creator names namespace '{held.namespace}' but was registered in "
                f"'{held.filed_in}')"), False
    return winner, True


def _shadowed(step: LoadStep, refused: list[Registration], paths: dict[str, str],
              offered: dict[str, list[Registration]], standin: str) -> Finding:
    names = [r.identity for r in refused]
    first = refused[0]
    winner, found = _winner(first, paths, offered)
    gets = "so engines get the first library's plugin" if found else "and getCreator finds neither"
    return duplicate_registration(
        f"{step.path} registers {len(names)} TensorRT plugin creator(s) that {winner} registered first "
        f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): TensorRT's registry refuses the second "
        f"registration, {gets}", model=step.model, library=step.path,
        file=step.host_path, symbol=names[0],
        predicted=f"Plugin creator already registered - {first.namespace}::{first.name} version {first.version}",
        evidence=(f"probe ({standin}): loaded after {paths.get(os.path.abspath(first.other or ''), first.other)}, its "
                  f"registerCreator calls were refused for {', '.join(names[:10])}", NOTE),
        hint="Keep one creator per (namespace, name, version): drop one library from plugins=, or give one "
             "creator another name or version (or a namespace of its own, registered in it: registerCreator(creator, "
             "creator.getPluginNamespace()); REGISTER_TENSORRT_PLUGIN registers in \"\").")


def _replaces(step: LoadStep, registration: Registration, paths: dict[str, str], standin: str) -> Finding:
    """CO406: an unreachable registration takes the place of an earlier library's: engines find neither."""
    earlier = paths.get(os.path.abspath(registration.other or ""), registration.other)
    plugin = f"{registration.filed_in}::{registration.name}/{registration.version}"
    return duplicate_registration(
        f"{step.path} registers {registration.identity} in namespace '{registration.filed_in}', where {earlier} "
        f"registered {plugin} before: TensorRT's registry files it in that one's place, and getCreator finds "
        f"neither ({step.path}'s creator names namespace '{registration.namespace}')", model=step.model,
        library=step.path, file=step.host_path, symbol=registration.identity,
        predicted=f"getPluginCreator could not find plugin {registration.name} version {registration.version}",
        evidence=(f"probe ({standin}): loaded after {earlier}, its registerCreator(creator, "
                  f"\"{registration.filed_in}\") was accepted in place of {earlier}'s",
                  "engines that need either plugin fail to deserialize"),
        hint="Register each creator in its own namespace (registerCreator(creator, its getPluginNamespace()), "
             "not REGISTER_TENSORRT_PLUGIN, for a creator with a namespace), or drop one library from plugins=.")


@emits(Code.CO411)
def unreachable(step: LoadStep, lost: list[Registration], standin: str) -> Finding:
    """Creators a library files in a namespace other than their own, where getCreator never looks."""
    names = [r.identity for r in lost]
    first = lost[0]
    return Finding(
        Code.CO411, f"{step.path} registers {len(names)} TensorRT plugin creator(s) in a namespace other than their "
        f"own ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}; registered in '{first.filed_in}'): TensorRT's "
        "registry files them where getCreator never finds them, so no engine gets them", model=step.model,
        library=step.path, file=step.host_path, symbol=names[0],
        predicted=f"getPluginCreator could not find plugin {first.name} version {first.version}",
        evidence=(f"probe ({standin}): registerCreator(creator, \"{first.filed_in}\") for a creator whose "
                  f"getPluginNamespace() is '{first.namespace}'",))


@emits(Code.CO410)
def unseen(step: LoadStep, message: str, status: ProbeStatus) -> Finding:
    """A plugin library whose registrations the probe could not see: none when dlopen()ed (or only through its
    getCreators entry point), or a failure or crash against the stand-in."""
    what = "registered no plugin creator" if status is ProbeStatus.LOADED else f"could not be probed: {message}"
    return Finding(Code.CO410, f"TensorRT plugin library {step.path} {what}", model=step.model, library=step.path,
                   file=step.host_path, evidence=(f"probe: {message}",) if message else ())


def _builtins_shadowed(group: ProbedGroup, offered: dict[str, list[Registration]]) -> list[Finding]:
    """CO406 on each library that registered one of the built-in plugins first: TensorRT refused its own."""
    builtin = group.builtin
    if builtin is None or builtin.result is None or builtin.result.status is not ProbeStatus.LOADED:
        return []
    steps = {os.path.abspath(step.host_path): step for step in group.steps}
    paths = {source: step.path for source, step in steps.items()}
    taken: dict[str, list[Registration]] = {}
    for registration in _parsed(builtin.result):
        if registration.fate is Fate.REFUSED and os.path.abspath(registration.other or "") in steps:
            taken.setdefault(os.path.abspath(registration.other or ""), []).append(registration)
    return [_shadows_builtin(steps[source], refused, builtin, group.version, _winner(refused[0], paths, offered))
            for source, refused in taken.items()]


def _shadows_builtin(step: LoadStep, refused: list[Registration], builtin: BuiltinPlugins, standin: str,
                     winner: tuple[str, bool]) -> Finding:
    names = [r.identity for r in refused]
    first = refused[0]
    gets = f"engines built with TensorRT's {first.name} get {step.path}'s plugin instead" if winner[1] \
        else f"getCreator finds neither: {winner[0]}"
    return duplicate_registration(
        f"{step.path} registers {len(names)} of TensorRT's built-in plugin creator(s) of {builtin.path} "
        f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): the server initializes TensorRT's plugins "
        f"(initLibNvInferPlugins) after loading the plugin libraries, so the registry refuses the built-in and {gets}",
        model=step.model, library=step.path, file=step.host_path, symbol=names[0],
        predicted=f"Plugin creator already registered - {first.namespace}::{first.name} version {first.version}",
        evidence=(f"probe ({standin}): {builtin.path}'s initLibNvInferPlugins, called after the plugin libraries, "
                  f"was refused {', '.join(names[:10])}, registered first by {step.path}", NOTE),
        hint="Give the creator a name or version of its own (or a namespace of its own, registered in it: "
             "registerCreator(creator, creator.getPluginNamespace())), unless replacing TensorRT's built-in plugin is "
             "intended.")
