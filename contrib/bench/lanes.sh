#!/usr/bin/env bash
# Benchmark: what lanes cost. The same 10,000 × 8 KiB files by PUT to nginx DAV on loopback, drained by
# `uploadq daemon --exit-when-idle` (4 at once): once without order, once in 100 lanes of 100 files each (every
# file waits for the one before it in its lane). 100 lanes keep 4 transfers busy, so any difference is the
# bookkeeping of the order: the target is the same cost per file (at most 1.10×).
#
#   contrib/bench/lanes.sh                       # 10,000 files, 100 lanes, 3 runs (medians)
#   FILES=2000 LANES=20 RUNS=1 contrib/bench/lanes.sh
#
# uploadq's state lives on a real disk (UPLOADQ_BENCH_STATE_TMP, by default /var/tmp), as on a device; the servers
# store into RAM.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
files=${FILES:-10000}
lanes=${LANES:-100}
runs=${RUNS:-3}
bench_state_dir lanes
mkdir -p "$work/small"
python3 - "$work/small" "$files" <<'PY'
import os, sys
folder, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    with open(f"{folder}/p{index:06d}.jpg", "wb") as handle:
        handle.write(os.urandom(8192))
PY

check() { stored_as_sent "$1" "$work/small" "$files"; }

per_lane=$(( (files + lanes - 1) / lanes ))
for run in $(seq 1 "$runs"); do
    plain=$(put_config "plain-$run")
    laned=$(put_config "lanes-$run")
    (cd "$work/small" && find . -type f -print0 | sort -z \
        | "$binary" enqueue --mode reference --destination dav --config "$plain" --files-from - --null > /dev/null)
    # File n goes in lane n mod LANES, in name order: each lane's files interleave with the others'.
    (cd "$work/small" && ls | sort) > "$work/names"
    for lane in $(seq 0 $((lanes - 1))); do
        awk -v lane="$lane" -v lanes="$lanes" '(NR - 1) % lanes == lane' "$work/names" \
            | (cd "$work/small" && "$binary" enqueue --mode reference --destination dav --config "$laned" \
                --lane "lane-$lane" --files-from - > /dev/null)
    done
    if [ $((run % 2)) -eq 1 ]; then
        measure "drain-$files" "no lanes" "$binary" daemon --exit-when-idle --log-level warning --config "$plain"
        measure "drain-$files" "$lanes lanes of $per_lane" "$binary" daemon --exit-when-idle --log-level warning \
            --config "$laned"
    else
        measure "drain-$files" "$lanes lanes of $per_lane" "$binary" daemon --exit-when-idle --log-level warning \
            --config "$laned"
        measure "drain-$files" "no lanes" "$binary" daemon --exit-when-idle --log-level warning --config "$plain"
    fi
    check "plain-$run"
    check "lanes-$run"
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench" "$state_dir"/state-*
done

table "$files × 8 KiB by PUT to nginx DAV on loopback, 4 at once, no lanes against $lanes lanes, median of $runs (state in $state_tmp)"
python3 - "$results" "$lanes lanes of $per_lane" <<'PY'
import statistics, sys
walls = {}
for line in open(sys.argv[1]):
    group, label, times = line.rstrip("\n").split("|")
    walls.setdefault(label, []).append(float(times.split()[0]))
ratio = statistics.median(walls[sys.argv[2]]) / statistics.median(walls["no lanes"])
print(f"target: lanes at most 1.10× no lanes per file: {ratio:.2f}× {'met' if ratio <= 1.10 else 'MISSED'}")
PY
