#!/bin/sh
# Installs dlock and builds and runs outside consumers against the installed tree: one with
# find_package(dlock) (C++ and C targets), one with pkg-config; each takes a lock with the built-in
# `file` backend and, when the lab is given, with the installed `redis` plugin on a real Redis; and
# an out-of-tree backend plugin (tests/consumer/plugin, the example of docs/abi.md) built against
# the installed plugin kit only, with find_package and with pkg-config, which the installed libdlock
# loads through `plugin_path` and takes a lock with.
# Two installed layouts:
#   1. the build tree under test, installed into a scratch prefix (libdir `lib`);
#   2. Debian's: a second configure of the same sources with CMAKE_INSTALL_PREFIX=/usr (libdir
#      lib/<multiarch>), installed with DESTDIR, as a package build does. Its build directory is a
#      sibling of the first (same depth, so ccache with CCACHE_BASEDIR reuses the first's objects) and
#      is kept, so a rerun only rebuilds what changed.
# Both installed trees are used from where they were put (not from /usr), which the package files
# must allow: they find their prefix from their own place.
# usage: consumer_test.sh BUILD_DIR CONSUMER_SOURCE_DIR DLOCK_SOURCE_DIR [DLOCK_LAB_TOOL]
# Environment: CMAKE_BUILD_TYPE, CMAKE_C_COMPILER_LAUNCHER, CMAKE_CXX_COMPILER_LAUNCHER,
# CMAKE_C_COMPILER and CMAKE_CXX_COMPILER for the second configure (the first build's settings).
set -eu
build=$(cd "$1" && pwd)
source=$2
dlock_source=$(cd "$3" && pwd)
lab=${4:-}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlock-consumer-XXXXXX")
lab_state=$scratch/lab
cleanup() {
  if [ -n "$lab" ] && [ -d "$lab_state" ]; then "$lab" --state-dir "$lab_state" down >/dev/null 2>&1 || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "consumer_test: FAILED: $*" >&2; exit 1; }
unset DLOCK_PLUGIN_PATH DLOCK_CONFIG
plugin_source=$dlock_source/tests/consumer/plugin

# docs/abi.md shows the example plugin: it must be the very source built here.
awk '/^<!-- tests\/consumer\/plugin\/example_plugin.cpp -->$/ {marked = 1; next}
     marked && /^```cpp$/ {code = 1; next}
     code && /^```$/ {exit}
     code {print}' "$dlock_source/docs/abi.md" >"$scratch/abi_example_plugin.cpp"
cmp -s "$scratch/abi_example_plugin.cpp" "$plugin_source/example_plugin.cpp" ||
  fail "the example plugin in docs/abi.md differs from tests/consumer/plugin/example_plugin.cpp"

# A real Redis for the network plugin. A lab that is there but cannot start Redis is a failure.
redis_config=
if [ -n "$lab" ]; then
  "$lab" --state-dir "$lab_state" up redis >/dev/null || fail "the lab could not start redis"
  redis_config=$("$lab" --state-dir "$lab_state" env | sed -n "s/^export DLOCK_LAB_REDIS_CONFIG='\(.*\)'$/\1/p")
  [ -f "$redis_config" ] || fail "the lab gave no redis config"
fi

