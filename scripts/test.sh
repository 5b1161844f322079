#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian machine with Python >= 3.10, gcc and g++.
# Installs what the tests need into .venv (customops, pytest, and the real frameworks the tests load:
# torch 2.13.0 CPU, tensorflow-cpu, onnxruntime), plus, when run as root with apt, the 32-bit and
# foreign-architecture toolchains the ELF reader is tested with, the interpreter's shared libpython, and
# protoc with Debian's libprotobuf.
# The interpreter: $PYTHON, else the system's /usr/bin/python3 where it exists (Debian's), else python3 on
# PATH; .venv is made again when it was made by another interpreter (another version or installation).
# Extra arguments go to pytest. `--fast` first: the edit loop, about a minute: only the tests marked neither
# `oracle` (confirmed by a real runtime: ld.so in a chroot, the frameworks, the Triton core, published wheels)
# nor `slow` (builds, installs, fresh clones), and no pip run when .venv already holds this pyproject.toml's set.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=()
if [ "${1:-}" = --fast ]; then shift; fast=(-m "not oracle and not slow"); fi

if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x /usr/bin/python3 ]; then python=/usr/bin/python3
else python=python3
fi
# "3.11.2 /usr": the version and the installation (sys.base_prefix), the same inside a venv as in its interpreter
identity='import platform, sys; print(platform.python_version(), sys.base_prefix)'
want=$("$python" -c "$identity")

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  gcc -m32 -xc -o /dev/null - <<<'int main(void){return 0;}' 2>/dev/null || missing+=(gcc-multilib)
  command -v s390x-linux-gnu-as >/dev/null || missing+=(binutils-s390x-linux-gnu)
  command -v aarch64-linux-gnu-as >/dev/null || missing+=(binutils-aarch64-linux-gnu)
  # protoc's generated code and Debian's libprotobuf (tests/test_protobuf_pools.py; skipped without them)
  command -v protoc >/dev/null || missing+=(protobuf-compiler)
  [ -e "$(g++ -print-file-name=libprotobuf.so)" ] || missing+=(libprotobuf-dev)
  # umoci: the oracle for how an image's layers apply (tests/test_image.py; skipped without it)
  command -v umoci >/dev/null || missing+=(umoci)
  # zstd: compresses the zstd layers and archives the image tests read (another implementation than customops')
  command -v zstd >/dev/null || missing+=(zstd)
  # the interpreter's shared library (tests preload it into a server), which Debian ships as libpython3.X
  libpython=$("$python" -c 'import sysconfig as s, os
d, n = s.get_config_var("LIBDIR"), s.get_config_var("INSTSONAME") or ""
print("" if ".so" not in n or os.path.exists(os.path.join(d, n)) else "libpython" + s.get_python_version())')
  if [ -n "$libpython" ] && dpkg -S "$(readlink -f "$(command -v "$python")")" >/dev/null 2>&1; then
    missing+=("$libpython")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing with apt-get: ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null \
      || echo "warning: could not install ${missing[*]}; tests that need them will be skipped"
  fi
fi

if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c "$identity" 2>/dev/null)" != "$want" ]; then
  echo "recreating .venv: it was made by Python $(.venv/bin/python -c "$identity" 2>/dev/null || echo '(broken)'), not by $python ($want)"
  rm -rf .venv
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/customops-test.stamp
installed="$(sha256sum pyproject.toml scripts/test.sh | sha256sum | cut -d' ' -f1) $PWD"
if [ ${#fast[@]} -gt 0 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$installed" ]; then
  exec .venv/bin/python -m pytest -n 2 "${fast[@]}" "$@"
fi
pip_quiet() { .venv/bin/python -m pip install -q "$@" > .venv/pip.log 2>&1 || { cat .venv/pip.log; exit 1; }; }
pip_quiet --upgrade pip
# the framework versions the tests expect (the extras are ranges for users); setuptools>=77 builds the sdist
# and wheel in tests/test_sdist.py and test_wheel_install.py without the package index
pip_quiet -e ".[test,torch,tensorflow,onnxruntime]" "torch==2.13.0" "tensorflow-cpu==2.21.0" "setuptools>=77"
# published TensorFlow op libraries; --no-deps because it requires `tensorflow`, not tensorflow-cpu
pip_quiet --no-deps "tensorflow-text==2.21.1"
# a published ONNX Runtime custom-op library (the version the tests' expectations were read from)
pip_quiet "onnxruntime-extensions==0.15.2"
echo "$installed" > "$stamp"
.venv/bin/python -m pytest -n 2 ${fast[@]+"${fast[@]}"} "$@"
