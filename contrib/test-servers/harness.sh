#!/usr/bin/env bash
# Runs a Python harness of ours (contrib/chaos/chaos.py, contrib/soak/soak.py) against the test servers: installs
# what is missing and builds the release binary unless UPLOADQ_BINARY names one, starts the servers through
# contrib/test-servers/run.sh (unless already inside a run), then the harness with the test virtualenv's Python.
# Usage: contrib/test-servers/harness.sh HARNESS.py
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if [ -z "${UPLOADQ_TEST_PROXY_CONTROL:-}" ]; then
    contrib/setup.sh
    contrib/test-servers/setup.sh
    if [ -z "${UPLOADQ_BINARY:-}" ]; then
        contrib/build-release.sh >&2
        export UPLOADQ_BINARY="$root/.build/release/uploadq"
    fi
    exec contrib/test-servers/run.sh "$0" "$@"
fi
exec "$root/.build-venv/bin/python" "$1"
