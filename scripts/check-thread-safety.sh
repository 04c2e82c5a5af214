#!/usr/bin/env bash
# Builds the library and the backend plugins with clang's thread-safety analysis as errors, in
# build/thread-safety: a read or write of a DLOCK_GUARDED_BY member without its mutex held, or a call
# of a DLOCK_REQUIRES function without it, fails the build (dlock/plugin_kit/thread_safety.hpp).
# GCC ignores the annotations; this build is what checks them. Tests (and with them the lab) and
# benchmarks are left out (they hold no annotated state); so is a backend whose client library is
# not installed (its DLOCK_WITH_<BACKEND> turned off), named on the way. The project's warning flags are
# -Wall -Wextra only, which clang takes as GCC does.
#   scripts/check-thread-safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."

excluded=()
[ -e /usr/include/zookeeper/zookeeper.h ] || excluded+=(zookeeper)
pkg-config --exists grpc++ protobuf 2>/dev/null || excluded+=(etcd)
{ pkg-config --exists libpqxx && pkg-config --exists libmariadb; } 2>/dev/null || excluded+=(sql)
without=()
for b in "${excluded[@]}"; do without+=("-DDLOCK_WITH_${b^^}=OFF"); done
[ ${#excluded[@]} -eq 0 ] || echo "check-thread-safety: without ${excluded[*]} (client library not installed)"

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
CC=clang-14 CXX=clang++-14 cmake -S . -B build/thread-safety -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Werror=thread-safety" \
  -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCHMARKS=OFF -DDLOCK_BUILD_CLI=OFF \
  "${without[@]}" >/dev/null
cmake --build build/thread-safety -j"$(nproc)"
echo "check-thread-safety: no unguarded access"
