#!/usr/bin/env bash
# Checks that the Debian packages tokpos builds against are installed.
# As root it installs the missing ones with apt-get; otherwise it names them and fails.
# Usage: tools/ensure-deps.sh [extra-package ...]
set -euo pipefail

# Why each one is here (docs/dependencies.md says the same):
#   cmake, make, g++, pkg-config : the build itself (pkg-config for the installed-package test)
#   libgtest-dev                 : the C++ test suite (GoogleTest, run through ctest)
#   libbenchmark-dev             : `make bench` microbenchmarks (Google Benchmark)
#   libcli11-dev                 : command-line parsing for the `tokpos` tool
#   nlohmann-json3-dev           : `tokpos demo --json` output and safetensors headers
#   libdlpack-dev                : <dlpack/dlpack.h>, the tensor description the ops take (DLTensor)
#   libcairo2-dev, fonts-dejavu-core : `tokpos plot` pictures (PNG and SVG, real text rendering)
#   fonts-noto-cjk               : `tokpos plot`'s Chinese text (Noto Sans CJK SC; DejaVu has no CJK glyphs)
#   libcpp-httplib-dev           : `tokpos serve`, the local HTTP server (cpp-httplib, with a pkg-config file)
#   ccache                       : every build compiles through it, so sources already compiled
#                                  with the same flags (the wheel's build, a rebuild) are not compiled again
# and, passed as extras by the Makefile:
#   python3-dev, python3-venv    : `make python`, the package built into build/venv against Python's headers
#   libopenmpi-dev, openmpi-bin  : `make test`, the vocab-parallel MPI example (examples/mpi_vocab_parallel.c)
#                                  and its tests
required=(cmake make g++ pkg-config libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libdlpack-dev libcairo2-dev fonts-dejavu-core fonts-noto-cjk libcpp-httplib-dev ccache "$@")

missing=()
for pkg in "${required[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tokpos: installing missing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
    apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
  exit 0
fi

echo "tokpos: missing Debian packages: ${missing[*]}" >&2
echo "tokpos: install them with: sudo apt-get install ${missing[*]}" >&2
exit 1
