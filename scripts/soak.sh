#!/usr/bin/env bash
# The soak: scenario 1 (32 contenders on four names, plus one per name through a network partition)
# under the random nemesis (SIGKILLs, SIGSTOPs, server pauses, short partitions) on every generic
# target, for $DLOCK_FAULT_SOAK_SECONDS (default 120 s) each and until each made at least N checked
# acquisitions. Writes OUT/soak.md (target, checked acquisitions, faults injected by kind,
# violations, duration) beside OUT/guarantees.{json,md}. Exit status 0 when every cell passed.
#   scripts/soak.sh [N] [OUT]                 N defaults to 10000, OUT to build/release/soak-results
#   SOAK_TARGETS=redis,etcd scripts/soak.sh   a subset of the targets
#   DLOCK_FAULT_SOAK_SECONDS=600 scripts/soak.sh   longer per target
# Needs root for the partitions (network namespaces, iptables), as the partition scenarios do.
set -euo pipefail
cd "$(dirname "$0")/.."
acquisitions=${1:-10000}
out=${2:-build/release/soak-results}
targets=${SOAK_TARGETS:-file,redis,redlock,zookeeper,etcd,sql_lease,sql_advisory,mysql_lease,mysql_named}
scripts/build.sh release >/dev/null
cmake --build build/release --target fault_suite -j"$(nproc)" >/dev/null
exec build/release/bin/fault_suite --soak --acquisitions "$acquisitions" --scenarios 1 --backends "$targets" --out "$out"
