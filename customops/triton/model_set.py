"""The models a server serves together, as Triton core's model repository manager decides them
(model_repository_manager.cc: polling across repositories, explicit-mode polling, the DependencyGraph of ensemble
steps; model_config_utils.cc ValidateModelConfig): a model name must be unique across the repositories (unless
--model-namespacing), a model named with --load-model must be in one, and an ensemble is served only when every
model its steps name is. In explicit mode the models an ensemble's steps name load with it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from customops import safeio
from customops.codes import Code
from customops.emitters import emits
from customops.errors import InputError
from customops.findings import Finding
from customops.triton.modelconfig import did_you_mean, value_place
from customops.triton.repository import Model


def steps(model: Model) -> tuple[str, ...]:
    """The models an ensemble's steps name, in order, each once."""
    if model.config is None or not model.config.HasField("ensemble_scheduling"):
        return ()
    return tuple(dict.fromkeys(step.model_name for step in model.config.ensemble_scheduling.step))


def loaded_with(models: Iterable[Model], asked: set[str]) -> set[str]:
    """The models asked for and, transitively, those their ensemble steps name (explicit mode loads them too)."""
    by_name = {m.name: m for m in models}
    wanted, todo = set(asked), list(asked)
    while todo:
        model = by_name.get(todo.pop())
        for name in steps(model) if model is not None else ():
            if name not in wanted:
                wanted.add(name)
                todo.append(name)
    return wanted


def not_in_any_repository(asked: set[str], models: Iterable[Model], names: Iterable[str] = ()) -> list[Finding]:
    """CO108 for each --load-model name no repository has, with the nearest of the models' and `names`' names."""
    present = {m.name for m in models}
    known = present | set(names)
    return [model_not_found(f"model '{name}' is asked for (--load-model) but is in no model repository"
                            + (f" ({hint})" if (hint := did_you_mean(name, known)) else ""), model=name,
                            predicted=f"failed to poll model '{name}': model not found in any model repository.")
            for name in sorted(asked - present)]


@emits(Code.CO110)
def not_unique(models: Iterable[Model], namespacing: bool) -> list[Finding]:
    """A model name in several repositories: the core polls none of them (without namespacing)."""
    if namespacing:
        return []
    seen: dict[str, list[Model]] = {}
    for model in models:
        seen.setdefault(model.name, []).append(model)
    message = "failed to poll model '{}': not unique across all model repositories"
    return [Finding(Code.CO110, f"model '{name}' is in {len(copies)} model repositories; the server loads none of them",
                    model=name, file=copies[0].config_path, predicted=message.format(name),
                    evidence=tuple(f"found: {m.path}" for m in copies))
            for name, copies in seen.items() if len(copies) > 1]


def ensemble_findings(models: Iterable[Model], failing: Mapping[str, str], names: Iterable[str] = ()) -> list[Finding]:
    """CO108/CO109 for every ensemble that cannot be served: no ensemble_scheduling, a step naming a model in no
    repository (at that step's line, with the nearest of the models' and `names`' names: every model of the
    repositories, where explicit mode checks only some), or one naming a model that fails (`failing`: model ->
    why; an ensemble failing this way fails the ensembles above it in turn)."""
    models = list(models)
    ensembles = [m for m in models if m.platform == "ensemble" and m.loadable]
    present = {m.name for m in models}
    known = present | set(names)
    failing = dict(failing)
    findings: list[Finding] = []
    for model in ensembles:
        if model.config is not None and not model.config.HasField("ensemble_scheduling"):
            message = f"ensemble scheduling must be set for ensemble {model.name} whose platform is ensemble"
            findings.append(ensemble_unservable(model, message, message))
            failing[model.name] = message
        elif missing := sorted(set(steps(model)) - present):
            message = f"ensemble {model.name} contains models that are not available or ambiguous: {', '.join(missing)}"
            findings.append(_not_found(model, missing, known, message))
            failing[model.name] = message
    changed = True
    while changed:  # an ensemble of a failing ensemble fails too
        changed = False
        for model in ensembles:
            down = next((n for n in steps(model) if n in failing), None) if model.name not in failing else None
            if down is not None:
                predicted = f"ensemble '{model.name}' depends on '{down}' which has no loaded version."
                findings.append(ensemble_unservable(model, f"ensemble '{model.name}' cannot be served: its step "
                                                    f"model '{down}' fails ({failing[down]})", predicted))
                failing[model.name] = predicted
                changed = True
    return findings


def _not_found(model: Model, missing: list[str], known: set[str], predicted: str) -> Finding:
    """CO108 for steps naming models in no repository, each with the nearest name there is ("did you mean"), at
    the line of the first such step in the ensemble's config."""
    named = []
    for name in missing:
        hint = did_you_mean(name, known - {model.name})
        named.append(f"'{name}'" + (f" ({hint})" if hint else ""))
    place = None
    if model.config_path:
        try:
            text = safeio.read_bytes(model.config_path, safeio.CONFIG_LIMIT).decode("utf-8", "replace")
        except (InputError, OSError):
            text = ""
        place = next((p for name in missing if (p := value_place(text, "model_name", name))), None)
    return model_not_found(f"ensemble '{model.name}' names models in no repository: {', '.join(named)}",
                           model=model.name, file=model.config_path, predicted=predicted,
                           line=place[0] if place else None, column=place[1] if place else None)


@emits(Code.CO108)
def model_not_found(message: str, **fields: Any) -> Finding:
    """A model the server is asked for, by --load-model or by an ensemble's step, that no repository has."""
    return Finding(Code.CO108, message, **fields)


@emits(Code.CO109)
def ensemble_unservable(model: Model, message: str, predicted: str) -> Finding:
    """An ensemble without ensemble_scheduling, or one whose step names a model that fails."""
    return Finding(Code.CO109, message, model=model.name, file=model.config_path, predicted=predicted)
