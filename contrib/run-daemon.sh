#!/usr/bin/env bash
# The main job: installs dependencies, builds uploadq and runs the daemon in the foreground on the
# default config (./Config/uploadq.toml: drop files into Config/spool/, they arrive in Config/uploaded/).
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
swift build -c release --product uploadq
exec .build/release/uploadq daemon "$@"
