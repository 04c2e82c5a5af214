#!/bin/sh
# Builds tests/consumer/subproject, a project that includes dlock with add_subdirectory(), and runs
# its consumers with the built-in `file` backend. The first configure gives no build type, and
# dlock must not choose one for the including project; the second gives the build type under test.
# dlock's part is built next to BUILD_DIR (BUILD_DIR-subproject: same depth, so ccache with
# CCACHE_BASEDIR reuses BUILD_DIR's objects), the consumer in BUILD_DIR-subproject-consumer; both
# are kept, so a rerun only rebuilds what changed.
# usage: subproject_test.sh BUILD_DIR DLOCK_SOURCE_DIR
# Environment: CMAKE_BUILD_TYPE, CMAKE_C_COMPILER_LAUNCHER, CMAKE_CXX_COMPILER_LAUNCHER,
# CMAKE_C_COMPILER and CMAKE_CXX_COMPILER (the build under test's settings).
set -eu
build=$(cd "$1" && pwd)
dlock_source=$(cd "$2" && pwd)
fail() { echo "subproject_test: FAILED: $*" >&2; exit 1; }
consumer_build=$build-subproject-consumer
# CMake (3.22 and later) takes the CMAKE_BUILD_TYPE environment variable as the default build
# type: the first configure runs without it.
build_type_under_test=${CMAKE_BUILD_TYPE:-RelWithDebInfo}
unset CMAKE_BUILD_TYPE
export CCACHE_BASEDIR="$dlock_source" CCACHE_NOHASHDIR=true CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
rm -f "$consumer_build/CMakeCache.txt"
cmake -S "$dlock_source/tests/consumer/subproject" -B "$consumer_build" -DDLOCK_SOURCE_DIR="$dlock_source" \
  -DDLOCK_BINARY_DIR="$build-subproject" \
  -DCMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-}" -DCMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-}" \
  ${CMAKE_C_COMPILER:+-DCMAKE_C_COMPILER="$CMAKE_C_COMPILER"} ${CMAKE_CXX_COMPILER:+-DCMAKE_CXX_COMPILER="$CMAKE_CXX_COMPILER"} \
  >"$consumer_build.log" 2>&1 || { tail -30 "$consumer_build.log"; fail "the configure failed"; }
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$consumer_build/CMakeCache.txt")
[ -z "$build_type" ] || fail "dlock set the including project's CMAKE_BUILD_TYPE to $build_type"
tests=$(sed -n 's/^DLOCK_BUILD_TESTS:[A-Z]*=//p' "$consumer_build/CMakeCache.txt")
[ "$tests" = OFF ] || fail "dlock's tests are built by default as a subproject (DLOCK_BUILD_TESTS=$tests)"

cmake "$consumer_build" -DCMAKE_BUILD_TYPE="$build_type_under_test" >"$consumer_build.log" 2>&1 ||
  { tail -30 "$consumer_build.log"; fail "the second configure failed"; }
cmake --build "$consumer_build" --target consumer_cpp consumer_c -j2 >"$consumer_build.log" 2>&1 ||
  { tail -30 "$consumer_build.log"; fail "the build failed"; }
locks=$(mktemp -d "${TMPDIR:-/tmp}/dlock-subproject-XXXXXX")
trap 'rm -rf "$locks"' EXIT
"$consumer_build/consumer_cpp" "$locks" || fail "consumer_cpp took no lock"
"$consumer_build/consumer_c" "$locks" || fail "consumer_c took no lock"
echo "subproject_test: a project including dlock with add_subdirectory() built and took locks"
