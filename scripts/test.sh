#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian machine with Python >= 3.10, gcc and g++.
# Installs what the tests need into .venv (customops, pytest, and the real frameworks the tests load:
# torch 2.13.0 CPU, tensorflow-cpu, onnxruntime), plus, when run as root with apt, the 32-bit and
# foreign-architecture toolchains the ELF reader is tested with. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  gcc -m32 -xc -o /dev/null - <<<'int main(void){return 0;}' 2>/dev/null || missing+=(gcc-multilib)
  command -v s390x-linux-gnu-as >/dev/null || missing+=(binutils-s390x-linux-gnu)
  command -v aarch64-linux-gnu-as >/dev/null || missing+=(binutils-aarch64-linux-gnu)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing toolchains: ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null \
      || echo "warning: could not install ${missing[*]}; tests that need them will be skipped"
  fi
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip_quiet() { .venv/bin/python -m pip install -q "$@" > .venv/pip.log 2>&1 || { cat .venv/pip.log; exit 1; }; }
pip_quiet --upgrade pip
# the framework versions the tests expect (the extras are ranges for users); setuptools>=77 builds the sdist
# and wheel in tests/test_sdist.py and test_wheel_install.py without the package index
pip_quiet -e ".[test,torch,tensorflow,onnxruntime]" "torch==2.13.0" "tensorflow-cpu==2.21.0" "setuptools>=77"
# published TensorFlow op libraries; --no-deps because it requires `tensorflow`, not tensorflow-cpu
pip_quiet --no-deps "tensorflow-text==2.21.1"
# a published ONNX Runtime custom-op library
pip_quiet onnxruntime-extensions
.venv/bin/python -m pytest -n 2 "$@"
