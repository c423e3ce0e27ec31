#!/usr/bin/env bash
# Benchmark: the CPU instructions each file costs the daemon, counted by `valgrind --tool=callgrind`: a figure a
# noisy, shared machine does not move, so a change to the per-file path can be judged where wall times drift.
# The daemon drains FILES × 8 KiB by PUT to nginx DAV on loopback (4 at once, the default proof of receipt: a HEAD
# each) under callgrind, and then an empty queue; (instructions of the drain - those of the empty run) / FILES is what
# one file costs, the start-up and shutdown apart. (Two drains of different lengths do not cancel those out under
# valgrind: the daemon's timers fire more in a longer run.) curl's own instructions per file on the same files are
# given beside it (`curl --parallel --parallel-max 4`, less a run of one file), and UPLOADQ_BENCH_BINARY measures
# another build (the one before a change).
#
#   contrib/bench/instructions.sh                   # FILES=600
#
# uploadq's state lives on a real disk (UPLOADQ_BENCH_STATE_TMP, by default /var/tmp), as on a device.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
files=${FILES:-600}
command -v valgrind > /dev/null || { echo "bench: valgrind is missing (contrib/bench/setup.sh installs it)" >&2; exit 1; }
bench_state_dir instructions
# Valgrind 3.19 cannot read the DWARF 5 debug information Swift writes: it counts a copy without it.
objcopy --strip-debug "$binary" "$work/uploadq"
binary="$work/uploadq"

# The instructions callgrind counted in the run whose output files start with PREFIX (every thread together).
instructions() {
    cat "$1".* | awk '/^totals:/ { total += $2 } END { printf "%d\n", total }'
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
        local config
        config=$(put_config "$name")
        (cd "$folder" && find . -type f -print0 \
            | "$binary" enqueue --mode reference --destination dav --config "$config" --files-from - --null > /dev/null)
        valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" "$binary" daemon --exit-when-idle \
            --log-level warning --config "$config" > /dev/null 2> "$work/valgrind.log" \
            || { cat "$work/valgrind.log" >&2; exit 1; }
    else
        valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" curl -sS --fail --parallel --parallel-max 4 \
            -K "$(curl_list "$folder" "$name")" > /dev/null 2> "$work/valgrind.log" \
            || { cat "$work/valgrind.log" >&2; exit 1; }
    fi
    if [ "$files" -gt 0 ]; then stored_as_sent "$name" "$folder" "$files"; fi
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench/$name" "$folder"
    instructions "$prefix"
}

uploadq_empty=$(count uploadq 0)
uploadq_files=$(count uploadq "$files")
curl_one=$(count curl 1)
curl_files=$(count curl "$files")
python3 - "$files" "$uploadq_empty" "$uploadq_files" "$curl_one" "$curl_files" "$state_tmp" "$binary" <<'PY'
import datetime, platform, sys
files, uploadq_empty, uploadq_files, curl_one, curl_files = map(int, sys.argv[1:6])
ours = (uploadq_files - uploadq_empty) / files
theirs = (curl_files - curl_one) / (files - 1)
print(f"instructions per 8 KiB file by PUT, {files} files — {datetime.date.today()}, {platform.machine()} "
      f"(uploadq's state in {sys.argv[6]})")
print(f"uploadq daemon (verify = head): {ours:,.0f} per file (an empty queue's start-up and shutdown: {uploadq_empty:,.0f})")
print(f"curl --parallel-max 4:          {theirs:,.0f} per file; uploadq {ours / theirs:.2f}× curl")
PY
