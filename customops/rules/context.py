"""RuleContext: everything a rule may read. Rules open no file themselves: what they need from files is read
here first (customops.inspect.files), into FileFacts (and, for --probe, Probes). Two readers are handed to
them as they are: the run's ElfReader (ELF files, through the parse cache, so that --no-cache also holds for
rules) and the container's target (`triton.container.target`: container paths resolved as the kernel would)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict

from customops.elf.cache import ElfReader
from customops.errors import ElfError
from customops.findings import Related
from customops.frameworks import ONNXRUNTIME, PYTORCH, TENSORFLOW, TENSORRT
from customops.inspect import files, protobuf_descriptors, protobuf_registrations
from customops.inspect.onnxmodel import model_ops
from customops.inspect.protobuf_descriptors import DescriptorFacts
from customops.inspect.protobuf_registrations import Registrar
from customops.inspect.registrations import STABLE_DEF_TEXT, RefusedDef, Registration, refused_def
from customops.inspect.tfmodel import model_ops as tf_model_ops
from customops.linker.prediction import Prediction
from customops.linker.types import StepKind, StepOutcome, StepStatus
from customops.probe.groups import ProbedGroup, TensorflowRegistry
from customops.triton.container import FactsFrom
from customops.triton.plan import Context, LoadedBy, LoadPlan, LoadStep, Purpose
from customops.triton.python_stub import StubRun
from customops.triton.repository import Model

ModelOps = tuple[set[tuple[str, str]], set[tuple[str, str]]]


@dataclass(frozen=True)
class FrameworkStrings:
    """Names searched for in a container framework backend's libraries (lib*.so* of <backend_dir>/<name>):
    a namespace or domain the framework builds in occurs there as a string."""

    directory: str  # host path of the backend directory
    has_libraries: bool
    found: frozenset[bytes] = frozenset()


@dataclass(frozen=True)
class FileFacts:
    """What the rules need from files, keyed by host path."""

    modes: Mapping[str, int] = field(default_factory=dict)  # loaded libraries and their directories (CO601)
    identities: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # loaded objects (CO407)
    digests: Mapping[str, str] = field(default_factory=dict)  # registrants (CO406 copies)
    registrations: Mapping[str, tuple[Registration, ...]] = field(default_factory=dict)  # registrants
    refused_defs: Mapping[str, RefusedDef] = field(default_factory=dict)  # Torch op libraries (CO406)
    setuid_server: bool = False  # the server executable is set-user/group-ID (CO307: secure execution)
    torchscript_calls: Mapping[str, frozenset[tuple[str, str]]] = field(default_factory=dict)  # archive -> ops
    onnx_ops: Mapping[str, ModelOps] = field(default_factory=dict)  # model file -> (used, model-local)
    frameworks: Mapping[str, FrameworkStrings] = field(default_factory=dict)  # "pytorch", "onnxruntime", ...
    tensorflow_ops: Mapping[str, frozenset[str]] = field(default_factory=dict)  # model file -> op types it uses
    op_names: Mapping[str, frozenset[str]] = field(default_factory=dict)  # registrant -> those op types it names
    descriptors: Mapping[str, DescriptorFacts] = field(default_factory=dict)  # preloads exporting protobuf tables
    registrars: Mapping[str, Registrar] = field(default_factory=dict)  # loaded objects registering protobuf files
    # each entry of the container's backend directory (sorted) -> the names in it, sorted (CO504: the framework
    # library a library was built against, and the version in its file name); with a prediction only
    backends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Probes:
    """What --probe observed: each group of op libraries loaded with its real framework, and TensorFlow's op
    registry in the server process (or why it could not be probed; None without TensorFlow models)."""

    groups: tuple[ProbedGroup, ...]
    tensorflow: TensorflowRegistry | str | None = None
    # what the models of probed groups use (CO408 as observed), read by probed(): model file -> ops, None
    # where unreadable; and each ONNX Runtime library probed -> the domains among those it names
    onnx_ops: Mapping[str, ModelOps | None] = field(default_factory=dict)
    torchscript_calls: Mapping[str, frozenset[tuple[str, str]]] = field(default_factory=dict)
    tensorflow_ops: Mapping[str, set[str] | None] = field(default_factory=dict)
    built_in: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleContext:
    """The input of every rule's check(). `prediction` is None for a facts-only run (no container
    libraries to model); `outcomes` pairs each plan step with the linker model's outcome for it."""

    plan: LoadPlan
    triton: Context
    reader: ElfReader
    files: FileFacts
    models: tuple[Model, ...] = ()
    prediction: Prediction | None = None
    outcomes: tuple[tuple[LoadStep, StepOutcome], ...] = ()
    probes: Probes | None = None  # with --probe (customops.rules.probed)
    registrants: tuple[LoadStep, ...] = ()  # every library whose registrations count (registrants())
    stubs: tuple[StubRun, ...] = ()  # the Python backend's stub processes, as the linker model ran them

    @property
    def steps(self) -> tuple[LoadStep, ...]:
        return (*self.plan.preloads, *self.plan.dlopens)

    @property
    def custom_steps(self) -> tuple[LoadStep, ...]:
        """The steps of libraries other than backend libraries: op libraries, plugins, preloads."""
        return tuple(s for s in self.steps if s.purpose is not Purpose.BACKEND_LIBRARY)


