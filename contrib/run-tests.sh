#!/usr/bin/env bash
# The test command: installs dependencies (apt packages, nginx, the Python test servers in .build-venv/), builds
# everything (library, uploadq binary, tests) and runs the whole suite with the test servers started on loopback,
# including the end-to-end tests that drive the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
contrib/test-servers/setup.sh
swift build --build-tests
test -x .build/debug/uploadq || { echo "run-tests: .build/debug/uploadq was not built" >&2; exit 1; }
contrib/test-servers/run.sh swift test --skip-build "$@"
