#!/usr/bin/env bash
# Benchmark: strangers sharing one daemon (issue 47), with real users (the test set-up's uq-alice and uq-bob, and
# uq-bench-1…8 made here in the group uq-droppers). Two figures:
#
#   1. Fair share: alice drops PHOTOS photos of 50 KB into the spool behind a 4 Mbit/s cap ([bandwidth], about
#      30 s of work for 300); once they are queued bob drops one. How long bob's photo waits, and how many of
#      alice's go before it (before fair share: all of them, 29.9 s).
#   2. Slow clients: 8 droppers each open 32 connections to the control API and send a header byte a second; while
#      they are held, root asks GET /v1/status STATUS times. Its answer times, with the default [api] limits and
#      with request_timeout = "5m" (then only the connections kept for the admin let it in).
#
#   contrib/bench/sharing.sh                     # 300 photos, 20 status requests per run
#   PHOTOS=100 STATUS=10 contrib/bench/sharing.sh
#
# Run as root (it makes users and runs droppers with runuser). uploadq's state lives on a real disk
# (UPLOADQ_BENCH_STATE_TMP, by default /var/tmp), as on a device.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (droppers are real users)" >&2; exit 1; }
bench_local
photos=${PHOTOS:-300}
statuses=${STATUS:-20}
bench_state_dir sharing
getent group uq-droppers > /dev/null || groupadd --system uq-droppers
for user in uq-alice uq-bob uq-bench-{1..8}; do
    id -u "$user" > /dev/null 2>&1 || useradd --system --no-create-home --gid uq-droppers --shell /usr/sbin/nologin "$user"
done
chmod 0711 "$state_dir"

# The spool as docs/install.md makes it, the socket the droppers' group's.
setup_queue() {
    local name=$1 extra=$2
    local dir="$state_dir/$name"
    mkdir -p "$dir/spool" && chmod 0711 "$dir"
    chown root:uq-droppers "$dir/spool" && chmod 3770 "$dir/spool"
    cat > "$dir/uploadq.toml" <<TOML
state_dir = "state"
[spool]
dir = "spool"
quiet_period = "200ms"
[bandwidth]
unmetered = 500000
[api]
socket = "api.sock"
group = "uq-droppers"
$extra
[destinations.default]
protocol = "file"
url = "file://uploaded"
TOML
    echo "$dir"
}

wait_for() {  # wait_for SECONDS COMMAND...: polls COMMAND every 50 ms
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || { echo "bench: timed out waiting for: $*" >&2; exit 1; }
        sleep 0.05
    done
}

# 1. Fair share.
dir=$(setup_queue fair "")
"$binary" daemon --config "$dir/uploadq.toml" --log-level warning > "$work/fair.log" 2>&1 &
daemon=$!
wait_for 20 test -S "$dir/api.sock"
runuser -u uq-alice -- sh -c "cd '$dir/spool' && for i in \$(seq 1 $photos); do head -c 50000 /dev/urandom > .a\$i.tmp && mv .a\$i.tmp a\$i.jpg; done"
queued() { [ "$("$binary" status --json --config "$dir/uploadq.toml" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(d["counts"].values()))')" -ge "$photos" ]; }
wait_for 120 queued
alices() { ls "$dir/uploaded" 2>/dev/null | grep -c 'a[0-9]*\.jpg$' || true; }
at_drop=$(alices)
runuser -u uq-bob -- sh -c "head -c 50000 /dev/urandom > '$dir/spool/.b.tmp' && mv '$dir/spool/.b.tmp' '$dir/spool/bob.jpg'"
dropped=$(date +%s.%N)
landed() { ls "$dir/uploaded" 2>/dev/null | grep -q 'bob.jpg$'; }
wait_for 300 landed
waited=$(python3 -c "import time; print(f'{time.time() - $dropped:.1f}')")
before=$(( $(alices) - at_drop ))
kill "$daemon"; wait "$daemon" || true
echo "fair share: bob's photo, dropped behind alice's $photos at 4 Mbit/s with $((photos - at_drop)) of hers waiting," \
    "waited $waited s; $before of hers went first (before fair share: all of them)"

# 2. Slow clients against the admin's status.
cat > "$work/slow.py" <<'PY'
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); conns.append(s)
    except OSError:
        pass
request, start = b"GET /v1/status HTTP/1.1\r\nHost: x\r\n", time.monotonic()
while time.monotonic() - start < float(sys.argv[3]):
    for index, s in list(enumerate(conns)):
        try:
            s.send(request[int(time.monotonic() - start) % len(request):][:1])
        except OSError:
            # Closed by the daemon (request_timeout): a slow client comes straight back.
            try:
                fresh = socket.socket(socket.AF_UNIX); fresh.connect(sys.argv[1]); conns[index] = fresh
            except OSError:
                pass
    time.sleep(1)
PY
chmod 0644 "$work/slow.py"
chmod 0711 "$work"
variants=("default limits|" "request_timeout 5m|request_timeout = \"5m\"")
# An older build has no [api] limits to set: the default run alone (VARIANTS=1).
[ "${VARIANTS:-2}" -eq 2 ] || variants=("${variants[0]}")
for variant in "${variants[@]}"; do
    label=${variant%%|*}
    dir=$(setup_queue "slow-${label// /-}" "${variant#*|}")
    "$binary" daemon --config "$dir/uploadq.toml" --log-level warning > "$work/slow.log" 2>&1 &
    daemon=$!
    wait_for 20 test -S "$dir/api.sock"
    hold=$(( statuses + 15 ))
    pids=()
    for user in uq-bench-{1..8}; do
        runuser -u "$user" -- python3 "$work/slow.py" "$dir/api.sock" 32 "$hold" 2> /dev/null &
        pids+=($!)
    done
    sleep 5
    : > "$work/times"
    for _ in $(seq 1 "$statuses"); do
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 60 --unix-socket "$dir/api.sock" \
            http://localhost/v1/status >> "$work/times" || true  # curl writes "000 TIME" for a failure too
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
    wait "${pids[@]}" 2> /dev/null || true
    kill "$daemon"; wait "$daemon" || true
    python3 - "$work/times" "$label" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
ok = [float(t) * 1000 for code, t in rows if code == "200"]
print(f"slow clients ({sys.argv[2]}): 8 droppers x 32 slow connections; root's status {len(ok)}/{len(rows)} answered, "
      + (f"median {statistics.median(ok):.0f} ms, max {max(ok):.0f} ms" if ok else "none"))
PY
done