def build(plan: LoadPlan, triton: Context, reader: ElfReader, models: Sequence[Model] = (),
          prediction: Prediction | None = None,
          outcomes: Sequence[tuple[LoadStep, StepOutcome]] = (), probes: Probes | None = None) -> RuleContext:
    """Read the facts the rules need, then the context."""
    steps = (*plan.preloads, *plan.dlopens)
    registering = registrants(plan, prediction, outcomes, triton.container.backend_dir)
    custom = list(dict.fromkeys(s.host_path for s in registering))
    sources = [s.host_path for s in steps]
    loaded = [o.path for o in prediction.objects] if prediction is not None else []
    registrations = files.registrations(custom, reader)
    facts = FileFacts(
        modes=files.modes([p for s in sources for p in (s, os.path.dirname(s))]),
        identities=files.identities([*loaded, *custom]) if prediction is not None else {},
        digests=files.digests(custom),
        registrations=registrations,
        refused_defs=_refused_defs(registrations, reader),
        setuid_server=_setuid_server(triton),
        descriptors=protobuf_descriptors.read([s.host_path for s in plan.preloads], reader),
        registrars=protobuf_registrations.read(loaded, reader))
    if triton.container.target is not None and triton.container.facts.known_from is FactsFrom.ROOT:
        facts = _with_model_facts(facts, models, triton, custom)
    if triton.container.target is not None and prediction is not None:
        facts = replace(facts, backends=_backends(triton))
    return RuleContext(plan, triton, reader, facts, tuple(models), prediction, tuple(outcomes), probes, registering)


def registrants(plan: LoadPlan, prediction: Prediction | None, outcomes: Sequence[tuple[LoadStep, StepOutcome]],
                backend_dir: str = "") -> tuple[LoadStep, ...]:
    """Every library of the process whose registrations count, wherever it comes from: the plan's libraries
    other than backend libraries, and each library of an LD_PRELOAD the server inherits (launch: the
    environment's), which no text of the checkout names (a host preload step of its own). The preloads in the
    order ld.so loads them (the prediction's), then the dlopen()ed ones; each after the libraries its load brings
    (_brought), but for the frameworks' own libraries (in `backend_dir`), whose registrations are built in."""
    custom = [s for s in (*plan.preloads, *plan.dlopens) if s.purpose is not Purpose.BACKEND_LIBRARY]
    if prediction is None:
        return tuple(custom)
    owner = {id(outcome): step for step, outcome in outcomes}
    hosts = {o.name: o.path for o in prediction.objects}
    preloads: list[LoadStep] = []
    for outcome in prediction.outcomes:
        step = owner.get(id(outcome))
        if step is None and outcome.kind is StepKind.PRELOAD and outcome.loaded and outcome.loaded[0] in hosts:
            step = LoadStep(outcome.request, hosts[outcome.loaded[0]], LoadedBy.HOST, Purpose.PRELOAD, preload=True)
        if step is not None and step.preload and step not in preloads:
            preloads.append(step)
    preloads += [s for s in custom if s.preload and s not in preloads]  # those the process never reaches
    outcome_of = {id(step): outcome for step, outcome in outcomes}
    outcome_of.update({id(s): o for s in preloads for o in prediction.outcomes
                       if s.loader is LoadedBy.HOST and o.kind is StepKind.PRELOAD and o.request == s.path})
    ordered = (*preloads, *(s for s in custom if not s.preload))
    named = {s.path for s in ordered}  # a library named itself registers as itself, once ld.so maps it
    found: list[LoadStep] = []
    for step in ordered:
        for brought in _brought(step, outcome_of.get(id(step)), prediction, backend_dir):
            if brought.path not in named:
                named.add(brought.path)
                found.append(brought)
        found.append(step)
    return tuple(found)


