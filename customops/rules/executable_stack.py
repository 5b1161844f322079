"""CO309: a library that needs an executable stack (glibc elf/dl-load.c _dl_map_object_from_fd: PF_X in its
PT_GNU_STACK, or no PT_GNU_STACK where the machine's default stack is executable). Before glibc 2.41 dlopen
makes every thread's stack executable for it (_dl_make_stack_executable); from 2.41 on dlopen refuses it,
unless the stack is already executable: the program or an object loaded at start-up (a preload, which ld.so
still grants) needed it. A preload's own need is no failure, only what makes the stack executable."""

from __future__ import annotations

from customops.codes import Code, Severity
from customops.elf.summary import version_key
from customops.emitters import emits
from customops.errors import ElfError
from customops.findings import Finding
from customops.linker.types import StepKind, StepOutcome, StepStatus
from customops.rules.context import RuleContext
from customops.rules.loading import LOAD_FAILED
from customops.triton.plan import LoadStep, Purpose

REFUSING = (2, 41)  # the first glibc whose dlopen refuses (NEWS 2.41)
REFUSED = "cannot enable executable stack as shared object requires: Invalid argument"  # dlerror(), EINVAL
NEEDS_PREDICTION = False  # without one the dlopened libraries themselves are read, the start-up undecided


def check(rules: RuleContext) -> list[Finding]:
    glibc = rules.triton.container.facts.glibc
    if rules.prediction is None:
        return [f for step in rules.plan.dlopens for f in _from_facts(step, rules, glibc)]
    started = {i for i, o in enumerate(rules.prediction.outcomes) if o.kind is not StepKind.DLOPEN}
    startup = [o for o in rules.prediction.objects if o.step in started]
    executable = next((o.name for o in startup if _needs(o.path, rules)), None)
    if executable is not None:  # the stack already is: every later dlopen loads as before
        return []
    checked = f"nothing loaded at start-up needs it ({len(startup)} objects: the server, its preloads and their " \
              "dependencies)"
    findings: list[Finding] = []
    for step, outcome in rules.outcomes:
        if outcome.kind is StepKind.DLOPEN and outcome.status is StepStatus.LOADED:
            index = next(i for i, o in enumerate(rules.prediction.outcomes) if o is outcome)
            needing = next((o for o in rules.prediction.objects if o.step == index and _needs(o.path, rules)), None)
            if needing is not None:  # ld.so maps the new objects in this order: the first one fails the dlopen
                name = _requested(needing.name, outcome)
                findings.append(executable_stack(step, name, glibc, (_why(needing.path, name, rules), checked)))
    return findings


def _from_facts(step: LoadStep, rules: RuleContext, glibc: str | None) -> list[Finding]:
    if not _needs(step.host_path, rules):
        return []
    undecided = ("whether an object loaded at start-up already made the stack executable cannot be decided "
                 "without the container's libraries")
    return [executable_stack(step, step.path, glibc, (_why(step.host_path, step.path, rules), undecided))]


def _needs(host_path: str, rules: RuleContext) -> bool:
    try:
        return rules.reader.read(host_path).needs_executable_stack
    except ElfError:
        return False


def _requested(name: str, outcome: StepOutcome) -> str:
    """The name dlerror() gives the object: as dlopen or the DT_NEEDED entry asked for it."""
    return next((s.name for s in outcome.searches if s.found == name), name)


def _refuses(glibc: str | None) -> bool | None:
    key = version_key(glibc) if glibc else None
    return key[1] >= REFUSING if key else None


@emits(Code.CO309)
def executable_stack(step: LoadStep, needing: str, glibc: str | None, evidence: tuple[str, ...]) -> Finding:
    """A dlopen()ed library (or a dependency it brings in) that needs an executable stack: refused by a glibc
    2.41 or newer container (error), made executable for the whole server by an older one (warning)."""
    what = f"{step.purpose} {step.path}" + (f" of model '{step.model}'" if step.model else "")
    subject = what if needing == step.path else f"{needing}, which {what} needs,"
    refuses, dlerror = _refuses(glibc), f"{needing}: {REFUSED}"
    if step.purpose is Purpose.BACKEND_LIBRARY:
        dlerror = LOAD_FAILED + dlerror
    has = f"the container's glibc ({glibc})" if glibc else "the container's glibc (its version unknown)"
    if refuses:
        message, severity = f"{subject} needs an executable stack, which {has} refuses to dlopen", Severity.ERROR
    else:
        message, severity = (f"{subject} needs an executable stack: {has} makes every thread's stack of the server "
                             "executable as it loads; from glibc 2.41 on (a container on a newer base) dlopen "
                             "refuses it", Severity.WARNING)
    return Finding(Code.CO309, message, severity=severity, model=step.model, library=step.path,
                   file=step.host_path, predicted=dlerror if refuses else None, evidence=evidence)


def _why(host_path: str, name: str, rules: RuleContext) -> str:
    flags = rules.reader.read(host_path).stack_flags
    return f"{name}: " + ("no PT_GNU_STACK program header, and the machine's default stack is executable"
                          if flags is None else "its PT_GNU_STACK program header has PF_X")
