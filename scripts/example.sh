#!/usr/bin/env bash
# Install customops into .venv and check the bundled example repository against a small Triton container
# root (examples/model_repository's libraries and the container are built from fixtures/ sources with gcc
# and g++). Needs python3 (>= 3.10) with venv, gcc and g++, and pip access to customops' dependencies on
# the first run; a re-run reuses .venv and the built libraries. Exit status 0 when the check ran (its own
# status, 1 for this example, is printed last); non-zero when the set-up failed.
set -euo pipefail
cd "$(dirname "$0")/.."
# the interpreter that makes .venv (as scripts/test.sh chooses it): $PYTHON, else /usr/bin/python3, else python3
if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x /usr/bin/python3 ]; then python=/usr/bin/python3
else python=python3
fi
say() { echo "example.sh: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $python"
  "$python" -m venv .venv
fi

# the container root and the example's libraries (compiled only when their sources changed)
container=$(.venv/bin/python -m fixtures.example)

# pip only when .venv does not hold customops installed (editable) from this checkout with this pyproject.toml
stamp=.venv/customops-example.stamp
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $PWD"
installed=$(.venv/bin/python -I -c 'import importlib.util as u; s = u.find_spec("customops"); print(s.origin if s else "")' \
  2>/dev/null || true)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ "$installed" != "$PWD/customops/__init__.py" ] \
   || [ ! -x .venv/bin/customops ]; then
  say "installing customops and its dependencies into .venv with pip (the first time about a minute; log: .venv/pip.log)"
  pip_quiet() { .venv/bin/python -m pip install -q "$@" > .venv/pip.log 2>&1 || { cat .venv/pip.log >&2; exit 1; }; }
  pip_quiet --upgrade pip
  pip_quiet -e .
  echo "$want" > "$stamp"
  say "installed; checking the example"
fi

status=0
.venv/bin/customops check examples/model_repository --container-root "$container" || status=$?
echo
echo "customops check exited with status $status (1: findings at or above --fail-on, as this example intends)"
