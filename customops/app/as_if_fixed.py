"""One run, every problem. When the modelled server dies (a preload whose dependency is missing keeps it from
starting, a dlopen stops ld.so on an assertion), the models it never reached are modelled again as if that
failure were fixed: without the preloads that keep it from starting, then without each dlopen that kills it.
Whatever those runs find beyond the first is reported with the assumption it was found under, so a CI gate
shows every problem at once instead of one per run."""

from __future__ import annotations

from dataclasses import dataclass, replace

from customops.app.inherited import NOTHING_INHERITED, Inherited
from customops.app.scenario import pair_outcomes, scenario_for
from customops.elf.cache import ElfReader
from customops.linker.prediction import Prediction
from customops.linker.process import Linker
from customops.linker.target import LinkerTarget
from customops.linker.types import Scenario, StepKind, StepOutcome, StepStatus
from customops.triton.plan import Context, LoadPlan, LoadStep

DEATHS = (StepStatus.FATAL, StepStatus.CRASH)


@dataclass(frozen=True)
class ModelledRun:
    """One run of the linker model over the plan. `assumes` is None for the server as it is, else the fix it
    was modelled under, in words ("the server starts without /models/a/libops.so")."""

    prediction: Prediction
    outcomes: list[tuple[LoadStep, StepOutcome]]
    assumes: str | None = None
    left_out: frozenset[str] = frozenset()  # the libraries assumed fixed: what the first run says of them stands


def modelled_runs(plan: LoadPlan, executable: str, ctx: Context, target: LinkerTarget, reader: ElfReader,
                  inherited: Inherited = NOTHING_INHERITED) -> list[ModelledRun]:
    """The server as it is, then, while a run dies, the same server with the cause left out."""
    linker = Linker(target, reader)
    scenario = scenario_for(plan, executable, ctx, inherited)
    prediction = linker.run(scenario)
    runs = [ModelledRun(prediction, pair_outcomes(plan, prediction, inherited))]
    if _death(prediction) is None:
        return runs
    fixes: list[str] = []
    left_out: set[str] = set()
    if _death(prediction) is StepKind.STARTUP:
        started = _starting(plan, executable, ctx, linker, inherited)
        if started is None:  # it does not start even without the plan's preloads: nothing else can be modelled
            return runs
        kept, prediction = started
        dropped = [s.path for s in plan.preloads if s not in kept]
        fixes.append(f"the server starts without {', '.join(dropped)}")
        left_out.update(dropped)
        plan = replace(plan, preloads=kept)
        scenario = scenario_for(plan, executable, ctx, inherited)
    for _ in range(len(scenario.steps)):
        dead = _dead_dlopen(prediction)
        if dead is None:
            break
        fixes.append(f"{dead.request} does not stop the server")
        left_out.add(dead.request)
        scenario = replace(scenario, steps=tuple(s for s in scenario.steps if s.label != dead.label))
        prediction = linker.run(scenario)
    if _death(prediction) is not None:
        return runs
    assumes = " and ".join(fixes) + " (what stops it is reported on its own)"
    return [*runs, ModelledRun(prediction, pair_outcomes(plan, prediction, inherited), assumes,
                               frozenset(left_out))]


def _death(prediction: Prediction) -> StepKind | None:
    """Where the modelled process dies: at start-up, at a dlopen, or not at all."""
    if prediction.exit_message is None:
        return None
    dying = next((o for o in prediction.outcomes if o.status in DEATHS), None)
    return dying.kind if dying is not None and dying.kind is StepKind.DLOPEN else StepKind.STARTUP


def _dead_dlopen(prediction: Prediction) -> StepOutcome | None:
    return next((o for o in prediction.outcomes if o.kind is StepKind.DLOPEN and o.status in DEATHS), None)


def _starting(plan: LoadPlan, executable: str, ctx: Context, linker: Linker,
              inherited: Inherited) -> tuple[tuple[LoadStep, ...], Prediction] | None:
    """The plan's preloads that the server still starts with, added back one at a time in order (every
    broken one is left out, not only the first), and the run with them; None when it does not start even
    without any of them."""
    kept: tuple[LoadStep, ...] = ()
    prediction = linker.run(_with_preloads(plan, kept, executable, ctx, inherited))
    if _death(prediction) is StepKind.STARTUP:
        return None
    for step in plan.preloads:
        trial = linker.run(_with_preloads(plan, (*kept, step), executable, ctx, inherited))
        if _death(trial) is not StepKind.STARTUP:
            kept, prediction = (*kept, step), trial
    return kept, prediction


def _with_preloads(plan: LoadPlan, preloads: tuple[LoadStep, ...], executable: str, ctx: Context,
                   inherited: Inherited) -> Scenario:
    return scenario_for(replace(plan, preloads=preloads), executable, ctx, inherited)
