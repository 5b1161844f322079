"""The settings of --probe (check and launch): which interpreter probes Torch and TensorFlow, and which
libonnxruntime.so ONNX Runtime op libraries are registered into."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from customops.errors import CustomopsError
from customops.frameworks import ONNXRUNTIME
from customops.probe.groups import ProbeSettings
from customops.triton.container import Container


def probe_settings(container: Container, python: str | None, onnxruntime: str | None,
                   cache_dir: Path | None) -> ProbeSettings:
    """Inside the container, ONNX Runtime op libraries are registered into the backend's own
    libonnxruntime.so (unless `onnxruntime` names one); Torch and TensorFlow need a Python with the framework
    (`python`, default: this interpreter). `cache_dir` None: probe results are not cached. The container's
    files (its target) are where TensorRT's own plugin library is found, to probe its built-in plugins."""
    runtime = onnxruntime
    if runtime is None and container.target is not None and container.target.is_live:
        found = sorted(Path(container.backend_dir, ONNXRUNTIME.backend).glob(f"{ONNXRUNTIME.c_api}.so*"))
        runtime = str(found[0]) if found else None
    if python and not os.access(python, os.X_OK):
        raise CustomopsError(f"--probe-python {python}: not an executable file")
    return ProbeSettings(os.path.abspath(python) if python else sys.executable, runtime, cache_dir=cache_dir,
                         target=container.target)
