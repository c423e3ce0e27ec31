#!/usr/bin/env bash
# Benchmark: intake. Enqueueing 10,000 small photos (JPEG headers, random bodies, 2–3 KiB; copy, the default, and
# reference) in one `uploadq enqueue --files-from` call, and hashing: enqueueing a 1 GiB file by reference
# (SHA-256 while reading it) against `openssl dgst -sha256` on the same file, warm cache.
#   contrib/bench/intake.sh            FILES=10000 HASH_MIB=1024 RUNS=3
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_local
files=${FILES:-10000}
hash_mib=${HASH_MIB:-1024}
runs=${RUNS:-3}
mkdir -p "$work/small"
python3 - "$work/small" "$files" <<'PY'
import os, sys
for index in range(int(sys.argv[2])):
    with open(f"{sys.argv[1]}/photo-{index:05d}.jpg", "wb") as handle:
        handle.write(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + os.urandom(2048 + index % 1024))
PY
head -c "$((hash_mib << 20))" /dev/urandom > "$work/big.bin"
cat > "$work/base.toml" <<TOML
[destinations.default]
protocol = "file"
url = "file://out"
TOML

for run in $(seq 1 "$runs"); do
    for mode in copy reference; do
        sed "1i state_dir = \"state-$mode-$run\"" "$work/base.toml" > "$work/$mode-$run.toml"
        measure "enqueue-$files" "$mode" sh -c "cd '$work/small' && find . -type f -print0 \
            | '$binary' enqueue --mode $mode --config '$work/$mode-$run.toml' --files-from - --null"
    done
    cat "$work/big.bin" > /dev/null
    measure "sha256-$hash_mib-MiB" "openssl dgst" openssl dgst -sha256 "$work/big.bin"
    sed "1i state_dir = \"state-hash-$run\"" "$work/base.toml" > "$work/hash-$run.toml"
    measure "sha256-$hash_mib-MiB" "uploadq enqueue" "$binary" enqueue --mode reference --config "$work/hash-$run.toml" "$work/big.bin"
done
table "intake: $files small files; SHA-256 of $hash_mib MiB (warm cache), median of $runs"
