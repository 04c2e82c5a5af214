#!/usr/bin/env bash
# A demo: installs what it needs, builds, then runs contending `dlock run`
# processes on one name with the embedded `file` backend and shows the fencing tokens they get —
# each process enters its critical section alone, and the tokens only go up.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release >/dev/null
dlock=build/release/bin/dlock

scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
config=$scratch/dlock.yaml
printf 'backend: file\noptions:\n  directory: %s/locks\n' "$scratch" > "$config"

echo "dlock demo: 8 processes run \`dlock run demo/printer -- ...\` at once (backend: file, $scratch/locks)"
"$dlock" --config "$config" backends | head -2
for i in 1 2 3 4 5 6 7 8; do
  "$dlock" --config "$config" run demo/printer -- sh -c \
    "echo \"  process $i  holds demo/printer  fencing token \$DLOCK_FENCING_TOKEN  owner \$DLOCK_OWNER\"; sleep 0.1" &
done
wait
echo "after all of them:"
"$dlock" --config "$config" inspect demo/printer | sed 's/^/  /'
echo "a process that will not wait (--wait 0) while another holds the lock:"
"$dlock" --config "$config" run demo/printer -- sleep 1 &
sleep 0.3
set +e
"$dlock" --config "$config" run --wait 0 demo/printer -- true
echo "  exit status $? (75 = not acquired)"
set -e
wait
