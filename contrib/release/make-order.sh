#!/usr/bin/env bash
# Makes contrib/release/uploadq.order, the order in which the linker places the functions the release binary runs
# (contrib/build-release.sh): every function one run of the workload below calls, the most run first.
#
#   contrib/release/make-order.sh            # about a minute after the release build
#
# The workload, against the test servers, under valgrind's callgrind (which counts each function's instructions),
# for each protocol (PUT, POST, tus, RUFH, S3 by PutObject and by parts, a directory with the default config's
# spool): `uploadq enqueue` of eight files, small to 12 MiB, into a queue of its own, and a daemon draining it; then
# `status`, `list`, `show` and `config check`. Run it again after a change that renames many functions:
# contrib/release/check-order.sh (in the tests) fails when the order no longer names most of the binary's
# functions.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if [ -z "${UPLOADQ_TEST_DAV_URL:-}" ]; then
    contrib/setup.sh valgrind
    contrib/test-servers/setup.sh
    contrib/build-release.sh >&2
    exec contrib/test-servers/run.sh "$0" "$@"
fi
command -v valgrind > /dev/null || { echo "make-order: valgrind is missing (contrib/setup.sh valgrind)" >&2; exit 1; }
work="$(mktemp -d)"
daemon=""
trap 'if [ -n "$daemon" ]; then kill "$daemon" 2> /dev/null || true; fi; rm -rf "$work"' EXIT
# valgrind cannot read the debug information of a binary this large: it runs a copy without it.
binary="$work/uploadq"
objcopy --strip-debug .build/release/uploadq "$binary"

mkdir -p "$work/files" "$work/spool" "$work/uploaded"
for i in 1 2 3 4 5 6; do head -c $((i * 8192)) /dev/urandom > "$work/files/photo-$i.jpg"; done
head -c $((3 * 1024 * 1024)) /dev/urandom > "$work/files/video.mp4"
head -c $((12 * 1024 * 1024)) /dev/urandom > "$work/files/large.bin"
for i in 1 2 3; do head -c 20000 /dev/urandom > "$work/spool/dropped-$i.jpg"; done
touch -d '-1 minute' "$work/spool"/*
rufh=$(curl -sS --fail -X POST -d '{"interop": 8}' "$UPLOADQ_TEST_RUFH_CONTROL/servers" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["endpoint"])')
curl -sS --fail -X PUT "$UPLOADQ_TEST_S3_ENDPOINT/order" > /dev/null
export AWS_ACCESS_KEY_ID=AKIDORDER AWS_SECRET_ACCESS_KEY=order-secret

# `config DESTINATION SETTINGS`: $work/DESTINATION.toml, a queue of its own sending to that one destination.
config() {
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[limits]
concurrency = 4
[destinations.$1]
$2
TOML
}
config put "protocol = \"http-put\"
url = \"$UPLOADQ_TEST_DAV_URL/order/{job_id}-{name}\""
config post "protocol = \"http-post\"
url = \"$UPLOADQ_TEST_RECORDER_URL/record/order\""
config tus "protocol = \"tus\"
url = \"$UPLOADQ_TEST_TUS_ENDPOINT\""
config rufh "protocol = \"rufh\"
url = \"$rufh\"
interop_version = 8"
config s3 "protocol = \"s3\"
endpoint = \"$UPLOADQ_TEST_S3_ENDPOINT\"
bucket = \"order\"
part_size = \"5MiB\"
multipart_threshold = \"8MiB\""
# The default config's destination, with its spool.
config dir "protocol = \"file\"
url = \"file://$work/uploaded\"
[spool]
dir = \"spool\"
destination = \"dir\"
quiet_period = \"1s\""

# `profile NAME DESTINATION ARGS...`: runs uploadq on DESTINATION's config under callgrind, its counts into
# $work/NAME.callgrind.
profile() {
    local name=$1 destination=$2
    shift 2
    (cd "$work" && valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$name.callgrind" "$binary" "$@" \
        --config "$destination.toml" 2> "$work/$name.valgrind" > "$work/$name.out") \
        || { cat "$work/$name.valgrind" "$work/$name.out" >&2; echo "make-order: uploadq $* failed" >&2; exit 1; }
}
# A daemon sends to one kind of server: each protocol's functions are run by a daemon of their own, so that the
# order can keep them together (callgrind-order.py).
uploaded() { # DESTINATION → how many of its jobs are uploaded
    (cd "$work" && "$binary" list --state uploaded --limit 100 --json --config "$1.toml") \
        | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}
for destination in put post tus rufh s3 dir; do
    profile "enqueue-$destination" "$destination" enqueue "$work"/files/* --mode reference --destination "$destination"
    expected=8
    if [ "$destination" = dir ]; then
        # The default config's way: a daemon taking files from its spool, stopped by SIGTERM once all are sent
        # (--exit-when-idle does not wait for the spool).
        expected=11
        (cd "$work" && exec valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/daemon-dir.callgrind" \
            "$binary" daemon --log-level info --config dir.toml 2> "$work/daemon-dir.valgrind" > /dev/null) &
        daemon=$!
        for _ in $(seq 1 600); do
            count=$(uploaded dir) || count=0   # the queue may not exist yet
            [ "$count" -lt "$expected" ] || break
            sleep 0.2
        done
        kill -TERM "$daemon"
        if ! wait "$daemon"; then
            cat "$work/daemon-dir.valgrind" >&2
            echo "make-order: the spool's daemon failed" >&2
            exit 1
        fi
        daemon=""
    else
        profile "daemon-$destination" "$destination" daemon --exit-when-idle --log-level info
    fi
    uploaded=$(uploaded "$destination")
    if [ "$uploaded" -ne "$expected" ]; then
        echo "make-order: $uploaded of $expected files uploaded to $destination; the others:" >&2
        (cd "$work" && "$binary" list --config "$destination.toml" | grep -v uploaded >&2)
        exit 1
    fi
done
profile status put status
profile list put list --state uploaded
profile show put show "$(cd "$work" && "$binary" list --json --config put.toml | python3 -c \
    'import json, sys; print(json.load(sys.stdin)[0]["id"])')"
profile check put config check
.build-venv/bin/python contrib/release/callgrind-order.py .build/release/uploadq "$work"/*.callgrind \
    > "$work/uploadq.order"
# contrib/build-release.sh links again with a changed order.
mv "$work/uploadq.order" contrib/release/uploadq.order
echo "make-order: $(wc -l < contrib/release/uploadq.order) functions in contrib/release/uploadq.order;" \
    "contrib/build-release.sh links with it" >&2
