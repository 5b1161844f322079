"""The server process as the linker model runs it (customops.linker.types.Scenario), with the variables it
inherits (Inherited), and each of its outcomes paired back with the plan step it answers: by the step's own
label for a dlopen, and by the
LD_PRELOAD entries the step's path becomes for a preload, never by position (an entry ld.so splits in two,
or one already in the environment, would shift every later pairing onto the wrong file)."""

from __future__ import annotations

from collections import defaultdict, deque

from customops.app.inherited import NOTHING_INHERITED, Inherited
from customops.linker.prediction import Prediction
from customops.linker.process import split_preload
from customops.linker.types import Dlopen, Environment, Scenario, StepKind, StepOutcome
from customops.triton.plan import Context, LoadPlan, LoadStep


def scenario_for(plan: LoadPlan, executable: str, ctx: Context, inherited: Inherited = NOTHING_INHERITED) -> Scenario:
    """The server process: LD_PRELOAD and LD_LIBRARY_PATH as launch sets them, then the dlopen steps, each
    labelled with its place in the plan (step_label)."""
    env = Environment(library_path=inherited.library_path_with(plan.library_path),
                      preload=inherited.preload_with(plan.ld_preload), cwd=ctx.server_cwd)
    steps = tuple(Dlopen(s.path, lazy=s.lazy, calls=s.entry_points, caller=s.caller, label=step_label(i, s))
                  for i, s in enumerate(plan.dlopens))
    return Scenario(executable, env, steps)


def step_label(index: int, step: LoadStep) -> str:
    """Unique within a plan (two op libraries of one model share model and purpose): the dlopen's identity."""
    return f"{index}:{step.model or ''}:{step.purpose.value}"


def pair_outcomes(plan: LoadPlan, prediction: Prediction, inherited: Inherited = NOTHING_INHERITED) -> list[
        tuple[LoadStep, StepOutcome]]:
    """Each plan step with the linker model's outcomes for it, in the model's order. A preload step owns the
    outcome of every entry ld.so makes of its path (split_preload: one, unless the path holds a separator); an
    entry of the inherited LD_PRELOAD belongs to no step, before or after the plan's as launch puts it. A step
    the process never reaches (it died earlier) has no outcome."""
    owners: defaultdict[str, deque[LoadStep | None]] = defaultdict(deque)
    ours = [(entry, preload) for preload in plan.preloads for entry in split_preload(preload.path)]
    theirs: list[tuple[str, LoadStep | None]] = [(entry, None) for entry in split_preload(inherited.preload)]
    for entry, owner in [*theirs, *ours] if inherited.preload_first else [*ours, *theirs]:
        owners[entry].append(owner)
    by_label = {step_label(i, s): s for i, s in enumerate(plan.dlopens)}
    pairs: list[tuple[LoadStep, StepOutcome]] = []
    for outcome in prediction.outcomes:
        step: LoadStep | None = None
        if outcome.kind is StepKind.PRELOAD and owners.get(outcome.request):
            step = owners[outcome.request].popleft()
        elif outcome.kind is StepKind.DLOPEN:
            step = by_label.get(outcome.label)
        if step is not None:
            pairs.append((step, outcome))
    return pairs
