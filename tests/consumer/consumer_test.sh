#!/bin/sh
# Installs the dlock build tree into a scratch prefix, then builds and runs outside consumers:
# one with find_package(dlock) (C++ and C targets), one with pkg-config.
# usage: consumer_test.sh DLOCK_BUILD_DIR CONSUMER_SOURCE_DIR
set -eu
build=$1
source=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlock-consumer-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/lib/cmake/dlock/dlockConfig.cmake"
test -f "$prefix/include/dlock/dlock.hpp"

cmake -S "$source" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/consumer_cpp" "$scratch/locks"
"$scratch/build/consumer_c" "$scratch/locks"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists dlock
cc -std=c99 "$source/consumer.c" $(pkg-config --cflags --libs dlock) -o "$scratch/consumer_pc"
LD_LIBRARY_PATH="$prefix/lib" "$scratch/consumer_pc" "$scratch/locks"
echo "consumer_test: find_package and pkg-config consumers built and ran against $prefix"
