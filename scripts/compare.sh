#!/usr/bin/env bash
# The main job: every dlock backend against its floor and its peers, one run, one report.
#   scripts/compare.sh                 quick size (a few minutes of measuring)
#   scripts/compare.sh --full          docs/design/benchmarks.md's sizes
#   scripts/compare.sh --backends redis,etcd --skip-peers --out DIR   (any dlock-compare option)
# Installs the Debian packages (scripts/install-deps.sh), builds the release tree
# (scripts/build.sh release), then runs build/release/bin/dlock-compare, which starts the lab,
# measures with a progress display on stderr, stops the lab, prints the summary table and the
# report's folder. The exit status is dlock-compare's.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "compare: building (scripts/build.sh release)"
scripts/build.sh release
compare=build/release/bin/dlock-compare
if [ ! -x "$compare" ]; then
  echo "compare: $compare was not built (is benchmarks/suite/probes.cmake present?)" >&2
  exit 1
fi
echo "compare: running $compare $* (progress on stderr; the summary table and the report folder come last)"
exec "$compare" "$@"
