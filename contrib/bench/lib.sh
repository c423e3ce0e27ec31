# Where uploadq's state goes (`bench_state_dir`), chosen when this file is first sourced, before the servers' run
# moves TMPDIR to RAM: a real disk by default, as on a device.
export UPLOADQ_BENCH_STATE_TMP="${UPLOADQ_BENCH_STATE_TMP:-/var/tmp}"

# Shared by the benchmark scripts: `measure GROUP LABEL COMMAND...` runs COMMAND under GNU time and appends
# "GROUP|LABEL|wall user sys rss_kib" to $results; `table TITLE` prints medians and ratios (the first label of
# each group is the peer the others are compared with).
measure() {
    local group=$1 label=$2; shift 2
    sync  # the previous run's writes reach the disk before this one starts
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > /dev/null 2> "$work/stderr" \
        || { echo "bench: $label failed:" >&2; cat "$work/stderr" >&2; exit 1; }
    echo "$group|$label|$(cat "$work/time")" >> "$results"
}

table() {
    python3 "$root/contrib/bench/table.py" "$results" "$1"
}

# `compare LABEL PEER_LABEL PEER_TEXT`: LABEL's median wall time against PEER_LABEL's, whatever their groups (the
# whole command against a peer of another group).
compare() {
    python3 - "$results" "$@" <<'PY'
import statistics, sys
results, ours_label, peer_label, peer_text = sys.argv[1:5]
walls = {}
for line in open(results):
    group, label, times = line.rstrip("\n").split("|")
    walls.setdefault(label, []).append(float(times.split()[0]))
ours, peer = statistics.median(walls[ours_label]), statistics.median(walls[peer_label])
print(f"{ours_label}: {ours:.2f} s = {ours / peer:.2f}× {peer_text} ({peer:.2f} s)")
PY
}

# `stored_as_sent NAME FOLDER COUNT`: nginx's DAV holds under /bench/NAME/ the COUNT files of FOLDER, byte for byte.
stored_as_sent() {
    local stored
    stored=$(find "$UPLOADQ_TEST_DAV_ROOT/bench/$1" -type f | wc -l)
    [ "$stored" -eq "$3" ] || { echo "bench: $1 stored $stored of $3 files" >&2; exit 1; }
    diff -rq "$2" "$UPLOADQ_TEST_DAV_ROOT/bench/$1" > /dev/null || { echo "bench: $1 stored different bytes" >&2; exit 1; }
}

# The release binary (UPLOADQ_BENCH_BINARY: another build to measure, such as the one before a change), a scratch
# directory removed at exit, and an empty results file.
bench_workspace() {
    binary="${UPLOADQ_BENCH_BINARY:-$root/.build/release/uploadq}"
    work="$(mktemp -d "${TMPDIR:-/tmp}/uploadq-bench-XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    results="$work/results"
    : > "$results"
}

# For benchmarks without servers: the peers and the release build when missing, then the workspace.
bench_local() {
    if [ ! -x .build/release/uploadq ] || ! command -v /usr/bin/time > /dev/null; then contrib/bench/setup.sh; fi
    bench_workspace
}

# Starts the servers (through contrib/test-servers/run.sh) and the release build unless already inside a run.
bench_prepare() {
    if [ -z "${UPLOADQ_TEST_DAV_URL:-}" ]; then
        contrib/bench/setup.sh
        # Servers store into RAM (tmpfs): what is compared is the uploaders, not the disk's write-back.
        if [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
        exec contrib/test-servers/run.sh "$0" "$@"
    fi
    bench_workspace
}

# `bench_state_dir NAME`: $state_dir, a folder for uploadq's state on UPLOADQ_BENCH_STATE_TMP ($state_tmp), removed at
# exit with the workspace.
bench_state_dir() {
    state_tmp="$UPLOADQ_BENCH_STATE_TMP"
    state_dir="$(mktemp -d "$state_tmp/uploadq-$1-state-XXXXXX")"
    trap 'rm -rf "$work" "$state_dir"' EXIT
}

# `curl_list FOLDER NAME`: a curl config (printed: its path) uploading every file of FOLDER under /bench/NAME/ on nginx,
# one `upload-file`/`url` pair per file.
curl_list() {
    local list="$work/$2.curl"
    : > "$list"
    for path in "$1"/*; do
        printf 'upload-file = "%s"\nurl = "%s/bench/%s/%s"\n' "$path" "$UPLOADQ_TEST_DAV_URL" "$2" "${path##*/}" >> "$list"
    done
    echo "$list"
}

# `put_config NAME [VERIFY]`: a config (printed: its path) whose destination `dav` PUTs to nginx under /bench/NAME/,
# 4 at once, its state in $state_dir/state-NAME (`bench_state_dir` first), proving each upload as VERIFY says
# (`head` by default).
put_config() {
    cat > "$work/$1.toml" <<TOML
state_dir = "$state_dir/state-$1"
[limits]
concurrency = 4
[destinations.dav]
protocol = "http-put"
url = "$UPLOADQ_TEST_DAV_URL/bench/$1/{name}"
verify = "${2:-head}"
TOML
    echo "$work/$1.toml"
}
