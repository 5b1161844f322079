"""The value checks Triton core makes of a parsed config.pbtxt before any backend sees it (ValidateModelConfig in
core src/model_config_utils.cc: batch sizes, dynamic batching's priorities), and the per-tensor checks of
ValidateModelIOConfig (name, data_type, dims) where no backend completes the tensors first. The first failing
check, in the core's order, with the core's message; None when they all pass."""

from __future__ import annotations

from typing import Any

from customops.frameworks import DESCRIPTORS

# backends that complete a model's inputs and outputs from the model file before the core checks them
COMPLETING_BACKENDS = frozenset(f.backend for f in DESCRIPTORS if f.completes_io)


def first_problem(config: Any, name: str, backend: str) -> str | None:
    problem = _batching(config, name)
    if problem is None and backend and backend not in COMPLETING_BACKENDS:
        problem = _tensors(config, name)
    return problem


def _batching(config: Any, name: str) -> str | None:
    if config.max_batch_size < 0:
        return f"'max_batch_size' must be non-negative value for {name}"
    if not config.HasField("dynamic_batching"):
        return None
    batching = config.dynamic_batching
    for size in batching.preferred_batch_size:
        if size <= 0:
            return f"dynamic batching preferred size must be positive for {name}"
        if size > config.max_batch_size:
            return f"dynamic batching preferred size must be <= max batch size for {name}"
    levels = batching.priority_levels
    if levels and not 1 <= batching.default_priority_level <= levels:
        return f"default priority level must be in range [1, {levels}] for {name}"
    return None


def _tensors(config: Any, name: str) -> str | None:
    """ValidateIOShape for each input, then each output."""
    for kind, tensors in (("model input ", config.input), ("model output ", config.output)):
        for tensor in tensors:
            if not tensor.name:
                return f"{kind}must specify 'name' for {name}"
            if tensor.data_type == 0:  # TYPE_INVALID
                return f"{kind}'{tensor.name}' must specify 'data_type' for {name}"
            if not tensor.dims:
                return f"{kind}'{tensor.name}' must specify 'dims' for {name}"
    return None
