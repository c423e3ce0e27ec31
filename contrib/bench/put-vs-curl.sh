#!/usr/bin/env bash
# Benchmark: one large file PUT to nginx DAV on loopback, uploadq against `curl -T` on the same file and server.
# Prints wall time, CPU time (user+sys) and peak RSS of each, with the ratios uploadq/curl.
#
#   contrib/bench/put-vs-curl.sh            # 1 GiB, 5 runs each (medians)
#   SIZE_MIB=4096 RUNS=1 contrib/bench/put-vs-curl.sh
#
# "transfer" runs `uploadq daemon --exit-when-idle` on a job enqueued beforehand with --mode reference (the PUT
# alone); "drop-to-uploaded" also counts `uploadq enqueue`, which hashes the file (SHA-256) at intake.
# Needs: the release build (made here, with the Swift runtime linked statically as contrib/run-daemon.sh does),
# nginx and the test-server virtualenv (contrib/test-servers/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
size_mib=${SIZE_MIB:-1024}
runs=${RUNS:-5}

if [ -z "${UPLOADQ_TEST_DAV_URL:-}" ]; then
    contrib/setup.sh
    contrib/test-servers/setup.sh
    swift build -c release --static-swift-stdlib --product uploadq >&2
    # nginx stores into RAM (tmpfs): what is compared is the uploaders, not the disk's write-back.
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
    exec contrib/test-servers/run.sh "$0" "$@"
fi

binary="$root/.build/release/uploadq"
work="$(mktemp -d "${TMPDIR:-/tmp}/uploadq-bench-XXXXXX")"
trap 'rm -rf "$work"' EXIT
file="$work/payload.bin"
head -c "$((size_mib * 1024 * 1024))" /dev/urandom > "$file"

measure() { # label command... → appends "label wall user sys rss_kib" to $work/results
    local label=$1; shift
    # Everything written so far reaches the disk first: nginx stores 1 GiB per run, and the write-back of one
    # run must not slow the next one down.
    sync
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > /dev/null 2> "$work/stderr" \
        || { cat "$work/stderr" >&2; exit 1; }
    echo "$label $(cat "$work/time")" >> "$work/results"
}

config() { # name → a config whose destination PUTs to nginx under /bench/NAME/
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$1/{job_id}.bin"
TOML
    echo "$work/$1.toml"
}

: > "$work/results"
for run in $(seq 1 "$runs"); do
    transfer=$(config "transfer-$run")
    "$binary" enqueue "$file" --mode reference --destination dav --config "$transfer" > /dev/null
    # Alternate who goes first: on a shared VM the machine's speed drifts from one minute to the next.
    if [ $((run % 2)) -eq 1 ]; then
        measure curl curl -sS --fail -T "$file" "$UPLOADQ_TEST_DAV_URL/bench/curl-$run.bin"
        measure transfer "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
    else
        measure transfer "$binary" daemon --exit-when-idle --log-level warning --config "$transfer"
        measure curl curl -sS --fail -T "$file" "$UPLOADQ_TEST_DAV_URL/bench/curl-$run.bin"
    fi

    drop=$(config "drop-$run")
    measure drop sh -c "'$binary' enqueue '$file' --mode reference --destination dav --config '$drop' >/dev/null \
        && '$binary' daemon --exit-when-idle --log-level warning --config '$drop'"
    for name in "transfer-$run" "drop-$run"; do
        stored=$(find "$UPLOADQ_TEST_DAV_ROOT/bench/$name" -type f)
        cmp -s "$stored" "$file" || { echo "bench: $name stored a different file" >&2; exit 1; }
    done
    rm -rf "$UPLOADQ_TEST_DAV_ROOT/bench"
done

python3 - "$work/results" "$size_mib" "$runs" <<'PY'
import statistics, sys, platform, datetime
rows = {}
for line in open(sys.argv[1]):
    label, wall, user, system, rss = line.split()
    rows.setdefault(label, []).append((float(wall), float(user) + float(system), int(rss)))
med = {k: tuple(statistics.median(v[i] for v in rows[k]) for i in range(3)) for k in rows}
print(f"PUT {sys.argv[2]} MiB to nginx DAV on loopback, median of {sys.argv[3]} run(s); "
      f"{datetime.date.today()}, {platform.machine()}, {platform.node()}")
print(f"{'':22}{'wall s':>9}{'cpu s':>9}{'peak RSS MiB':>14}{'wall ×curl':>12}{'cpu ×curl':>11}")
cw, cc, _ = med["curl"]
for label, name in [("curl", "curl -T"), ("transfer", "uploadq transfer"), ("drop", "uploadq drop→uploaded")]:
    w, c, r = med[label]
    print(f"{name:22}{w:9.2f}{c:9.2f}{r / 1024:14.1f}{w / cw:12.2f}{c / max(cc, 0.01):11.2f}")
PY
