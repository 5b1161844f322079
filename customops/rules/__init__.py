"""Rules turn the plan and the linker model's outcomes into findings: one module per family of codes.

Every rule module declares NEEDS_PREDICTION (whether it needs the linker model's prediction, which a
facts-only run lacks) and `check(ctx: RuleContext) -> list[Finding]`; the findings of each code are made by
that code's emitter (`@emits(Code.COxxx)`, customops.emitters), in the module of its family.
customops.rules.probed, which merges what --probe observed into these findings, runs after them.
"""

from __future__ import annotations

from customops.findings import Finding
from customops.rules import (
    collisions,
    executable_stack,
    hygiene,
    loading,
    python_stubs,
    registrations,
    unregistered_ops,
    versions,
)
from customops.rules.context import RuleContext

# in the order their findings are reported
RULES = (loading, executable_stack, python_stubs, collisions, versions, hygiene, registrations, unregistered_ops)


def run(ctx: RuleContext) -> list[Finding]:
    """Every rule's findings; a facts-only run (no prediction) skips the rules that need one."""
    findings: list[Finding] = []
    for rule in RULES:
        if ctx.prediction is not None or not rule.NEEDS_PREDICTION:
            findings += rule.check(ctx)
    return findings
