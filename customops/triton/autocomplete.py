"""Which backend serves a model: Triton core's AutoCompleteBackendFields, then the platform and backend rules of
ValidateModelConfig (core src/model_config_utils.cc), in their order.

The core looks into one directory only: the model's lexicographically first subdirectory (any directory, not
only a version), and decides in a fixed order of frameworks (TensorFlow, TensorRT, ONNX Runtime, OpenVINO,
PyTorch, Python). A custom backend is taken from the model's *name* (`m.mybackend`), and only when the config
gives neither backend, platform nor default_model_filename. Both steps run whether or not auto-complete is
disabled (that only makes a config file required).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from customops.triton.modelconfig import did_you_mean
from customops.triton.release_rules import TODAY, RepositoryRules


class BackendType(Enum):
    """GetBackendType / GetBackendTypeFromPlatform: UNKNOWN takes any platform."""

    UNKNOWN = "unknown"
    TENSORFLOW = "tensorflow"
    TENSORRT = "tensorrt"
    ONNXRUNTIME = "onnxruntime"
    PYTORCH = "pytorch"  # BACKEND_TYPE_TORCHAOTI is BACKEND_TYPE_PYTORCH too (4): "pytorch" serves torch_aoti


PLATFORM_TYPE = {"tensorflow_graphdef": BackendType.TENSORFLOW, "tensorflow_savedmodel": BackendType.TENSORFLOW,
                 "tensorrt_plan": BackendType.TENSORRT, "onnxruntime_onnx": BackendType.ONNXRUNTIME,
                 "pytorch_libtorch": BackendType.PYTORCH, "torch_aoti": BackendType.PYTORCH}
# GetBackendType: the AOTI backend is "pytorch" too
BACKEND_TYPE = {"tensorflow": BackendType.TENSORFLOW, "tensorrt": BackendType.TENSORRT,
                "onnxruntime": BackendType.ONNXRUNTIME, "pytorch": BackendType.PYTORCH}
PLATFORMS = (*PLATFORM_TYPE, "libtorch", "ensemble")  # the platform names the core knows
SAVEDMODEL, GRAPHDEF, PLAN, ONNX = "model.savedmodel", "model.graphdef", "model.plan", "model.onnx"
OPENVINO, LIBTORCH, AOTI, PYTHON = "model.xml", "model.pt", "model.pt2", "model.py"


@dataclass(frozen=True)
class Served:
    """The auto-completed fields, or the core's message when the model cannot be served (`problem`)."""

    backend: str
    platform: str
    default_model_filename: str
    problem: str = ""
    hint: str = ""
    suggestion: str = ""  # "did you mean 'onnxruntime_onnx'?": for the finding's message, not the core's


@dataclass(frozen=True)
class _Look:
    """What the core sees of the model's first subdirectory."""

    path: str  # "" when the model has no subdirectory
    contents: frozenset[str]

    def has_file(self, name: str) -> bool:
        return name in self.contents and not os.path.isdir(os.path.join(self.path, name))

    def has_dir(self, name: str) -> bool:
        return name in self.contents and os.path.isdir(os.path.join(self.path, name))


def served(model_dir: str, name: str, backend: str, platform: str, filename: str, config_name: str = "",
           rules: RepositoryRules = TODAY) -> Served:
    """AutoCompleteBackendFields (which reads the directory's `name`), then ValidateModelConfig's backend checks
    (whose messages name the config's name, the directory's when it gives none), as the container's release
    (`rules`) has them: before torch_aoti and the libtorch alias, those platforms are unknown names."""
    unknown = {p for p, known in (("torch_aoti", rules.torch_aoti_platform),
                                  ("libtorch", rules.libtorch_platform_alias)) if not known}
    completed = _autocomplete(_look(model_dir), name, backend, platform, filename, rules)
    return completed if completed.problem else _validate(config_name or name, completed, unknown)


def _look(model_dir: str) -> _Look:
    try:
        subdirs = sorted(d for d in os.listdir(model_dir) if os.path.isdir(os.path.join(model_dir, d)))
    except OSError:
        subdirs = []
    if not subdirs:
        return _Look("", frozenset())
    first = os.path.join(model_dir, subdirs[0])  # std::set<std::string>: byte order
    try:
        return _Look(first, frozenset(os.listdir(first)))
    except OSError:
        return _Look(first, frozenset())