# consume PREFIX LIBDIR NAME: checks the installed tree under PREFIX (libraries in PREFIX/LIBDIR)
# and builds and runs the consumers against it, in $scratch/NAME.
consume() {
  prefix=$1
  libdir=$1/$2
  work=$scratch/$3
  mkdir -p "$work"
  for f in "$libdir/libdlock.so.0" "$libdir/cmake/dlock/dlockConfig.cmake" "$libdir/pkgconfig/dlock.pc" \
           "$prefix/include/dlock/dlock.hpp" "$prefix/include/dlock/version.h" "$libdir/dlock/plugins/libdlock-redis.so"; do
    [ -f "$f" ] || fail "$3: $f was not installed"
  done
  # No path of the build tree is compiled into the installed library (its debug info aside).
  objcopy -O binary --only-section=.rodata "$libdir/libdlock.so.0" "$work/rodata"
  if grep -qF "$build" "$work/rodata" || grep -qF "$dlock_source/build" "$work/rodata"; then
    fail "$3: libdlock.so holds a path of the build tree: $(grep -aoF "$build" "$work/rodata" | head -1)"
  fi

  cmake -S "$source" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/build" >/dev/null
  "$work/build/consumer_cpp" "$work/locks"
  "$work/build/consumer_c" "$work/locks"

  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  pkg-config --exists dlock || fail "$3: pkg-config does not find dlock"
  for var in libdir plugindir; do
    got=$(pkg-config --variable=$var dlock)
    want=$libdir
    [ $var = plugindir ] && want=$libdir/dlock/plugins
    [ -d "$got" ] && [ "$(cd "$got" && pwd -P)" = "$(cd "$want" && pwd -P)" ] ||
      fail "$3: dlock.pc gives $var=$got, not $want"
  done
  [ "$(cd "$(pkg-config --variable=includedir dlock)" && pwd -P)" = "$(cd "$prefix/include" && pwd -P)" ] ||
    fail "$3: dlock.pc gives includedir=$(pkg-config --variable=includedir dlock)"
  cc -std=c99 "$source/consumer.c" $(pkg-config --cflags --libs dlock) -o "$work/consumer_pc"
  LD_LIBRARY_PATH="$libdir" "$work/consumer_pc" "$work/locks"

  # The example plugin, built against the installed kit only: with find_package (dlock::plugin_kit)
  # and with pkg-config's cflags. It needs no libdlock; the installed one loads it from plugin_path.
  cmake -S "$plugin_source" -B "$work/plugin-cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/plugin-cmake" >/dev/null
  mkdir -p "$work/plugin-pc"
  c++ -std=c++17 -shared -fPIC -fvisibility=hidden "$plugin_source/example_plugin.cpp" $(pkg-config --cflags dlock) \
    -o "$work/plugin-pc/libdlock-example.so"
  for plugin_dir in "$work/plugin-cmake" "$work/plugin-pc"; do
    plugin=$plugin_dir/libdlock-example.so
    [ -f "$plugin" ] || fail "$3: $plugin was not built"
    if readelf -d "$plugin" | grep -q 'NEEDED.*libdlock'; then fail "$3: $plugin links libdlock"; fi
    printf 'backend: example\nplugin_path: [%s]\noptions: {greeting: hi}\n' "$plugin_dir" >"$work/example.yaml"
    out=$(LD_LIBRARY_PATH="$libdir" "$work/build/consumer_c" --config "$work/example.yaml") ||
      fail "$3: no lock from the example plugin in $plugin_dir"
    echo "$out"
    echo "$out" | grep -qxF "consumer_c: plugin $plugin" || fail "$3: the plugin loaded was not $plugin"
    echo "$out" | grep -qx "consumer_c: example fencing token 1" || fail "$3: no lock from the example plugin"
  done

  if [ -n "$redis_config" ]; then
    for consumer in "$work/build/consumer_c" "$work/consumer_pc"; do
      out=$(LD_LIBRARY_PATH="$libdir" "$consumer" --config "$redis_config") || fail "$3: $consumer with redis"
      echo "$out"
      echo "$out" | grep -qxF "consumer_c: plugin $libdir/dlock/plugins/libdlock-redis.so" ||
        fail "$3: the redis plugin was not the installed one"
      echo "$out" | grep -q "^consumer_c: redis fencing token [1-9]" || fail "$3: no lock from redis"
    done
  fi
  # The installed `dlock` command finds the installed plugins through its libdlock.
  LD_LIBRARY_PATH="$libdir" "$prefix/bin/dlock" backends >"$work/backends.txt"
  grep -qF "$libdir/dlock/plugins/libdlock-redis.so" "$work/backends.txt" ||
    fail "$3: the installed dlock command lists no installed redis plugin: $(cat "$work/backends.txt")"
  if [ -n "$redis_config" ]; then
    LD_LIBRARY_PATH="$libdir" "$prefix/bin/dlock" run --config "$redis_config" consumer/cli -- true ||
      fail "$3: the installed dlock command could not run under a redis lock"
  fi
  echo "consumer_test: $3: find_package and pkg-config consumers and plugins built and ran against $prefix (libdir $2)"
}

# 1. The build tree under test, into a scratch prefix.
libdir1=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
consume "$scratch/prefix" "$libdir1" build-tree

# 2. Debian's layout: configured for /usr, installed with DESTDIR.
usr_build=$build-usr-install
export CCACHE_BASEDIR="$dlock_source" CCACHE_NOHASHDIR=true CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
cmake -S "$dlock_source" -B "$usr_build" -DCMAKE_INSTALL_PREFIX=/usr -DDLOCK_BUILD_TESTS=OFF \
  -DDLOCK_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-}" -DCMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-}" \
  ${CMAKE_C_COMPILER:+-DCMAKE_C_COMPILER="$CMAKE_C_COMPILER"} ${CMAKE_CXX_COMPILER:+-DCMAKE_CXX_COMPILER="$CMAKE_CXX_COMPILER"} \
  >/dev/null
cmake --build "$usr_build" -j2 >"$scratch/usr-build.log" 2>&1 || { tail -30 "$scratch/usr-build.log"; fail "the /usr build failed"; }
libdir2=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$usr_build/CMakeCache.txt")
multiarch=$(cc -print-multiarch 2>/dev/null || true)
if [ -f /etc/debian_version ] && [ -n "$multiarch" ]; then
  [ "$libdir2" = "lib/$multiarch" ] || fail "configured for /usr on Debian, libdir is $libdir2, not lib/$multiarch"
fi
DESTDIR="$scratch/root" cmake --install "$usr_build" >/dev/null
[ -f "$scratch/root/usr/$libdir2/libdlock.so.0" ] || fail "libdlock is not in $scratch/root/usr/$libdir2"
consume "$scratch/root/usr" "$libdir2" usr
