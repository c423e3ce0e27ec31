#!/usr/bin/env bash
# Benchmark: one large file PUT to nginx DAV on loopback, uploadq against `curl -T` on the same file and server.
# Prints wall time, CPU time (user+sys) and peak RSS of each, with the ratios uploadq/curl.
#
#   contrib/bench/put-vs-curl.sh            # 1 GiB, 5 runs each (medians)
#   SIZE_MIB=4096 RUNS=1 contrib/bench/put-vs-curl.sh
#
# "transfer" runs `uploadq daemon --exit-when-idle` on a job enqueued beforehand with --mode reference (the PUT
# alone). "end to end" is the whole command as a user times it: `uploadq enqueue` (which hashes the file, SHA-256,
# at intake) then the drain, against `openssl dgst -sha256` then `curl -T` on the same file (the same work: a
# content identity and the upload), and against `curl -T` alone.
# Needs: the release build (made here, with the Swift runtime linked statically as contrib/run-daemon.sh does),
# nginx and the test-server virtualenv (contrib/test-servers/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
size_mib=${SIZE_MIB:-1024}
runs=${RUNS:-5}
file="$work/payload.bin"
head -c "$((size_mib * 1024 * 1024))" /dev/urandom > "$file"

config() { # name → a config whose destination PUTs to nginx under /bench/NAME/
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$1/{job_id}.bin"
TOML
    echo "$work/$1.toml"
}

for run in $(seq 1 "$runs"); do
    transfer=$(config "transfer-$run")
    "$binary" enqueue "$file" --mode reference --destination dav --config "$transfer" > /dev/null
    # Alternate who goes first: on a shared VM the machine's speed drifts from one minute to the next.
    if [ $((run % 2)) -eq 1 ]; then
        measure put "curl -T" curl -sS --fail -T "$file" "$UPLOADQ_TEST_DAV_URL/bench/curl-$run.bin"
        measure put "uploadq transfer" "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
    else
        measure put "uploadq transfer" "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
        measure put "curl -T" curl -sS --fail -T "$file" "$UPLOADQ_TEST_DAV_URL/bench/curl-$run.bin"
    fi

    drop=$(config "drop-$run")
    peer() {
        measure "end to end" "openssl dgst + curl -T" sh -c "openssl dgst -sha256 '$file' > /dev/null \
            && curl -sS --fail -T '$file' '$UPLOADQ_TEST_DAV_URL/bench/e2e-curl-$run.bin'"
    }
    ours() {
        measure "end to end" "uploadq enqueue + drain" sh -c "'$binary' enqueue '$file' --mode reference \
            --destination dav --config '$drop' > /dev/null \
            && '$binary' daemon --exit-when-idle --log-level warning --config '$drop'"
    }
    if [ $((run % 2)) -eq 1 ]; then peer; ours; else ours; peer; fi
    for name in "transfer-$run" "drop-$run"; do
        stored=$(find "$UPLOADQ_TEST_DAV_ROOT/bench/$name" -type f)
        cmp -s "$stored" "$file" || { echo "bench: $name stored a different file" >&2; exit 1; }
    done
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench"
done

table "PUT $size_mib MiB to nginx DAV on loopback, median of $runs"
# The whole command against `curl -T` alone, which computes no content identity.
compare "uploadq enqueue + drain" "curl -T" "curl -T alone"
