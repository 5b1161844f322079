"""Temporary facade while the callers move to customops.linker.process/types/prediction."""

from customops.linker.messages import NOT_FOUND
from customops.linker.prediction import Prediction
from customops.linker.process import Linker
from customops.linker.types import (
    Binding,
    CallOutcome,
    Definition,
    Dlopen,
    Environment,
    Failure,
    LoadedObject,
    Scenario,
    Search,
    SearchAttempt,
    StepOutcome,
)

__all__ = [
    "NOT_FOUND",
    "Binding",
    "CallOutcome",
    "Definition",
    "Dlopen",
    "Environment",
    "Failure",
    "Linker",
    "LoadedObject",
    "Prediction",
    "Scenario",
    "Search",
    "SearchAttempt",
    "StepOutcome",
]
