#!/usr/bin/env bash
# Installs what the benchmarks need on top of the test servers: GNU time, hyperfine, rclone, wrk, valgrind and perf from
# Debian, the tuspy client into the test virtualenv, and the release build of uploadq. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."
contrib/setup.sh time hyperfine rclone wrk valgrind
# perf counts the drains' context switches (small-files.sh); Debian's package (Ubuntu's perf comes with its kernel).
contrib/setup.sh linux-perf || echo "bench: no linux-perf package: small-files.sh does not count context switches" >&2
contrib/test-servers/setup.sh
.build-venv/bin/pip install --quiet --disable-pip-version-check -r contrib/bench/requirements.txt
contrib/build-release.sh >&2
