#!/usr/bin/env bash
# Chaos harness: kills the uploadq daemon with SIGKILL at random moments while it uploads a mixed workload to
# tus, S3 and a local directory through a connection-resetting proxy, then checks every file on its server.
#
#   contrib/chaos/run.sh                          # the full run: 100 files up to 64 MiB, 50 kills (release build)
#   KILLS=5 FILES=24 MAX_MIB=12 contrib/chaos/run.sh   # the short run CI does
#
# See contrib/chaos/chaos.py for the settings. Starts its own servers (contrib/test-servers/run.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if [ -z "${UPLOADQ_TEST_PROXY_CONTROL:-}" ]; then
    contrib/setup.sh
    contrib/test-servers/setup.sh
    if [ -z "${UPLOADQ_BINARY:-}" ]; then
        swift build -c release --static-swift-stdlib --product uploadq >&2
        export UPLOADQ_BINARY="$root/.build/release/uploadq"
    fi
    exec contrib/test-servers/run.sh "$0" "$@"
fi
exec "$root/.build-venv/bin/python" "$root/contrib/chaos/chaos.py"
