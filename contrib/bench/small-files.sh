#!/usr/bin/env bash
# Benchmark: many small files by PUT to nginx DAV on loopback, uploadq against `curl --parallel --parallel-max 4`
# on the same files and server: the per-file overhead (bookkeeping, connection reuse) that decides how long the
# first backup of a photo library to a LAN server takes.
#
#   contrib/bench/small-files.sh            # 5,000 × 8 KiB, 3 runs each (medians)
#   FILES=20000 SIZE_KIB=8 RUNS=1 contrib/bench/small-files.sh
#
# "enqueue" is `uploadq enqueue --mode reference --files-from -` (SHA-256 of every file, one transaction per
# batch), reported on its own; "drain" is `uploadq daemon --exit-when-idle` with 4 transfers at once on the jobs
# enqueued before: what is compared with curl, which keeps no queue. The default proves each upload with a HEAD
# of the stored file (`verify = "head"`); "drain, verify = status" takes the status alone, which a captive portal
# passes too: the difference is what the proof costs. Every file is checked on the server.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
files=${FILES:-5000}
size_kib=${SIZE_KIB:-8}
runs=${RUNS:-3}
mkdir -p "$work/small"
python3 - "$work/small" "$files" "$size_kib" <<'PY'
import os, sys
folder, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) * 1024
for index in range(count):
    with open(f"{folder}/p{index:06d}.jpg", "wb") as handle:
        handle.write(os.urandom(size))
PY
find "$work/small" -type f -print0 | xargs -0 cat > /dev/null

# curl's own list of transfers: one `upload-file`/`url` pair per file.
curl_list() { # name → a curl config uploading every file under /bench/NAME/
    local list="$work/$1.curl"
    : > "$list"
    for path in "$work"/small/*; do
        printf 'upload-file = "%s"\nurl = "%s/bench/%s/%s"\n' "$path" "$UPLOADQ_TEST_DAV_URL" "$1" "${path##*/}" >> "$list"
    done
    echo "$list"
}

config() { # name [verify] → a config whose destination PUTs to nginx under /bench/NAME/, 4 at once
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[limits]
concurrency = 4
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$1/{name}"
verify = "${2:-head}"
TOML
    echo "$work/$1.toml"
}

check() { stored_as_sent "$1" "$work/small" "$files"; }

for run in $(seq 1 "$runs"); do
    list=$(curl_list "curl-$run")
    cfg=$(config "uploadq-$run")
    unproven=$(config "status-$run" status)
    measure "enqueue-$files" "uploadq enqueue" sh -c "cd '$work/small' && find . -type f -print0 \
        | '$binary' enqueue --mode reference --destination dav --config '$cfg' --files-from - --null"
    (cd "$work/small" && find . -type f -print0 \
        | "$binary" enqueue --mode reference --destination dav --config "$unproven" --files-from - --null > /dev/null)
    # Alternate who goes first: on a shared VM the machine's speed drifts from one minute to the next.
    if [ $((run % 2)) -eq 1 ]; then
        measure "drain-$files" "curl --parallel" curl -sS --fail --parallel --parallel-max 4 -K "$list"
        measure "drain-$files" "uploadq drain" "$binary" daemon --exit-when-idle --log-level warning --config "$cfg"
        measure "drain-$files" "uploadq drain, verify = status" "$binary" daemon --exit-when-idle --log-level warning \
            --config "$unproven"
    else
        measure "drain-$files" "uploadq drain, verify = status" "$binary" daemon --exit-when-idle --log-level warning \
            --config "$unproven"
        measure "drain-$files" "uploadq drain" "$binary" daemon --exit-when-idle --log-level warning --config "$cfg"
        measure "drain-$files" "curl --parallel" curl -sS --fail --parallel --parallel-max 4 -K "$list"
    fi
    check "curl-$run"
    check "uploadq-$run"
    check "status-$run"
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench"
done

table "$files × $size_kib KiB by PUT to nginx DAV on loopback, 4 at once, median of $runs"