def _autocomplete(look: _Look, name: str, backend: str, platform: str, filename: str,
                  rules: RepositoryRules) -> Served:
    guess = not platform and not filename and bool(look.path)  # "nothing given, and a directory to look at"
    if not platform and backend in ("", "tensorflow"):
        if filename == SAVEDMODEL or (not filename and look.has_dir(SAVEDMODEL)):
            platform = "tensorflow_savedmodel"
        if filename == GRAPHDEF or (not filename and look.has_file(GRAPHDEF)):
            platform = "tensorflow_graphdef"
    if platform in ("tensorflow_savedmodel", "tensorflow_graphdef"):
        named = SAVEDMODEL if platform == "tensorflow_savedmodel" else GRAPHDEF
        return Served(backend or "tensorflow", platform, filename or named)
    if not backend and (platform == "tensorrt_plan" or filename == PLAN or (guess and look.has_file(PLAN))):
        backend = "tensorrt"
    if backend == "tensorrt":
        return Served(backend, platform or "tensorrt_plan", filename or PLAN)
    if not backend and (platform == "onnxruntime_onnx" or filename == ONNX or (guess and ONNX in look.contents)):
        backend = "onnxruntime"
    if backend == "onnxruntime":
        return Served(backend, platform or "onnxruntime_onnx", filename or ONNX)
    if not backend and (filename == OPENVINO or (guess and OPENVINO in look.contents)):
        backend = "openvino"
    if backend == "openvino":
        return Served(backend, platform, filename or OPENVINO)
    if not backend:
        aoti = rules.torch_aoti_platform
        platforms = ("pytorch_libtorch", *(("libtorch",) if rules.libtorch_platform_alias else ()),
                     *(("torch_aoti",) if aoti else ()))
        if platform in platforms or filename in (LIBTORCH, *((AOTI,) if aoti else ())):
            backend = "pytorch"
        elif guess and LIBTORCH in look.contents:  # a model.pt directory settles it too: nothing is chosen
            backend, platform = ("pytorch", "pytorch_libtorch") if look.has_file(LIBTORCH) else ("", "")
        elif guess and aoti and look.has_file(AOTI):
            backend, platform = "pytorch", "torch_aoti"
    if backend == "pytorch":
        if not platform:
            return Served(backend, "pytorch_libtorch", filename or LIBTORCH)
        return Served(backend, platform, filename or (AOTI if platform == "torch_aoti" else ""))
    if not backend and (filename == PYTHON or (guess and PYTHON in look.contents)):
        backend = "python"
    if backend == "python":
        return Served(backend, platform, filename or PYTHON)
    if not backend and not platform and not filename:
        if "." not in name:
            return Served("", "", "", f"Invalid model name: Could not determine backend for model '{name}' with no "
                                      "backend in model configuration. Expected model name of the form "
                                      "'model.<backend_name>'.",
                          hint=f"Set backend: \"<name>\" in config.pbtxt, or name the model '{name}.<backend>'.")
        custom = name.split(".", 1)[1]
        return Served(custom, "", f"model.{custom}")
    return Served(backend, platform, filename)


def _validate(name: str, served: Served, unknown: set[str]) -> Served:
    """`unknown`: platform names the container's release does not know yet."""
    backend, platform = served.backend, served.platform
    types = {p: t for p, t in PLATFORM_TYPE.items() if p not in unknown}
    problem = ""
    if not backend and platform != "ensemble":
        problem = f"unexpected platform type '{platform}' for {name}"
        suggestion = did_you_mean(platform, [p for p in PLATFORMS if p not in unknown]) if platform else ""
        return Served(backend, platform, served.default_model_filename, problem, suggestion=suggestion)
    if backend and platform == "ensemble":
        problem = f"Ensemble model '{name}' must have platform type '{platform}' and empty backend type"
    elif BACKEND_TYPE.get(backend, BackendType.UNKNOWN) not in (
            BackendType.UNKNOWN, types.get(platform, BackendType.UNKNOWN)):
        problem = f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}"
    return Served(backend, platform, served.default_model_filename, problem)
