#!/usr/bin/env bash
# Installs tokpos into a scratch prefix, then builds and runs two consumers:
# one through find_package(tokpos) (CMake), one through pkg-config (plain C).
# Usage: install_consumer.sh BUILD_DIR CONSUMER_SRC_DIR
set -euo pipefail
build=$1
src=$2
cmake=${CMAKE:-cmake}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$cmake" --install "$build" --prefix "$work/prefix" >/dev/null
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/build" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/build/consumer"

pc=$(find "$work/prefix" -name tokpos.pc | head -n 1)
export PKG_CONFIG_PATH=$(dirname "$pc")
cc "$src/consumer.c" -o "$work/consumer_c" $(pkg-config --cflags --libs tokpos)
LD_LIBRARY_PATH="$(pkg-config --variable=libdir tokpos)" "$work/consumer_c"
echo "install_consumer: find_package and pkg-config consumers built and ran"
