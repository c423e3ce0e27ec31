#!/usr/bin/env bash
# Chaos harness: kills the uploadq daemon with SIGKILL at random moments while it uploads a mixed workload to
# tus, S3 and a local directory through a connection-resetting proxy, then checks every file on its server.
#
#   contrib/chaos/run.sh                          # the full run: 100 files up to 64 MiB, 50 kills (release build)
#   KILLS=5 FILES=24 MAX_MIB=12 contrib/chaos/run.sh   # the short run CI does
#
# See contrib/chaos/chaos.py for the settings. Starts its own servers (contrib/test-servers/run.sh).
exec "$(dirname "$0")/../test-servers/harness.sh" "$(cd "$(dirname "$0")" && pwd)/chaos.py"
