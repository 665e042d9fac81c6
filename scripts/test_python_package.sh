#!/usr/bin/env bash
# `make test-python`: the Python package (docs/python.md) built against the pinned PyTorch 2.x and
# tested. 1. the venv (scripts/python_package_venv.sh; made once, then only checked); 2. `pip
# install --no-build-isolation .` into it (the C++ extension against that venv's torch; ccache,
# when installed, makes a rebuild of unchanged files a cache hit); 3. pytest tests/python_package
# (extra arguments go to pytest, e.g. `make test-python PYTEST_ARGS="-k softmax"`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(bash scripts/python_package_venv.sh)"
# ccache keyed on paths relative to the checkout, so another clone's build hits the same entries.
if command -v ccache > /dev/null; then
  export CC="ccache gcc" CXX="ccache g++" CCACHE_BASEDIR="$PWD"
fi
echo "test_python_package.sh: building attnkit into $(dirname "$(dirname "$PY")")" >&2
"$PY" -m pip install --quiet --no-build-isolation --no-deps --no-index .
# From the repository root, `import attnkit` finds the installed package (the sources are under
# python/, not on the path). One thread per test process, like the ctest suite.
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$PY" -m pytest tests/python_package -q "$@"
