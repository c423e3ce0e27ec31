#!/usr/bin/env bash
# Benchmark: latency, as a user of a field app feels it.
#   - drop to uploaded: a photo renamed into the spool of a running daemon, until the file is complete on nginx
#     DAV; printed as the time beyond the spool's quiet period, median and p95 (targets: + 50 ms and + 150 ms).
#     The state directory is on tmpfs with the servers' (TMPDIR=/dev/shm): a disk adds its flushes;
#   - `enqueue --wait` of one small file with the daemon running: until the command returns (it follows the
#     database's commits, not a timer).
#
#   contrib/bench/latency.sh            PHOTOS=40 QUIET_MS=200
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
photos=${PHOTOS:-40}
quiet_ms=${QUIET_MS:-200}
mkdir -p "$work/spool" "$work/drafts"
cat > "$work/uploadq.toml" <<TOML
state_dir = "state"
[spool]
dir = "spool"
destination = "dav"
quiet_period = "${quiet_ms}ms"
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/latency/{name}"
TOML
cd "$work"
"$binary" daemon --log-level warning --config uploadq.toml & daemon=$!
trap 'kill $daemon 2> /dev/null; wait $daemon 2> /dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do [ -S state/daemon.sock ] && break; sleep 0.05; done
[ -S state/daemon.sock ] || { echo "bench: the daemon did not start" >&2; exit 1; }

python3 - "$photos" "$quiet_ms" "$UPLOADQ_TEST_DAV_ROOT/latency" "$binary" <<'PY'
import os, statistics, subprocess, sys, time
count, quiet, stored = int(sys.argv[1]), int(sys.argv[2]) / 1000, sys.argv[3]
binary = sys.argv[4]
delays = []
for index in range(count):
    name = f"photo-{index:04d}.jpg"
    body = os.urandom(200_000)
    draft = f"drafts/{name}"
    with open(draft, "wb") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    started = time.monotonic()
    os.rename(draft, f"spool/{name}")
    target = os.path.join(stored, name)
    while True:
        try:
            if os.path.getsize(target) == len(body):
                break
        except FileNotFoundError:
            pass
        if time.monotonic() - started > 30:
            sys.exit(f"bench: {name} did not arrive in 30 s")
        time.sleep(0.001)
    delays.append(time.monotonic() - started - quiet)
    time.sleep(0.05)
delays.sort()
p95 = delays[min(len(delays) - 1, int(round(0.95 * (len(delays) - 1))))]
median = statistics.median(delays)
print(f"drop to uploaded, beyond the {quiet * 1000:.0f} ms quiet period, {count} photos of 200 KB:")
print(f"  median + {median * 1000:.0f} ms (target + 50 ms: {'met' if median <= 0.05 else 'NOT met'}), "
      f"p95 + {p95 * 1000:.0f} ms (target + 150 ms: {'met' if p95 <= 0.15 else 'NOT met'})")

waits = []
for index in range(10):
    path = f"drafts/wait-{index}.jpg"
    with open(path, "wb") as handle:
        handle.write(os.urandom(8192))
    started = time.monotonic()
    subprocess.run([binary, "enqueue", "--wait", "--config", "uploadq.toml", path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    waits.append(time.monotonic() - started)
print(f"enqueue --wait of an 8 KiB file with the daemon running: median {statistics.median(waits) * 1000:.0f} ms, "
      f"max {max(waits) * 1000:.0f} ms")
PY
