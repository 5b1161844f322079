"""The frameworks customops models, as data: one descriptor each. What Triton calls its backend (and the backend's
directory), the platform names and model files of Triton's config schema that select it, the libraries that tell
its version, the C-API library a probe can load it with, the entry points it calls in an op library, how libraries
reach it (LD_PRELOAD from a manifest entry, a model's model_operations, a --backend-config setting) and the label
reports give it.

The rest of customops takes a framework's facts from here (tests/test_frameworks.py fails on a framework's name or
library written anywhere else): a new framework is one descriptor here plus its loader in
customops/triton/loaders/. The facts are data, as auditwheel keeps its policies in one file; what a framework does
with them (how Triton core auto-completes a model, how a probe loads a library) is code, in the module that models it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """A platform name of Triton's config schema (model_config.proto) and the model file it defaults to."""

    name: str
    model_file: str = ""


@dataclass(frozen=True)
class ManifestEntry:
    """The customops.toml entry `[table] key` listing the libraries customops has the server load for a framework.
    `why`: what LD_PRELOADing them, with the framework's backend directory on LD_LIBRARY_PATH so that their
    framework dependencies resolve, is for, in a search trace ("" where the directory is not put there)."""

    table: str
    key: str
    why: str = ""

    @property
    def entry(self) -> str:
        return f"[{self.table}] {self.key}"


@dataclass(frozen=True)
class Framework:
    """A Triton backend customops knows (a framework's, the Python backend, OpenVINO's only as auto-complete
    chooses it): its facts, read by every module that needs one."""

    backend: str  # Triton's backend name: a config's `backend`, its directory under the backend directory
    label: str  # how reports name it
    platforms: tuple[Platform, ...] = ()  # the platforms whose models it serves, typed so by the core
    platform_aliases: tuple[str, ...] = ()  # other platform names the core accepts for it, untyped
    model_file: str = ""  # the model file when the platform names none
    completes_io: bool = True  # its backend completes a model's inputs and outputs from the model file
    version_stem: str = ""  # the library whose file names carry its version (libonnxruntime.so.1.20.1)
    version_anywhere: bool = False  # that library is looked for in the system's directories and every backend's
    version_exact: str = ""  # the library in its backend directory whose bytes tell its exact version
    probe: str = ""  # the name `--probe` loads it by (its Python package); "" where it is not probed
    probe_per_model: bool = False  # its op libraries meet in one registry per model (a session), not per process
    c_api: str = ""  # its C-API library's stem: what a probe loads it with (the container's, beside the backend)
    c_api_needs: str = ""  # the framework library the C-API library needs beside it
    own_plugins: str = ""  # the stem of its own plugin library, initialized after the plugin libraries
    entry_points: tuple[str, ...] = ()  # what it dlsym()s in each op library it loads (a missing one fails)
    model_operations: bool = False  # it loads the op libraries of a model's model_operations
    manifest: ManifestEntry | None = None  # the manifest entry listing libraries for it
    plugins: str = ""  # its --backend-config setting listing libraries its backend dlopen()s

    @property
    def backend_library(self) -> str:
        """Triton core's default name of its backend library."""
        return f"libtriton_{self.backend}.so"

    def file_for(self, platform: str) -> str:
        """The model file a model of `platform` reads when its config names none (the framework's default
        for a platform of another framework or none)."""
        return next((p.model_file for p in self.platforms if p.name == platform and p.model_file), self.model_file)


TENSORRT = Framework(
    "tensorrt", "TensorRT",
    platforms=(Platform("tensorrt_plan", "model.plan"),), model_file="model.plan",
    version_stem="libnvinfer", version_anywhere=True,
    probe="tensorrt", c_api="libnvinfer", own_plugins="libnvinfer_plugin",  # the probe stands in for libnvinfer
    manifest=ManifestEntry("tensorrt", "plugins"), plugins="plugins")
ONNXRUNTIME = Framework(
    "onnxruntime", "ONNX Runtime",
    platforms=(Platform("onnxruntime_onnx", "model.onnx"),), model_file="model.onnx",
    version_stem="libonnxruntime",
    probe="onnxruntime", probe_per_model=True, c_api="libonnxruntime",
    entry_points=("RegisterCustomOps",), model_operations=True)
TENSORFLOW = Framework(
    "tensorflow", "TensorFlow",
    platforms=(Platform("tensorflow_graphdef", "model.graphdef"),
               Platform("tensorflow_savedmodel", "model.savedmodel")), model_file="model.savedmodel",
    version_stem="libtensorflow_framework", version_exact="libtensorflow_cc.so.2",
    probe="tensorflow", c_api="libtensorflow_cc", c_api_needs="libtensorflow_framework.so.2",
    model_operations=True, manifest=ManifestEntry("tensorflow", "preload", "the TensorFlow preloads"))
PYTORCH = Framework(  # the AOTInductor platform is served by this backend too (BACKEND_TYPE_TORCHAOTI)
    "pytorch", "PyTorch",
    platforms=(Platform("pytorch_libtorch", "model.pt"), Platform("torch_aoti", "model.pt2")),
    platform_aliases=("libtorch",), model_file="model.pt",
    version_exact="libtorch_cpu.so",
    probe="torch", c_api="libtorch_cpu", c_api_needs="libc10.so",
    manifest=ManifestEntry("pytorch", "ops", "the PyTorch op libraries"))
PYTHON = Framework("python", "Python", model_file="model.py")  # its libtriton_python.so runs each model in a stub
OPENVINO = Framework("openvino", "OpenVINO", model_file="model.xml")

DESCRIPTORS = (TENSORRT, ONNXRUNTIME, TENSORFLOW, PYTORCH, PYTHON, OPENVINO)  # the order of the version facts
# Orders that are public (what a command lists, the order probes run and report in): every descriptor they concern
# is in them (tests/test_frameworks.py); a new framework goes at their end.
PROBE_ORDER = (PYTORCH, TENSORFLOW, ONNXRUNTIME, TENSORRT)  # `customops probe --framework`, check --probe's groups
MANIFEST_ORDER = (TENSORRT, PYTORCH, TENSORFLOW)  # customops.toml's tables
VERSIONED = tuple(f for f in DESCRIPTORS if f.version_stem or f.version_exact)  # ContainerFacts has a field each


def named(backend: str) -> Framework | None:
    """The framework whose Triton backend is `backend`, if customops models one."""
    return next((f for f in DESCRIPTORS if f.backend == backend), None)


def probed_as(name: str) -> Framework | None:
    """The framework `--probe` loads by `name` (its Python package)."""
    return next((f for f in DESCRIPTORS if f.probe and f.probe == name), None)
