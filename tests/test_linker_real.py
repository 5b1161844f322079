"""Real framework libraries: the model's prediction for loading them the way the framework's Python
package does, compared with what happens when the real package loads them in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from oracle import assert_same_as_per_symbol, compare_bindings, run_with_ld_debug

from customops.linker.types import Dlopen, Scenario

pytestmark = pytest.mark.frameworks
PYTHON = os.path.realpath(sys.executable)
ENV = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def tf_text_op_library() -> Path:
    return package_dir("tensorflow_text") / "python" / "ops" / "_ngrams_op.so"


def import_torch_scenario() -> Scenario:
    """torch/__init__.py: ctypes.CDLL(libtorch_global_deps.so, RTLD_GLOBAL), then torch._C (RTLD_NOW|RTLD_LOCAL)."""
    torch = package_dir("torch")
    (c_ext,) = torch.glob("_C.cpython-*.so")
    return Scenario(PYTHON, steps=(Dlopen(str(torch / "lib" / "libtorch_global_deps.so"), make_global=True),
                                   Dlopen(str(c_ext))))


def test_import_torch_loads_with_no_undefined_symbols_and_the_same_bindings(linker):
    torch = str(package_dir("torch"))
    prediction = linker.run(import_torch_scenario())
    assert prediction.ok, [o.message for o in prediction.outcomes if not o.ok]
    assert not [b for o in prediction.outcomes for b in (*o.unresolved, *o.lazy_failures)]
    real = run_with_ld_debug([PYTHON, "-c", "import torch"], ENV)
    assert real.returncode == 0, real.stderr
    assert compare_bindings(prediction, real, only=lambda referrer: referrer.startswith(torch)) > 1000
    assert_same_as_per_symbol(linker, import_torch_scenario(), prediction)


def test_tf_load_op_library_of_a_published_op_library_loads_and_binds_as_predicted(linker):
    tf = package_dir("tensorflow")
    op = tf_text_op_library()
    scenario = Scenario(PYTHON, steps=(
        # tensorflow/python/pywrap_tensorflow.py sets RTLD_GLOBAL while importing _pywrap_tensorflow_internal
        Dlopen(str(tf / "python" / "_pywrap_tensorflow_internal.so"), make_global=True),
        Dlopen(str(op)),  # tf.load_op_library: dlopen(RTLD_NOW | RTLD_LOCAL)
    ))
    prediction = linker.run(scenario)
    assert prediction.ok, [o.message for o in prediction.outcomes if not o.ok]
    assert not prediction.outcomes[-1].unresolved and not prediction.outcomes[-1].lazy_failures
    real = run_with_ld_debug([PYTHON, "-c", f"import tensorflow as tf; tf.load_op_library({str(op)!r})"], ENV)
    assert real.returncode == 0, real.stderr[-2000:]
    compared = compare_bindings(prediction, real, only=lambda referrer: referrer == str(op), by_file=True)
    assert compared > 1000
    framework = "libtensorflow_framework.so.2"
    to_framework = sum(1 for b in prediction.bindings()
                       if b.referrer == str(op) and b.winner and b.winner.object.endswith(framework))
    assert to_framework > 5000  # the framework's copies of its compiled-in protobuf classes win
    assert_same_as_per_symbol(linker, scenario, prediction)


def test_an_op_library_outside_its_framework_fails_exactly_as_predicted(linker):
    op = tf_text_op_library()
    prediction = linker.run(Scenario(PYTHON, steps=(Dlopen(str(op)),)))
    predicted = prediction.outcomes[-1]
    assert predicted.status == "failed"
    real = subprocess.run([PYTHON, "-c", f"import ctypes; ctypes.CDLL({str(op)!r})"], capture_output=True, text=True,
                          env={**os.environ, **ENV})
    assert real.returncode != 0
    assert real.stderr.strip().splitlines()[-1] == f"OSError: {predicted.message}"
    assert predicted.message == \
        "libtensorflow_framework.so.2: cannot open shared object file: No such file or directory"
