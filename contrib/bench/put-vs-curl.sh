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
# content identity and the upload), and against `curl -T` alone; "uploadq, sha256 while sending" is the same with
# the destination's `sha256 = "while-sending"` (the upload hashes the bytes it reads to send them).
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

config() { # name [sha256 timing] → a config whose destination PUTs to nginx under /bench/NAME/
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$1/{job_id}.bin"
sha256 = "${2:-at-intake}"
TOML
    echo "$work/$1.toml"
}

# `put GROUP LABEL COMMAND...`: measures the command, checks that it stored one file equal to the payload, and
# removes it. Each upload starts on an empty server: with a few GiB left in its (tmpfs) root, the same `curl -T`
# takes twice as long, which drowned every ratio in noise.
put() {
    measure "$@"
    local stored
    stored=$(find "$UPLOADQ_TEST_DAV_ROOT/bench" -type f)
    [ "$(printf '%s\n' "$stored" | grep -c .)" -eq 1 ] && cmp -s "$stored" "$file" \
        || { echo "bench: $2 did not store one copy of the file: $stored" >&2; exit 1; }
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench"
}
drain() { # config → the command that enqueues the file, then drains the queue
    echo "'$binary' enqueue '$file' --mode reference --destination dav --config '$1' > /dev/null \
        && '$binary' daemon --exit-when-idle --log-level warning --config '$1'"
}

for run in $(seq 1 "$runs"); do
    transfer=$(config "transfer-$run")
    "$binary" enqueue "$file" --mode reference --destination dav --config "$transfer" > /dev/null
    drop=$(config "drop-$run")
    streamed=$(config "streamed-$run" while-sending)
    peers() {
        put put "curl -T" curl -sS --fail -T "$file" "$UPLOADQ_TEST_DAV_URL/bench/curl-$run.bin"
        put "end to end" "openssl dgst + curl -T" sh -c "openssl dgst -sha256 '$file' > /dev/null \
            && curl -sS --fail -T '$file' '$UPLOADQ_TEST_DAV_URL/bench/e2e-curl-$run.bin'"
    }
    ours() {
        put put "uploadq transfer" "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
        put "end to end" "uploadq enqueue + drain" sh -c "$(drain "$drop")"
        put "end to end" "uploadq, sha256 while sending" sh -c "$(drain "$streamed")"
    }
    # Alternate who goes first: on a shared VM the machine's speed drifts from one minute to the next.
    if [ $((run % 2)) -eq 1 ]; then peers; ours; else ours; peers; fi
done

table "PUT $size_mib MiB to nginx DAV on loopback, median of $runs"
# The whole command against `curl -T` alone, which computes no content identity.
compare "uploadq enqueue + drain" "curl -T" "curl -T alone"
compare "uploadq, sha256 while sending" "curl -T" "curl -T alone"
