#!/usr/bin/env bash
# Soak harness: a month of a field device in well under an hour. Photos dropped into the spool in bursts for a
# local folder, tus and S3 (through a fault proxy with resets and 503 windows), while the link flaps between
# unmetered, metered and offline, the daemon is killed with SIGKILL, its state tmpfs is filled up and the wall clock
# steps back an hour; then every photo is checked on its server, and the state size, the daemon's RSS and
# descriptors, the bytes sent on a metered link and the database size before and after a prune are reported.
#
#   contrib/soak/run.sh                           # the full run: 20000 photos of 50 KiB-8 MiB, 30 kills (release build)
#   SHORT=1 UPLOADQ_BINARY=.build/debug/uploadq contrib/soak/run.sh   # the short run CI does (400 photos, 4 kills)
#
# See contrib/soak/soak.py for the settings (every one an environment variable). Starts its own servers
# (contrib/test-servers/run.sh) and mounts a tmpfs for the daemon's state, so it runs as root.
exec "$(dirname "$0")/../test-servers/harness.sh" "$(cd "$(dirname "$0")" && pwd)/soak.py"
