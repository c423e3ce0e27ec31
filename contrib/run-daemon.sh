#!/usr/bin/env bash
# The main job: installs dependencies, builds uploadq and runs the daemon in the foreground on the
# default config (./Config/uploadq.toml: drop files into Config/spool/, they arrive in Config/uploaded/).
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
# The Swift runtime is linked in statically: one file to install, and less resident memory than shared libraries.
# Full RELRO (`-z now`), as the Debian package builds it: the two share one release build.
swift build -c release --static-swift-stdlib -Xlinker -z -Xlinker now --product uploadq
exec .build/release/uploadq daemon "$@"
