#!/usr/bin/env bash
# The main job: installs dependencies, builds uploadq and runs the daemon in the foreground on the
# default config (./Config/uploadq.toml: drop files into Config/spool/, they arrive in Config/uploaded/).
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
# The release build the Debian package makes too (the Swift runtime linked in, full RELRO, the functions the daemon
# runs placed together): the two share it.
contrib/build-release.sh
exec .build/release/uploadq daemon "$@"
