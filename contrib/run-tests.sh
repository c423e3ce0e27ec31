#!/usr/bin/env bash
# The test command: installs dependencies (apt packages, nginx, the Python test servers in .build-venv/), builds
# everything (library, uploadq binary, tests, the Debian package) and runs the whole suite with the test servers
# started on loopback, including the end-to-end tests that drive the real binary and install the package into a
# throwaway root, then a short chaos run (random kill -9 of the daemon
# during mixed uploads; the full run is contrib/chaos/run.sh) and a short field-life soak (spool bursts, link flaps,
# kills, a full state disk, a clock step; the full run is contrib/soak/run.sh), and each libFuzzer target for 15 s
# (contrib/fuzz/run.sh), the time suites at seven instants of the wall clock (contrib/clock-sweep/run.sh), and 12
# power cuts on a FUSE file system that keeps only what was fsynced (contrib/powercut/run.sh).
# Arguments go to `swift test` (and skip the sweep, chaos, soak and fuzz runs, as when running one suite).
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
contrib/test-servers/setup.sh
swift build --build-tests
swift build --product generate-manual   # the man page test runs contrib/install-cli-extras.sh with it
# The Debian package (a release build, about 4 minutes the first time) for DebianPackageTests.
GENERATE_MANUAL="$PWD/.build/debug/generate-manual" contrib/package-deb.sh .build/deb
# That release binary was linked with the function order, and the order still names most of its functions.
contrib/release/check-order.sh
test -x .build/debug/uploadq || { echo "run-tests: .build/debug/uploadq was not built" >&2; exit 1; }
if [ "$#" -gt 0 ]; then
    contrib/test-servers/run.sh swift test --skip-build "$@"
else
    # The suites that load the machine most (lintian and a package installed into a throwaway root; hundreds of
    # uploads timed against a stalled event reader; daemons running hooks that hang or flood; the doctor's probes;
    # droppers hashing gigabytes; power cuts swept fsync by fsync on FUSE) run on their own after the others, so that
    # neither skews the timing of the other.
    heavy="DebianPackageTests|EventTests|HookTests|DoctorTests|DropperTests|DropperLimitsTests|PowerCut"
    # At most 6 tests at once: unbounded, all ~360 start together on 2 cores, writing and deleting hundreds of MiB
    # at once, and now and then the whole test process stood still for tens of seconds, past the timing tests'
    # bounds. Six keeps the run about as short (170-185 s against 145 s).
    contrib/test-servers/run.sh swift test --skip-build --experimental-maximum-parallelization-width 6 --skip "$heavy"
    contrib/test-servers/run.sh swift test --skip-build --filter "$heavy"
fi
if [ "$#" -eq 0 ]; then
    # The README's first run: contrib/run-daemon.sh, a photo dropped into the spool, status and list (about 20 s
    # on the release build the package made).
    contrib/first-run.sh
    # The suites of time's own rules (windows, timetables, budgets, waiting texts, the clock-step watch, keep_for,
    # prune) again with every process's wall clock at seven instants: a day's end and start, 03:59 UTC, Sunday into
    # Monday, a month's end, both daylight-saving changes (about 2 minutes; every suite at each, about 20 minutes:
    # contrib/clock-sweep/run.sh).
    QUICK=1 contrib/clock-sweep/run.sh
    KILLS=6 PORTALS=1 FILES=24 MAX_MIB=12 BANDWIDTH_MIB=6 UPLOADQ_BINARY="$PWD/.build/debug/uploadq" contrib/chaos/run.sh
    # Power cuts: 12 lives on powercutfs, the first sites of a new queue among them, then the invariants (about a
    # minute; every fsync site and 350 cuts: contrib/powercut/run.sh).
    CUTS=12 EPOCH=25 UPLOADQ_BINARY="$PWD/.build/debug/uploadq" contrib/powercut/run.sh
    SHORT=1 UPLOADQ_BINARY="$PWD/.build/debug/uploadq" contrib/soak/run.sh
    # Every fuzz target for 15 s on its seed corpus (the findings so far are in it), two at a time; longer:
    # contrib/fuzz/run.sh.
    contrib/fuzz/run.sh 15
fi
