#!/usr/bin/env bash
# Install customops into .venv and run it on the bundled example (libraries built from fixture sources).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
tree=$(.venv/bin/python -m fixtures.build)
echo "== customops scan: one TensorRT plugin library and the libnvinfer it links against"
.venv/bin/customops scan "$tree/ops/libtrt_plugin.so" "$tree/fw/trt8/libnvinfer.so.8"
echo
echo "== customops resolve: preload an interposer, then dlopen a library whose indirect dependency is missing"
.venv/bin/customops resolve --preload "$tree/a/libpre.so" --dlopen "$tree/a/libfoo.so" \
  --dlopen "$tree/g/i/libtop_runpath.so" || echo "(exit status $?: a load will fail, as predicted)"
