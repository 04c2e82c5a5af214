#!/usr/bin/env bash
# Configures and builds dlock into build/<variant> with ccache. Used by the other scripts.
#   scripts/build.sh release            RelWithDebInfo, tests and benchmarks
#   scripts/build.sh asan               AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/build.sh tsan               ThreadSanitizer (the core: no lab, no server-backend plugins
#                                       but redis/redlock, whose unit tests are in the core's set)
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-release}
case "$variant" in
  release) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) extra=(-DCMAKE_BUILD_TYPE=Debug "-DDLOCK_SANITIZE=address,undefined" -DDLOCK_BUILD_BENCHMARKS=OFF
               "-DCMAKE_CXX_FLAGS=-fno-sanitize-recover=all" "-DCMAKE_C_FLAGS=-fno-sanitize-recover=all") ;;
  # TSan covers the core: without the lab no server backend's tests run, so their plugins are not built.
  tsan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_SANITIZE=thread -DDLOCK_BUILD_BENCHMARKS=OFF -DDLOCK_BUILD_LAB=OFF
               "-DDLOCK_EXCLUDE_BACKENDS=zookeeper;etcd;sql") ;;
  *) echo "usage: $0 release|asan|tsan" >&2; exit 2 ;;
esac
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths are hashed relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
cmake -S . -B "build/$variant" -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "${extra[@]}" >/dev/null
cmake --build "build/$variant" -j"$(nproc)"
