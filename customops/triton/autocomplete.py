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

from customops.frameworks import DESCRIPTORS, ONNXRUNTIME, OPENVINO, PYTHON, PYTORCH, TENSORFLOW, TENSORRT, Framework
from customops.triton.modelconfig import did_you_mean
from customops.triton.release_rules import TODAY, RepositoryRules

# GetBackendTypeFromPlatform: the framework serving each platform (BACKEND_TYPE_TORCHAOTI is PyTorch's too)
PLATFORM_TYPE: dict[str, Framework] = {p.name: f for f in DESCRIPTORS for p in f.platforms}
# GetBackendType: the framework of a backend name; BACKEND_TYPE_UNKNOWN (not here) takes any platform
BACKEND_TYPE: dict[str, Framework] = {f.backend: f for f in DESCRIPTORS if f.platforms}
PLATFORMS = (*PLATFORM_TYPE, *(a for f in DESCRIPTORS for a in f.platform_aliases), "ensemble")  # all the core knows
GRAPHDEF, SAVEDMODEL = TENSORFLOW.platforms
(PLAN,) = TENSORRT.platforms
(ONNX,) = ONNXRUNTIME.platforms
LIBTORCH, AOTI = PYTORCH.platforms
(LIBTORCH_ALIAS,) = PYTORCH.platform_aliases


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
    unknown = {p for p, known in ((AOTI.name, rules.torch_aoti_platform),
                                  (LIBTORCH_ALIAS, rules.libtorch_platform_alias)) if not known}
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
    if not platform and backend in ("", TENSORFLOW.backend):
        if filename == SAVEDMODEL.model_file or (not filename and look.has_dir(SAVEDMODEL.model_file)):
            platform = SAVEDMODEL.name
        if filename == GRAPHDEF.model_file or (not filename and look.has_file(GRAPHDEF.model_file)):
            platform = GRAPHDEF.name
    if platform in (SAVEDMODEL.name, GRAPHDEF.name):
        named = SAVEDMODEL if platform == SAVEDMODEL.name else GRAPHDEF
        return Served(backend or TENSORFLOW.backend, platform, filename or named.model_file)
    for framework, given in ((TENSORRT, PLAN), (ONNXRUNTIME, ONNX)):  # TensorRT only on a file, ONNX on any entry
        seen = look.has_file(given.model_file) if framework is TENSORRT else given.model_file in look.contents
        if not backend and (platform == given.name or filename == given.model_file or (guess and seen)):
            backend = framework.backend
        if backend == framework.backend:
            return Served(backend, platform or given.name, filename or given.model_file)
    if not backend and (filename == OPENVINO.model_file or (guess and OPENVINO.model_file in look.contents)):
        backend = OPENVINO.backend
    if backend == OPENVINO.backend:
        return Served(backend, platform, filename or OPENVINO.model_file)
    if not backend:
        backend, platform = _pytorch(look, platform, filename, guess, rules)
    if backend == PYTORCH.backend:
        if not platform:
            return Served(backend, LIBTORCH.name, filename or LIBTORCH.model_file)
        return Served(backend, platform, filename or (AOTI.model_file if platform == AOTI.name else ""))
    if not backend and (filename == PYTHON.model_file or (guess and PYTHON.model_file in look.contents)):
        backend = PYTHON.backend
    if backend == PYTHON.backend:
        return Served(backend, platform, filename or PYTHON.model_file)
    if not backend and not platform and not filename:
        if "." not in name:
            return Served("", "", "", f"Invalid model name: Could not determine backend for model '{name}' with no "
                                      "backend in model configuration. Expected model name of the form "
                                      "'model.<backend_name>'.",
                          hint=f"Set backend: \"<name>\" in config.pbtxt, or name the model '{name}.<backend>'.")
        custom = name.split(".", 1)[1]
        return Served(custom, "", f"model.{custom}")
    return Served(backend, platform, filename)


def _pytorch(look: _Look, platform: str, filename: str, guess: bool, rules: RepositoryRules) -> tuple[str, str]:
    """(backend, platform) when no backend is given: PyTorch's where the platform or file says so (the platforms
    and files the container's release knows), else none."""
    aoti = rules.torch_aoti_platform
    platforms = (LIBTORCH.name, *((LIBTORCH_ALIAS,) if rules.libtorch_platform_alias else ()),
                 *((AOTI.name,) if aoti else ()))
    if platform in platforms or filename in (LIBTORCH.model_file, *((AOTI.model_file,) if aoti else ())):
        return PYTORCH.backend, platform
    if guess and LIBTORCH.model_file in look.contents:  # a model.pt directory settles it too: nothing is chosen
        return (PYTORCH.backend, LIBTORCH.name) if look.has_file(LIBTORCH.model_file) else ("", "")
    if guess and aoti and look.has_file(AOTI.model_file):
        return PYTORCH.backend, AOTI.name
    return "", platform


def _validate(name: str, served: Served, unknown: set[str]) -> Served:
    """`unknown`: platform names the container's release does not know yet."""
    backend, platform = served.backend, served.platform
    types = {p: f for p, f in PLATFORM_TYPE.items() if p not in unknown}
    problem = ""
    if not backend and platform != "ensemble":
        problem = f"unexpected platform type '{platform}' for {name}"
        suggestion = did_you_mean(platform, [p for p in PLATFORMS if p not in unknown]) if platform else ""
        return Served(backend, platform, served.default_model_filename, problem, suggestion=suggestion)
    if backend and platform == "ensemble":
        problem = f"Ensemble model '{name}' must have platform type '{platform}' and empty backend type"
    elif (framework := BACKEND_TYPE.get(backend)) is not None and framework != types.get(platform):
        problem = f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}"
    return Served(backend, platform, served.default_model_filename, problem)