def _brought(step: LoadStep, outcome: StepOutcome | None, prediction: Prediction,
             backend_dir: str) -> tuple[LoadStep, ...]:
    """The libraries a registrant's load brings into the process with it (the objects whose loader chain leads
    to it: its DT_NEEDED tree, what was not there yet), deepest first as their initializers run: their
    registrations count as the registrant's do (an op library whose helper library holds the TORCH_LIBRARY block
    registers it all the same). The frameworks' own libraries, and what only they bring, are left out. Each is a
    step of the registrant's kind, named by the text that names the registrant."""
    if outcome is None or outcome.status is not StepStatus.LOADED:
        return ()
    frameworks = backend_dir.rstrip("/") + "/" if backend_dir else "\0"
    chain = {step.path}
    found = []
    for obj in prediction.objects:  # in load order: a loader comes before what it brings
        if obj.loaded_by in chain and obj.name not in chain and not obj.name.startswith(frameworks):
            chain.add(obj.name)
            found.append(obj)
    return tuple(replace(step, path=o.name, host_path=o.path) for o in reversed(found))


def _refused_defs(registrations: Mapping[str, tuple[Registration, ...]], reader: ElfReader) -> dict[str, RefusedDef]:
    """What each Torch op library does when torch refuses one of its schemas: whether a second copy of it, or
    another build defining the same schemas, aborts the server or loads."""
    found = {}
    for path, registered in registrations.items():
        if not any(r.framework == PYTORCH.probe and r.kind == "op-library" for r in registered):
            continue
        try:
            refusal = refused_def(reader.read(path), files.readonly_strings(path, STABLE_DEF_TEXT))
        except ElfError:
            continue
        if refusal is not None:
            found[path] = refusal
    return found


def _setuid_server(triton: Context) -> bool:
    container = triton.container
    target = container.target
    if target is None or not container.server:
        return False
    host = target.host_path(container.server)
    mode = files.modes([host]).get(host) if host else None
    return bool(mode and mode & (stat.S_ISUID | stat.S_ISGID))


def _with_model_facts(facts: FileFacts, models: Sequence[Model], triton: Context,
                      registrants: Sequence[str]) -> FileFacts:
    """The ops the models use and the names the container's frameworks build in (CO408); only where the
    container's own files are at hand (a root, not a profile), as only then can built-in names be told apart."""
    container = triton.container
    target = container.target
    assert target is not None
    torchscript = PYTORCH.model_file
    calls = {m.model_file(torchscript): frozenset(files.torchscript_ops(m.model_file(torchscript)))
             for m in models if m.backend == PYTORCH.backend and m.versions}
    used = {path: ops for m in models if m.backend == ONNXRUNTIME.backend and m.versions and not m.op_libraries
            if (ops := files.onnx_ops(path := m.model_file(ONNXRUNTIME.model_file))) is not None}
    needles = {PYTORCH.backend: {f"{ns}::".encode() for found in calls.values() for ns, _ in found},
               ONNXRUNTIME.backend: {b"\0" + d.encode() + b"\0" for ops, local in used.values() for d, _ in ops - local
                               if d not in ("", "ai.onnx")}}
    graphs = {m.model_file(TENSORFLOW.file_for(m.platform)) for m in models if m.backend == TENSORFLOW.backend
              and m.versions}
    tensorflow = {path: frozenset(found) for path in sorted(graphs)
                  if (found := files.read_or_none(tf_model_ops, path)) is not None}
    op_types = {op for ops in tensorflow.values() for op in ops}
    frameworks = {}
    for name, wanted in needles.items():
        directory = target.host_path(f"{container.backend_dir}/{name}")
        libraries = files.libraries_in(directory) if directory else []
        frameworks[name] = FrameworkStrings(directory or "", bool(libraries), files.mentions(libraries, wanted))
    op_names: dict[str, frozenset[str]] = {}
    if op_types:  # REGISTER_OP's names: in the container's TensorFlow libraries and in every registrant
        directory = target.host_path(f"{container.backend_dir}/{TENSORFLOW.backend}")
        libraries = files.libraries_in(directory) if directory else []
        named = files.names_in_readonly_data([*libraries, *registrants], op_types)
        frameworks[TENSORFLOW.backend] = FrameworkStrings(directory or "", bool(libraries), frozenset(
            name.encode() for library in libraries for name in named.get(library, ())))
        op_names = {path: named[path] for path in registrants if path in named}
    return replace(facts, torchscript_calls=calls, onnx_ops=used, frameworks=frameworks, tensorflow_ops=tensorflow,
                   op_names=op_names)


