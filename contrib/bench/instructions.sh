#!/usr/bin/env bash
# Benchmark: the CPU instructions each file costs the daemon, counted by `valgrind --tool=callgrind`: a figure a
# noisy, shared machine does not move, so a change to the per-file path can be judged where wall times drift.
# The daemon drains FEW and then MANY × 8 KiB by PUT to nginx DAV on loopback (4 at once, the default proof of
# receipt: a HEAD each) under callgrind; (instructions for MANY - instructions for FEW) / (MANY - FEW) is what one
# file costs, its start-up and shutdown apart. curl's own instructions per file on the same files are given beside
# it (`curl --parallel --parallel-max 4` under callgrind the same way).
#
#   contrib/bench/instructions.sh                   # FEW=100 MANY=600
#
# uploadq's state lives on a real disk (UPLOADQ_BENCH_STATE_TMP, by default /var/tmp), as on a device.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export UPLOADQ_BENCH_STATE_TMP="${UPLOADQ_BENCH_STATE_TMP:-/var/tmp}"
state_tmp="$UPLOADQ_BENCH_STATE_TMP"
source contrib/bench/lib.sh
bench_prepare "$@"
few=${FEW:-100}
many=${MANY:-600}
command -v valgrind > /dev/null || { echo "bench: valgrind is missing (contrib/bench/setup.sh installs it)" >&2; exit 1; }
state_dir="$(mktemp -d "$state_tmp/uploadq-instructions-state-XXXXXX")"
trap 'rm -rf "$work" "$state_dir"' EXIT

# The instructions callgrind counted in the run whose output files start with PREFIX (every thread together).
instructions() {
    cat "$1".* | awk '/^(summary|totals):/ { total += $2 } END { printf "%d\n", total }'
}

# `count KIND FILES`: the instructions uploadq (KIND=uploadq) or curl (KIND=curl) spend on FILES files.
count() {
    local kind=$1 files=$2 folder="$work/files-$2"
    rm -rf "$folder" && mkdir -p "$folder"
    python3 - "$folder" "$files" <<'PY'
import os, sys
for index in range(int(sys.argv[2])):
    with open(f"{sys.argv[1]}/p{index:06d}.jpg", "wb") as handle:
        handle.write(os.urandom(8192))
PY
    local name="$kind-$files" prefix="$work/callgrind-$kind-$files"
    if [ "$kind" = uploadq ]; then
        cat > "$work/$name.toml" <<TOML
state_dir = "$state_dir/state-$name"
[limits]
concurrency = 4
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$name/{name}"
TOML
        (cd "$folder" && find . -type f -print0 \
            | "$binary" enqueue --mode reference --destination dav --config "$work/$name.toml" --files-from - --null \
            > /dev/null)
        valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" "$binary" daemon --exit-when-idle \
            --log-level warning --config "$work/$name.toml" > /dev/null 2> "$work/valgrind.log" \
            || { cat "$work/valgrind.log" >&2; exit 1; }
    else
        : > "$work/$name.curl"
        for path in "$folder"/*; do
            printf 'upload-file = "%s"\nurl = "%s/bench/%s/%s"\n' "$path" "$UPLOADQ_TEST_DAV_URL" "$name" "${path##*/}" \
                >> "$work/$name.curl"
        done
        valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" curl -sS --fail --parallel --parallel-max 4 \
            -K "$work/$name.curl" > /dev/null 2> "$work/valgrind.log" || { cat "$work/valgrind.log" >&2; exit 1; }
    fi
    stored_as_sent "$name" "$folder" "$files"
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench/$name" "$folder"
    instructions "$prefix"
}

uploadq_few=$(count uploadq "$few")
uploadq_many=$(count uploadq "$many")
curl_few=$(count curl "$few")
curl_many=$(count curl "$many")
python3 - "$few" "$many" "$uploadq_few" "$uploadq_many" "$curl_few" "$curl_many" "$state_tmp" <<'PY'
import datetime, platform, sys
few, many, uploadq_few, uploadq_many, curl_few, curl_many = map(int, sys.argv[1:7])
ours = (uploadq_many - uploadq_few) / (many - few)
theirs = (curl_many - curl_few) / (many - few)
print(f"instructions per 8 KiB file by PUT, {few} against {many} files — {datetime.date.today()}, {platform.machine()} "
      f"(uploadq's state in {sys.argv[7]})")
print(f"uploadq daemon (verify = head): {ours:,.0f} per file (start-up and shutdown: {uploadq_few - ours * few:,.0f})")
print(f"curl --parallel-max 4:          {theirs:,.0f} per file; uploadq {ours / theirs:.2f}× curl")
PY
