#!/usr/bin/env bash
# Configures and builds dlock into build/<variant> with ccache. Used by the other scripts.
#   scripts/build.sh release            RelWithDebInfo, tests and benchmarks
#   scripts/build.sh asan               AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/build.sh tsan               ThreadSanitizer (the core: no lab, no server-backend plugins
#                                       but redis/redlock, whose unit tests are in the core's set)
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-release}
# The flags of each variant are CMakePresets.json's configure preset of that name (binary dir
# build/<variant>, ccache as the compiler launcher).
case "$variant" in
  release|asan|tsan) ;;
  *) echo "usage: $0 release|asan|tsan" >&2; exit 2 ;;
esac
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths are hashed relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
cmake --preset "$variant" >/dev/null
cmake --build --preset "$variant" -j"$(nproc)"
