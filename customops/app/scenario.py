"""The server process as the linker model runs it (customops.linker.types.Scenario), and each of its
outcomes paired back with the plan step it answers: by the step's own label for a dlopen, and by the
LD_PRELOAD entries the step's path becomes for a preload, never by position (an entry ld.so splits in two,
or one already in the environment, would shift every later pairing onto the wrong file)."""

from __future__ import annotations

from collections import defaultdict, deque

from customops.linker.prediction import Prediction
from customops.linker.process import split_preload
from customops.linker.types import Dlopen, Environment, Scenario, StepKind, StepOutcome
from customops.triton.plan import Context, LoadPlan, LoadStep


def scenario_for(plan: LoadPlan, executable: str, ctx: Context, extra_preload: str | None = None) -> Scenario:
    """The server process: LD_PRELOAD and LD_LIBRARY_PATH as launch sets them, then the dlopen steps, each
    labelled with its place in the plan (step_label)."""
    preload = ":".join(p for p in (extra_preload, plan.ld_preload) if p) or None
    library_path = ":".join(plan.library_path) or None
    env = Environment(library_path=library_path, preload=preload, cwd=ctx.server_cwd)
    steps = tuple(Dlopen(s.path, lazy=s.lazy, calls=s.entry_points, caller=s.caller, label=step_label(i, s))
                  for i, s in enumerate(plan.dlopens))
    return Scenario(executable, env, steps)


def step_label(index: int, step: LoadStep) -> str:
    """Unique within a plan (two op libraries of one model share model and purpose): the dlopen's identity."""
    return f"{index}:{step.model or ''}:{step.purpose}"


def pair_outcomes(plan: LoadPlan, prediction: Prediction, extra_preload: str | None = None) -> list[
        tuple[LoadStep, StepOutcome]]:
    """Each plan step with the linker model's outcomes for it, in the model's order. A preload step owns the
    outcome of every entry ld.so makes of its path (split_preload: one, unless the path holds a separator); an
    entry of `extra_preload` (the environment's own LD_PRELOAD, which comes first) belongs to no step. A step
    the process never reaches (it died earlier) has no outcome."""
    owners: defaultdict[str, deque[LoadStep | None]] = defaultdict(deque)
    for entry in split_preload(extra_preload):
        owners[entry].append(None)
    for preload in plan.preloads:
        for entry in split_preload(preload.path):
            owners[entry].append(preload)
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
