#!/usr/bin/env bash
# Benchmark: `uploadq status`, `status --json` and `list --limit 50` on a queue of 100,000 jobs (made by
# enqueueing one file and copying its row in SQL; 1/4 uploaded, some failed, some pending with reasons).
#   contrib/bench/status.sh            JOBS=100000 RUNS=10
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_local
jobs=${JOBS:-100000}
runs=${RUNS:-10}
cat > "$work/uploadq.toml" <<TOML
state_dir = "state"
[destinations.default]
protocol = "file"
url = "file://out"
TOML
head -c 4096 /dev/urandom > "$work/seed.jpg"
"$binary" enqueue "$work/seed.jpg" --config "$work/uploadq.toml" > /dev/null
python3 - "$work/state/queue.sqlite" "$jobs" <<'PY'
import sqlite3, sys, uuid
db = sqlite3.connect(sys.argv[1])
columns = [row[1] for row in db.execute("PRAGMA table_info(job)")]
seed = db.execute("SELECT * FROM job").fetchone()
rows = []
for index in range(int(sys.argv[2]) - 1):
    row = list(seed)
    row[columns.index("id")] = str(uuid.uuid4())
    row[columns.index("sha256")] = f"{index:064x}"
    state = ("uploaded", "uploaded", "pending", "failed")[index % 4]
    row[columns.index("state")] = state
    row[columns.index("waiting_reason")] = "metered-link" if state == "pending" and index % 8 == 2 else None
    row[columns.index("permanent")] = 1 if state == "failed" and index % 16 == 3 else 0
    rows.append(row)
db.executemany(f"INSERT INTO job ({','.join(columns)}) VALUES ({','.join('?' * len(columns))})", rows)
db.commit()
PY
for run in $(seq 1 "$runs"); do
    measure "status-$jobs" "status" "$binary" status --config "$work/uploadq.toml"
    measure "status-$jobs" "status --json" "$binary" status --json --config "$work/uploadq.toml"
    measure "status-$jobs" "list --limit 50" "$binary" list --limit 50 --config "$work/uploadq.toml"
done
table "CLI on a $jobs-job queue, median of $runs (ratios against plain status)"
