#!/usr/bin/env bash
# Benchmark: one file (500 MB by default) to tuspyserver on loopback in 8 MiB chunks, uploadq against tuspy (the
# Python tus client) on the same file, server and chunk size. Prints wall, CPU and peak RSS with ratios, and
# uploadq's whole command as a user times it (enqueue with SHA-256, then the drain) against tuspy's.
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

for run in $(seq 1 "$runs"); do
    measure tus tuspy "$root/.build-venv/bin/python" -c "
import sys
from tusclient import client
uploader = client.TusClient('$UPLOADQ_TEST_TUS_ENDPOINT').uploader('$file', chunk_size=8 * 1024 * 1024,
                                                                    metadata={'filename': 'payload.bin'})
uploader.upload()
"
    cat > "$work/tus-$run.toml" <<TOML
state_dir = "state-$run"
[destinations.tus]
protocol = "tus"
url = "$UPLOADQ_TEST_TUS_ENDPOINT"
chunk_size = "8MiB"
TOML
    "$binary" enqueue "$file" --mode reference --destination tus --config "$work/tus-$run.toml" > /dev/null
    measure tus uploadq "$binary" daemon --exit-when-idle --log-level warning --config "$work/tus-$run.toml"
    # End to end, as a user times it: tuspy's whole command is its upload; uploadq's adds the intake's SHA-256.
    sed "s/state-$run/state-e2e-$run/" "$work/tus-$run.toml" > "$work/tus-e2e-$run.toml"
    measure "end to end" "uploadq enqueue + drain" sh -c "'$binary' enqueue '$file' --mode reference \
        --destination tus --config '$work/tus-e2e-$run.toml' > /dev/null \
        && '$binary' daemon --exit-when-idle --log-level warning --config '$work/tus-e2e-$run.toml'"
    uploaded=$(find "$UPLOADQ_TEST_TUS_FILES" -maxdepth 1 -type f ! -name '*.info' -size "$((size_mb * 1000 * 1000))c" | wc -l)
    [ "$uploaded" -ge "$((run * 3))" ] || { echo "bench: an upload is missing on the tus server" >&2; exit 1; }
done
table "tus: $size_mb MB to tuspyserver on loopback, 8 MiB chunks, median of $runs"
compare "uploadq enqueue + drain" "tuspy" "tuspy's whole command"
