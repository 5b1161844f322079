#!/usr/bin/env bash
# Install customops into .venv and check the bundled example repository against a small Triton container
# root (examples/model_repository's libraries and the container are built from fixtures/ sources).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip_quiet() { .venv/bin/python -m pip install -q "$@" > .venv/pip.log 2>&1 || { cat .venv/pip.log; exit 1; }; }
pip_quiet --upgrade pip
pip_quiet -e .
container=$(.venv/bin/python -m fixtures.example)
status=0
.venv/bin/customops check examples/model_repository --container-root "$container" || status=$?
echo
echo "customops check exited with status $status (1: findings at or above --fail-on, as this example intends)"
