"""Frameworks as data: a framework's facts are written once, in its descriptor (customops/frameworks.py), and every
loader and every other module takes them from there. Read from the source with ast: a framework's name, platform,
model file or library written as a string anywhere else fails here, unless the allow-list below says what else the
string is. A sentence (a string with whitespace: a message, a help text, prose a report shows) may name a
framework; docstrings and comments are prose too."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from customops import frameworks
from customops.frameworks import DESCRIPTORS, MANIFEST_ORDER, PROBE_ORDER, VERSIONED
from customops.triton.container import ContainerFacts
from customops.triton.loaders import LOADERS
from customops.triton.plan import LoadedBy

PACKAGE = Path(__file__).resolve().parent.parent / "customops"
LOADERS_DIR = PACKAGE / "triton" / "loaders"
NOT_A_FRAMEWORK = {"__init__.py", "backend.py", "host.py"}  # the registry, Triton core's part, the server's own

# Whole modules that name frameworks for another reason.
ALLOWED_MODULES = {
    "frameworks.py": "the descriptors themselves",
    # run by the probing interpreter, which imports no customops module: each is the framework-specific half of a
    # probe (it imports torch, tensorflow or onnxruntime, or loads TensorRT's stand-in), given its framework by name
    "probe/child_load.py": "the probe's loader script",
    "probe/child_tensorflow_ops.py": "the probe's TensorFlow op-listing script",
    "probe/child_tensorrt.py": "the probe's TensorRT plugin-listing script",
    "triton/python_modules.py": "CPython's own layout (lib/python3.X, its site directories): the interpreter the "
                                "Python backend's stub embeds, not the backend",
}
# Single strings that name a framework but are not its identifier, library or file.
ALLOWED_STRINGS = {
    ("commands/check.py", "--probe-python"): "a public option: the probing interpreter, not the Python backend",
    ("commands/launch.py", "--probe-python"): "the same option, on launch",
    ("commands/probe.py", "--python"): "a public option: the interpreter that loads the libraries",
    ("commands/check.py", "--probe-onnxruntime"): "a public option's name",
    ("commands/launch.py", "--probe-onnxruntime"): "the same option, on launch",
    ("commands/probe.py", "--onnxruntime-library"): "a public option's name",
    ("commands/probe.py", "--python-path"): "a public option: the probing interpreter's sys.path, not the backend",
    ("triton/container.py", "\0pytorch\0"): "the ONNX exporter's producer name in libtorch_cpu.so, before its version",
    ("probe/tensorrt_standin.py", "tensorrt-standin"): "customops' own cache directory of the stand-in's builds",
    ("probe/tensorrt_standin.py", "customops-tensorrt-"): "customops' own temporary directory's prefix",
}
ISSUE_TERMS = ("onnxruntime", "tensorflow", "pytorch", "libtorch", "tensorrt", "python", "libonnxruntime",
               "libtensorflow_framework", "libtorch_cpu", "libc10", "libnvinfer")  # #34's list, beside the derived


def framework_terms() -> set[str]:
    """Every name a descriptor holds that code could write instead of reading it: backend and probe names,
    platforms, model files, libraries, entry points, manifest tables."""
    terms = set(ISSUE_TERMS)
    for f in DESCRIPTORS:
        terms |= {f.backend, f.probe, f.model_file, f.version_stem, f.version_exact, f.c_api, f.c_api_needs,
                  f.own_plugins, f.backend_library, *f.platform_aliases, *f.entry_points}
        terms |= {name for p in f.platforms for name in (p.name, p.model_file)}
        terms |= {f.manifest.table, f.manifest.entry} if f.manifest else set()
    return {t for t in terms if t}


def _pattern(terms: set[str]) -> re.Pattern[str]:
    words = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    return re.compile(rf"(?<![\w])(?:{words})(?![\w])")


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def named_frameworks(source: str, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """(line, string) of each string constant (an f-string's literal parts each) that names a framework and is
    not prose: no docstring, no whitespace in it; or that is a descriptor's label or manifest entry, whole."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    whole = {f.label for f in DESCRIPTORS} | {f.manifest.entry for f in DESCRIPTORS if f.manifest}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in prose:
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if (not re.search(r"\s", text) and pattern.search(text)) or text.strip() in whole:
                found.append((node.lineno, text))
    return found


def test_framework_names_are_written_only_in_the_descriptors():
    pattern = _pattern(framework_terms())
    written = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in ALLOWED_MODULES:
            continue
        written += [f"{module}:{line}: {text!r}" for line, text in named_frameworks(path.read_text(), pattern)
                    if (module, text) not in ALLOWED_STRINGS]
    assert written == [], "take these from customops.frameworks (or add them to the allow-list, saying why)"


def test_the_allow_list_has_nothing_stale():
    pattern = _pattern(framework_terms())
    for (module, text), why in ALLOWED_STRINGS.items():
        assert (PACKAGE / module).is_file() and why
        assert text in [t for _, t in named_frameworks((PACKAGE / module).read_text(), pattern)], (module, text)
    assert all((PACKAGE / module).is_file() for module in ALLOWED_MODULES)


def test_the_scan_sees_a_framework_name_but_not_prose():
    source = ('"""A docstring: tensorrt."""\nA = "tensorrt"\nB = f"{A}/libnvinfer.so.10"\nC = b"model.onnx"\n'
              'D = "TensorRT refuses the onnxruntime op"\nE = "tensorrt_standin"\nF = "ONNX Runtime"\n'
              'G = "[pytorch] ops"\n')
    assert sorted(line for line, _ in named_frameworks(source, _pattern(framework_terms()))) == [2, 3, 4, 7, 8]


def test_every_loader_takes_its_framework_from_its_descriptor():
    """Each framework's loader module declares the descriptor it loads for (FRAMEWORK), and the registry serves
    that framework's backend with it, once."""
    modules = sorted(p.stem for p in LOADERS_DIR.glob("*.py") if p.name not in NOT_A_FRAMEWORK)
    declared = {}
    for name in modules:
        module = __import__(f"customops.triton.loaders.{name}", fromlist=["FRAMEWORK"])
        assert module.FRAMEWORK in DESCRIPTORS, name
        declared[name] = module.FRAMEWORK
    served = [loader.framework for loader in LOADERS if loader.framework is not None]
    assert sorted(served, key=lambda f: f.backend) == sorted(declared.values(), key=lambda f: f.backend)
    assert len(set(served)) == len(served)


def test_every_loaded_by_of_a_framework_is_its_descriptors_backend():
    """A step's LoadedBy names the framework whose loader made it: each framework member's text is read from its
    descriptor (no framework name is written in triton/plan.py), and every framework with a loader has one."""
    assert LoadedBy(frameworks.TENSORRT.backend) is LoadedBy.TENSORRT
    own = {"BACKEND", "HOST", "PYTHON"}  # Triton core's backend libraries, the manifest's [host] preload, and the
    # Python backend's stub importing a model's extension modules (the backend has no framework loader)
    assert LoadedBy(frameworks.PYTHON.backend) is LoadedBy.PYTHON
    assert {m.name: m.value for m in LoadedBy if m.name not in own} == {
        f.backend.upper(): f.backend for f in (loader.framework for loader in LOADERS) if f is not None}


def test_the_descriptors_name_each_thing_once():
    for field in ("backend", "label"):
        values = [getattr(f, field) for f in DESCRIPTORS]
        assert len(set(values)) == len(values), field
    probes = [f.probe for f in DESCRIPTORS if f.probe]
    platforms = [name for f in DESCRIPTORS for name in (*(p.name for p in f.platforms), *f.platform_aliases)]
    assert len(set(probes)) == len(probes) and len(set(platforms)) == len(platforms)


def test_every_public_order_lists_every_framework_it_concerns():
    """A new descriptor goes into the orders that concern it (a public order is kept as it was)."""
    assert sorted(PROBE_ORDER, key=DESCRIPTORS.index) == [f for f in DESCRIPTORS if f.probe]
    assert len(set(PROBE_ORDER)) == len(PROBE_ORDER)
    assert sorted(MANIFEST_ORDER, key=DESCRIPTORS.index) == [f for f in DESCRIPTORS if f.manifest]
    assert len(set(MANIFEST_ORDER)) == len(MANIFEST_ORDER)


def test_the_container_facts_have_a_version_of_each_versioned_framework_in_its_order():
    """A profile writes the facts in their fields' order: the framework versions in the descriptors' order."""
    names = [f.name for f in dataclasses.fields(ContainerFacts)]
    versions = [n for n in names if frameworks.named(n) is not None]
    assert versions == [f.backend for f in VERSIONED]
    assert all(ContainerFacts(**{f.backend: "1.2"}).version_of(f.backend) == "1.2" for f in VERSIONED)
    assert ContainerFacts(cuda="12").version_of("cuda") is None
