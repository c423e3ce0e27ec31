#!/usr/bin/env bash
# Benchmark: how uploadq scales with the queue. Prints, against the targets of the scale work:
#   - enqueue throughput (reference and copy), through the real intake (`enqueue --files-from`);
#   - drain time per file with SMALL and with LARGE jobs pending, to a local directory (ratio ≤ 1.3), and the
#     daemon's RSS sampled over the large drain (flat: the last tenth no higher than the first by more than 20%);
#   - daemon start-up with LARGE jobs pending: from exec to the first request at a server (≤ 2 s);
#   - `status`, `status --json`, `list --limit 50` and `show` with MILLION jobs in the database (≤ 150 ms each), and
#     the daemon's peak RSS over 10 s on that database (≤ 64 MiB).
# Jobs are made by the real intake; only the MILLION-job database is filled in SQL, with copies of a row the
# intake wrote (new ids and digests), so it holds the same rows and the triggers keep its tallies.
#
#   contrib/bench/scale.sh            SMALL=1000 LARGE=100000 MILLION=1000000 RUNS=5
#   SMALL=500 LARGE=5000 MILLION=50000 contrib/bench/scale.sh      # a quick look
#   PARTS="startup million" contrib/bench/scale.sh                  # some of: enqueue drain startup million
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_local
small=${SMALL:-1000}
large=${LARGE:-100000}
million=${MILLION:-1000000}
runs=${RUNS:-5}
parts=" ${PARTS:-enqueue drain startup million} "
part() { [[ "$parts" == *" $1 "* ]]; }
verdicts="$work/verdicts"
: > "$verdicts"
verdict() { # name value target met
    printf '%-58s %14s %14s %6s\n' "$1" "$2" "$3" "$4" >> "$verdicts"
}

config() { # name [extra TOML] → a config with a local-directory destination
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[limits]
concurrency = 4
${2:-}
[destinations.default]
protocol = "file"
url = "file://out-$1"
TOML
    echo "$work/$1.toml"
}

make_files() { # folder count → tiny photos, one per job
    mkdir -p "$1"
    python3 - "$1" "$2" <<'PY'
import os, sys
folder, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    with open(f"{folder}/p{index:07d}.jpg", "wb") as handle:
        handle.write(b"\xff\xd8\xff\xe0" + os.urandom(1020))
PY
}

enqueue() { # config folder mode
    (cd "$2" && find . -type f -print0 | "$binary" enqueue --mode "$3" --config "$1" --files-from - --null > /dev/null)
}

seconds() { python3 -c 'import time; print(time.monotonic())'; }

# 1. Enqueue throughput.
if part enqueue || part drain; then make_files "$work/small" "$small"; fi
if part enqueue || part drain || part startup; then make_files "$work/large" "$large"; fi
part enqueue && for mode in reference copy; do
    cfg=$(config "enqueue-$mode")
    start=$(seconds)
    enqueue "$cfg" "$work/large" "$mode"
    end=$(seconds)
    rate=$(python3 -c "print(f'{$large / ($end - $start):.0f}')")
    verdict "enqueue $large files ($mode), files/s" "$rate" "-" "-"
done

# 2. Drain per file with SMALL and LARGE pending; RSS sampled over the large drain.
drain() { # name folder count → seconds per file; leaves RSS samples in $work/rss-NAME
    local cfg start end pid
    cfg=$(config "$1")
    enqueue "$cfg" "$2" reference
    : > "$work/rss-$1"
    start=$(seconds)
    "$binary" daemon --exit-when-idle --log-level warning --config "$cfg" & pid=$!
    # Sampled beside the drain; its end is taken from `wait`, not from the sampler's pace.
    (while kill -0 "$pid" 2> /dev/null; do
        awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2> /dev/null >> "$work/rss-$1" || true
        sleep 0.2
    done) & sampler=$!
    wait "$pid"
    end=$(seconds)
    wait "$sampler"
    local stored
    stored=$(find "$work/out-$1" -type f | wc -l)
    [ "$stored" -eq "$3" ] || { echo "bench: drain $1 stored $stored of $3 files" >&2; exit 1; }
    python3 -c "print(($end - $start) / $3)"
}
if part drain; then
per_small=$(drain drain-small "$work/small" "$small")
per_large=$(drain drain-large "$work/large" "$large")
ratio=$(python3 -c "print(f'{$per_large / $per_small:.2f}')")
verdict "drain, ms per file with $small pending" "$(python3 -c "print(f'{$per_small * 1000:.2f}')")" "-" "-"
verdict "drain, ms per file with $large pending" "$(python3 -c "print(f'{$per_large * 1000:.2f}')")" "-" "-"
verdict "drain per file, $large vs $small pending" "$ratio×" "≤ 1.3×" \
    "$(python3 -c "print('yes' if $ratio <= 1.3 else 'NO')")"
