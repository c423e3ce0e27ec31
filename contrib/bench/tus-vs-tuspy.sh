#!/usr/bin/env bash
# Benchmark: one file (500 MB by default) to tuspyserver on loopback in 8 MiB chunks, uploadq against tuspy (the
# Python tus client) on the same file, server and chunk size. Prints wall, CPU and peak RSS with ratios, and
# uploadq's whole command as a user times it (enqueue with SHA-256, then the drain) against tuspy's, at intake and
# with `sha256 = "while-sending"` (the upload hashes the bytes it reads to send them).
#   contrib/bench/tus-vs-tuspy.sh            SIZE_MB=500 RUNS=3
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
size_mb=${SIZE_MB:-500}
runs=${RUNS:-3}
file="$work/payload.bin"
head -c "$((size_mb * 1000 * 1000))" /dev/urandom > "$file"
cat "$file" > /dev/null

# `tus LABEL COMMAND...`: measures the command, checks that the server holds one upload of the file's size, and
# removes it: each upload starts on an empty server (a few GB left in a tmpfs root slow the next ones down).
tus() {
    measure tus "$@"
    local stored
    stored=$(find "$UPLOADQ_TEST_TUS_FILES" -maxdepth 1 -type f ! -name '*.info' -size "$((size_mb * 1000 * 1000))c")
    [ "$(printf '%s\n' "$stored" | grep -c .)" -eq 1 ] && cmp -s "$stored" "$file" \
        || { echo "bench: $1 did not store one copy of the file on the tus server" >&2; exit 1; }
    find "$UPLOADQ_TEST_TUS_FILES" -maxdepth 1 -type f -delete
}
config() { # name [sha256 timing] → a config of the tus destination
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[destinations.tus]
protocol = "tus"
url = "$UPLOADQ_TEST_TUS_ENDPOINT"
chunk_size = "8MiB"
sha256 = "${2:-at-intake}"
TOML
    echo "$work/$1.toml"
}
drain() { # config → the command that enqueues the file, then drains the queue
    echo "'$binary' enqueue '$file' --mode reference --destination tus --config '$1' > /dev/null \
        && '$binary' daemon --exit-when-idle --log-level warning --config '$1'"
}

for run in $(seq 1 "$runs"); do
    tus tuspy "$root/.build-venv/bin/python" -c "
import sys
from tusclient import client
uploader = client.TusClient('$UPLOADQ_TEST_TUS_ENDPOINT').uploader('$file', chunk_size=8 * 1024 * 1024,
                                                                    metadata={'filename': 'payload.bin'})
uploader.upload()
"
    transfer=$(config "transfer-$run")
    "$binary" enqueue "$file" --mode reference --destination tus --config "$transfer" > /dev/null
    tus uploadq "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
    # End to end, as a user times it: tuspy's whole command is its upload; uploadq's adds the intake's SHA-256,
    # or takes it from the bytes it sends (`sha256 = "while-sending"`).
    tus "uploadq enqueue + drain" sh -c "$(drain "$(config "e2e-$run")")"
    tus "uploadq, sha256 while sending" sh -c "$(drain "$(config "streamed-$run" while-sending)")"
done
table "tus: $size_mb MB to tuspyserver on loopback, 8 MiB chunks, median of $runs"
compare "uploadq enqueue + drain" "tuspy" "tuspy's whole command"
compare "uploadq, sha256 while sending" "tuspy" "tuspy's whole command"
