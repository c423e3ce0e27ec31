#!/usr/bin/env bash
# Power-cut harness: the state directory, the spool, move and reference sources, the local target and the archive
# on powercutfs, a FUSE file system that keeps only what was fsynced (names only once their directory was), cut at
# every fsync site of uploadq and SQLite and at random moments, then drained and checked.
#
#   contrib/powercut/run.sh                 # the full run: CUTS=350, 200 and more at random moments (release build)
#   CUTS=12 contrib/powercut/run.sh         # the short run of the test command
#
# See contrib/powercut/powercut.py for the settings and the invariants. Needs root (FUSE with allow_other) and
# Debian's fuse3, python3-pyfuse3 and python3-trio (contrib/test-servers/setup.sh installs them).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "powercut: needs root (a FUSE mount that the daemon and the harness share)" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "powercut: /dev/fuse is missing" >&2; exit 1; }
/usr/bin/python3 -c 'import pyfuse3, trio' \
    || { echo "powercut: /usr/bin/python3 lacks pyfuse3 or trio (apt install python3-pyfuse3 python3-trio)" >&2; exit 1; }
command -v fusermount3 > /dev/null || { echo "powercut: fusermount3 is missing (apt install fuse3)" >&2; exit 1; }
mkdir -p "$root/.build/powercut"
cc -shared -fPIC -O2 -o "$root/.build/powercut/syncfs-shim.so" "$root/contrib/powercut/syncfs-shim.c" -ldl
export CUTS="${CUTS:-350}"
exec "$root/contrib/test-servers/harness.sh" "$root/contrib/powercut/powercut.py"
