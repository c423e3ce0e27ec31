#!/usr/bin/env bash
# at.sh EPOCH COMMAND...: sets the clock shim's offset (the file $CLOCKSHIFT_FILE) so that the wall clock of this
# run's processes reads EPOCH now, then runs COMMAND. Processes already running under the shim follow within
# 100 ms (a small step for the test servers, started a moment before).
set -euo pipefail
epoch=$1
shift
: "${CLOCKSHIFT_FILE:?at.sh runs under the clock shim (CLOCKSHIFT_FILE)}"
LC_ALL=C awk -v e="$epoch" -v n="$(env -u LD_PRELOAD date +%s.%N)" 'BEGIN { printf "%.3f\n", e - n }' > "$CLOCKSHIFT_FILE.new"
mv "$CLOCKSHIFT_FILE.new" "$CLOCKSHIFT_FILE"
exec "$@"
