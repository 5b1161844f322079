"""Rules turn the plan and the linker model's outcomes into findings: one module per family of codes."""

from __future__ import annotations

from customops.elf.cache import ElfReader
from customops.findings import Finding
from customops.linker.simulate import Prediction
from customops.rules import collisions, hygiene, loading, registrations, versions
from customops.triton.plan import Context, LoadPlan, LoadStep


def run_rules(plan: LoadPlan, prediction: Prediction, outcomes: list[tuple[LoadStep, object]], ctx: Context,
              reader: ElfReader, models=()) -> list[Finding]:  # type: ignore[no-untyped-def]
    findings = loading.check(plan, prediction, outcomes, ctx, reader)
    findings += collisions.check(plan, prediction, ctx, reader)
    findings += versions.check(plan, ctx, reader, loaded=True)
    findings += versions.string_abi(plan, prediction, ctx, reader)
    findings += hygiene.check(plan, prediction, ctx, models)
    findings += registrations.check(plan, reader, ctx, models)
    return findings


def run_fact_rules(plan: LoadPlan, ctx: Context, reader: ElfReader, models=()) -> list[Finding]:  # type: ignore[no-untyped-def]
    """Without the container's libraries: what the custom libraries themselves and the facts can tell."""
    return (versions.check(plan, ctx, reader, loaded=False) + hygiene.check(plan, None, ctx, models)
            + registrations.check(plan, reader, ctx, models))