def _backends(triton: Context) -> dict[str, tuple[str, ...]]:
    """Each entry of the container's backend directory, with the names in it (none where it is not a directory);
    none where the backend directory cannot be listed."""
    container = triton.container
    target = container.target
    assert target is not None
    return {entry: files.listing(target.host_path(f"{container.backend_dir}/{entry}"))
            for entry in files.listing(target.host_path(container.backend_dir))}


def probed(groups: Sequence[ProbedGroup], tensorflow: TensorflowRegistry | str | None,
           models: Sequence[Model]) -> Probes:
    """What --probe observed, with what customops.rules.probed then reads of the models: the ops of each ONNX
    model probed with its op libraries, of each TorchScript model (with a Torch group), of each TensorFlow model
    (with TensorFlow's registry), and the custom domains each probed ONNX Runtime library names itself."""
    available = [g for g in groups if g.framework != TENSORRT.probe and not g.unavailable]
    onnx_models = {g.model for g in available if g.framework == ONNXRUNTIME.probe}
    torch = any(g.framework == PYTORCH.probe for g in available)
    onnx: dict[str, ModelOps | None] = {}
    calls: dict[str, frozenset[tuple[str, str]]] = {}
    tensorflow_ops: dict[str, set[str] | None] = {}
    for model in models:
        if not model.versions:
            continue
        if model.backend == ONNXRUNTIME.backend and model.name in onnx_models:
            path = model.model_file(ONNXRUNTIME.model_file)
            onnx[path] = files.read_or_none(model_ops, path)
        elif model.backend == PYTORCH.backend and torch:
            path = model.model_file(PYTORCH.model_file)
            calls[path] = frozenset(files.torchscript_ops(path))
        elif model.backend == TENSORFLOW.backend and isinstance(tensorflow, TensorflowRegistry):
            path = model.model_file(TENSORFLOW.file_for(model.platform))
            tensorflow_ops[path] = files.read_or_none(tf_model_ops, path)
    needles = {b"\0" + d.encode() + b"\0": d for found in onnx.values() if found is not None
               for d, _op in found[0] - found[1] if d not in ("", "ai.onnx")}
    runtimes = sorted({g.runtime for g in available if g.framework == ONNXRUNTIME.probe and g.runtime})
    built_in = {r: frozenset(needles[n] for n in files.mentions([r], needles)) for r in runtimes} if needles else {}
    return Probes(tuple(groups), tensorflow, onnx, calls, tensorflow_ops, built_in)


def with_prediction(ctx: RuleContext, prediction: Prediction, outcomes: Sequence[tuple[LoadStep, StepOutcome]]
                    ) -> RuleContext:
    """The same context over another run of the linker model (customops.app.as_if_fixed): only what depends on
    the objects it loads (their registrants, identities and protobuf registrations) is found again."""
    registering = registrants(ctx.plan, prediction, outcomes, ctx.triton.container.backend_dir)
    loaded = [o.path for o in prediction.objects]
    identities = files.identities([*loaded, *(s.host_path for s in registering)])
    unread = [s.host_path for s in registering if s.host_path not in ctx.files.registrations]
    registrations = {**ctx.files.registrations, **files.registrations(unread, ctx.reader)}
    return replace(ctx, prediction=prediction, outcomes=tuple(outcomes), registrants=registering,
                   files=replace(ctx.files, identities=identities, registrations=registrations,
                                 registrars=protobuf_registrations.read(loaded, ctx.reader)))


class About(TypedDict):
    model: str | None
    library: str
    file: str
    related: tuple[Related, ...]


def again(first: LoadStep, second: LoadStep) -> About:
    """What a finding about `second`, loaded after `first` with which it collides, is about: its model, library
    and file, and `first` as the related library (customops.app.text_locations places both)."""
    return {"model": second.model, "library": second.path, "file": second.host_path, "related": (Related(first.path),)}
