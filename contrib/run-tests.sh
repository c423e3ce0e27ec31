#!/usr/bin/env bash
# The test command: installs dependencies, builds everything (library, uploadq binary, tests) and runs the
# whole suite, including the end-to-end tests that drive the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
swift build --build-tests
test -x .build/debug/uploadq || { echo "run-tests: .build/debug/uploadq was not built" >&2; exit 1; }
swift test --skip-build "$@"
