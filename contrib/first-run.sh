#!/usr/bin/env bash
# The README's first run, as a newcomer does it: `contrib/run-daemon.sh` (set-up, the release build, the daemon on
# the default config), then a photo copied into the spool, `uploadq status` and `uploadq list`. The photo must
# arrive in uploaded/ byte for byte, and the daemon must stop cleanly on SIGTERM (Ctrl-C).
#
#   contrib/first-run.sh       # run by contrib/run-tests.sh after the package build (same release flags)
#
# It runs on a copy of Config/uploadq.toml in a scratch folder, so the checkout's own Config/ stays untouched; the
# lookup of ./Config/uploadq.toml itself is a unit test (ConfigurationTests).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
daemon=""
# Stops the set-up, the build or the daemon as one group, waits (10 s at most) for it to end, then removes $work.
stop() {
    [ -n "$daemon" ] || return 0
    kill -TERM -- "-$daemon" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$daemon" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$daemon" 2>/dev/null || true
}
cleanup() {
    stop
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "first-run: $*" >&2
    echo "--- the daemon's output (last lines)" >&2
    tail -n 40 "$work/daemon.log" >&2 || true
    exit 1
}

mkdir -p "$work/Config"
cp "$root/Config/uploadq.toml" "$work/Config/uploadq.toml"
config="$work/Config/uploadq.toml"
uploadq="$root/.build/release/uploadq"
head -c 300000 /dev/urandom > "$work/holiday.jpg"

# Its own session, so that the set-up, the build or the daemon it becomes can be stopped as one group. A
# non-interactive shell runs it outside any job control, so setsid needs no fork and $! is the session's leader.
setsid "$root/contrib/run-daemon.sh" --config "$config" > "$work/daemon.log" 2>&1 &
daemon=$!
# The first release build of a fresh clone takes minutes; after contrib/package-deb.sh it is already done.
for _ in $(seq 1 900); do
    kill -0 "$daemon" 2>/dev/null || fail "contrib/run-daemon.sh ended before the daemon ran"
    if [ -x "$uploadq" ] && "$uploadq" status --config "$config" 2>/dev/null | grep -q '^daemon: *running'; then
        break
    fi
    sleep 1
done
"$uploadq" status --config "$config" | grep -q '^daemon: *running' || fail "the daemon is not running after 15 min"

mkdir -p "$work/Config/spool"
cp "$work/holiday.jpg" "$work/Config/spool/"
arrived=""
for _ in $(seq 1 120); do
    arrived="$(find "$work/Config/uploaded" -name '*-holiday.jpg' 2>/dev/null | head -n 1 || true)"
    [ -n "$arrived" ] && "$uploadq" list --config "$config" | grep -q ' uploaded ' && break
    sleep 0.5
done
[ -n "$arrived" ] || fail "the photo did not arrive in Config/uploaded/ within 60 s"
cmp -s "$work/holiday.jpg" "$arrived" || fail "the photo in Config/uploaded/ differs from the one dropped"
"$uploadq" status --config "$config" | grep -q '1 uploaded' || fail "status does not count the photo as uploaded"
"$uploadq" list --config "$config" | grep -q 'uploaded .*holiday.jpg' || fail "list does not show the photo uploaded"
[ -z "$(find "$work/Config/spool" -mindepth 1 -maxdepth 1 ! -name ".*")" ] || fail "the spool still holds the photo"

kill -TERM "$daemon"
for _ in $(seq 1 300); do
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$daemon" 2>/dev/null && fail "the daemon did not stop within 30 s of SIGTERM"
status=0
wait "$daemon" || status=$?
daemon=""
[ "$status" -eq 0 ] || fail "the daemon exited with $status on SIGTERM"
echo "first-run: contrib/run-daemon.sh took a photo from the spool to Config/uploaded/ and stopped cleanly" >&2
