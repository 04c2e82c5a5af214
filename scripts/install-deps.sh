#!/usr/bin/env bash
# Installs every Debian package dlock needs to build, test and benchmark: the toolchain, the client
# libraries of each backend, and the servers the lab starts. Idempotent: packages already present are
# not fetched again, and nothing runs when all of them are installed.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake pkg-config ccache git python3
  # the linter of the Redis Lua scripts (luacheck, run by scripts/test.sh)
  lua-check
  # clang's -Wthread-safety build (scripts/check-thread-safety.sh) and its parser for the size
  # limits (scripts/check-sizes.py)
  clang-14 python3-clang-14
  # core dependencies
  libboost-dev libboost-filesystem-dev libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev libcurl4-openssl-dev
  # backend client libraries
  libhiredis-dev libzookeeper-mt-dev libssl-dev libpqxx-dev libgrpc++-dev protobuf-compiler-grpc
  libprotobuf-dev protobuf-compiler libmariadb-dev
  # servers the lab starts, and their command-line clients
  redis-server redis-tools etcd-server etcd-client zookeeper default-jre-headless postgresql pgbouncer
  mariadb-server
  # fault tools
  iproute2 iptables procps
  # peers measured side by side in the benchmarks
  python3-redis python3-tooz python3-kazoo python3-etcd3 python3-psycopg2 python3-pymysql libcurator-recipes-java
  default-jdk-headless
  # the benchmark report's plots
  python3-matplotlib
  # the Python package's tests (tests/python) and its offline install (pip, setuptools, venv)
  python3-pytest python3-pip python3-setuptools python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
