#!/usr/bin/env bash
# Builds the tokpos Python package into a virtual environment under the build
# directory, the way `pip install .` does, and leaves it ready for pytest.
# Usage: tools/python-env.sh BUILD_DIR
#   BUILD_DIR/venv          the environment (it sees the system's site-packages,
#                           so a torch installed there is used, never re-downloaded)
#   BUILD_DIR-wheel         scikit-build-core's build tree, kept so rebuilds are incremental;
#                           a sibling of BUILD_DIR, with the same generator and flags (warnings
#                           are errors, as in every make build), so that ccache serves the
#                           library's sources compiled for BUILD_DIR (CMakeLists.txt, TOKPOS_CCACHE)
# From PyPI when missing: scikit-build-core and nanobind (the build), numpy (the
# package), pytest (the suite). torch and the rest of what `make test` needs:
# tools/test-env.sh.
set -euo pipefail
build=${1:?usage: tools/python-env.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}

if ! command -v "$py" >/dev/null 2>&1; then
  echo "tokpos: the Python package needs python3 (3.10 or newer); install it (Debian: python3 python3-venv python3-dev)" >&2
  exit 1
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "tokpos: the Python package needs Python 3.10 or newer; $py is $("$py" -V 2>&1)" >&2
  exit 1
fi
venv=$build/venv
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$build"
  if ! "$py" -m venv --system-site-packages "$venv"; then
    rm -rf "$venv"
    echo "tokpos: '$py -m venv' failed; install the venv module (Debian: python3-venv)" >&2
    exit 1
  fi
fi
need=()
"$venv/bin/python" -c 'import scikit_build_core' 2>/dev/null || need+=(scikit-build-core)
"$venv/bin/python" -c 'import nanobind' 2>/dev/null || need+=(nanobind)
"$venv/bin/python" -c 'import numpy' 2>/dev/null || need+=(numpy)
"$venv/bin/python" -c 'import pytest' 2>/dev/null || need+=(pytest)
if [ ${#need[@]} -gt 0 ]; then
  echo "tokpos: installing into $venv with pip: ${need[*]}" >&2
  "$venv/bin/python" -m pip install -q "${need[@]}"
fi
echo "tokpos: building the Python package into $venv (pip install .)" >&2
# The compilers BUILD_DIR was configured with (the same path too: ccache keys
# on it), so the wheel's objects are the cache's copies of BUILD_DIR's.
compilers=()
for lang in C CXX; do
  c=$(sed -n "s/^CMAKE_${lang}_COMPILER:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null || true)
  [ -n "$c" ] && compilers+=(-C "cmake.define.CMAKE_${lang}_COMPILER=$c")
done
CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -C build-dir="$build-wheel" -C cmake.define.TOKPOS_WERROR=ON "${compilers[@]}" "$root"