read -r rss_first rss_last rss_peak < <(python3 - "$work/rss-drain-large" <<'PY'
import sys
samples = [int(line) for line in open(sys.argv[1]) if line.strip()]
tenth = max(1, len(samples) // 10)
print(max(samples[:tenth]) // 1024, max(samples[-tenth:]) // 1024, max(samples) // 1024)
PY
)
verdict "RSS over the $large drain: first tenth → last tenth, MiB" "$rss_first → $rss_last" "flat" \
    "$(python3 -c "print('yes' if $rss_last <= $rss_first * 1.2 + 2 else 'NO')")"
fi

# 3. Start-up with LARGE pending: from exec to the first request at a server that answers every PUT.
if part startup; then
cfg=$(config startup)
sed -i -e 's|protocol = "file"|protocol = "http-put"|' -e 's|url = "file://out-startup"|url = "http://127.0.0.1:@PORT@/{name}"|' "$cfg"
enqueue "$cfg" "$work/large" reference
startup=$(python3 - "$binary" "$cfg" <<'PY'
import http.server, subprocess, sys, threading, time
first = threading.Event()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        first.set()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(201); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
path = sys.argv[2]
text = open(path).read().replace("@PORT@", str(server.server_address[1]))
open(path, "w").write(text)
start = time.monotonic()
daemon = subprocess.Popen([sys.argv[1], "daemon", "--log-level", "warning", "--config", path])
seen = first.wait(60)
elapsed = time.monotonic() - start
daemon.terminate(); daemon.wait(30)
print(f"{elapsed:.2f}" if seen else "never")
PY
)
verdict "start-up to the first request, $large pending, s" "$startup" "≤ 2 s" \
    "$(python3 -c "print('yes' if '$startup' != 'never' and float('$startup') <= 2 else 'NO')")"
fi

# 4. The CLI and the daemon's RSS with MILLION jobs in the database.
if part million; then
cfg=$(config million '[link]
mode = "offline"')
sed -i -e 's|protocol = "file"|protocol = "http-put"|' -e 's|url = "file://out-million"|url = "http://127.0.0.1:9/{name}"|' "$cfg"
head -c 4096 /dev/urandom > "$work/seed.jpg"
"$binary" enqueue "$work/seed.jpg" --mode reference --config "$cfg" > /dev/null
python3 - "$work/state-million/queue.sqlite" "$million" <<'PY'
import sqlite3, sys, uuid
db = sqlite3.connect(sys.argv[1])
columns = [row[1] for row in db.execute("PRAGMA table_info(job)")]
seed = db.execute("SELECT * FROM job").fetchone()
batch = []
for index in range(int(sys.argv[2]) - 1):
    row = list(seed)
    row[columns.index("id")] = str(uuid.uuid4())
    row[columns.index("sha256")] = f"{index:064x}"
    # Nine in ten uploaded (the history a long-running device keeps), the rest pending.
    row[columns.index("state")] = "pending" if index % 10 == 0 else "uploaded"
    batch.append(row)
    if len(batch) == 50000:
        db.executemany(f"INSERT INTO job ({','.join(columns)}) VALUES ({','.join('?' * len(columns))})", batch)
        batch = []
db.executemany(f"INSERT INTO job ({','.join(columns)}) VALUES ({','.join('?' * len(columns))})", batch)
db.commit()
PY
some_id=$("$binary" list --limit 1 --config "$cfg" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])')
for run in $(seq 1 "$runs"); do
    measure cli "status" "$binary" status --config "$cfg"
    measure cli "status --json" "$binary" status --json --config "$cfg"
    measure cli "list --limit 50" "$binary" list --limit 50 --config "$cfg"
    measure cli "show" "$binary" show "$some_id" --config "$cfg"
done
while IFS='|' read -r _ label times; do echo "$label|${times%% *}"; done < "$results" | python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    label, wall = line.rstrip("\n").split("|")
    by.setdefault(label, []).append(float(wall))
for label, walls in by.items():
    median = statistics.median(walls) * 1000
    print(f"{label}|{median:.0f}")
' | while IFS='|' read -r label ms; do
    verdict "$label with $million jobs, ms (median of $runs)" "$ms" "≤ 150" "$([ "$ms" -le 150 ] && echo yes || echo NO)"
done
/usr/bin/time -f "%M" -o "$work/rss-million" timeout -s TERM 10 "$binary" daemon --log-level warning --config "$cfg" \
    > /dev/null 2>&1 || true
rss=$(( $(tail -n 1 "$work/rss-million") / 1024 ))
verdict "daemon peak RSS over 10 s with $million jobs, MiB" "$rss" "≤ 64" "$([ "$rss" -le 64 ] && echo yes || echo NO)"
fi

echo "uploadq at scale — $(date +%F), $(uname -m), $(nproc) cores"
printf '%-58s %14s %14s %6s\n' "" "measured" "target" "met"
cat "$verdicts"
