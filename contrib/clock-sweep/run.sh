#!/usr/bin/env bash
# The clock sweep: the test suite run with the wall clock of every process (the tests, the daemons and commands
# they start, the test servers) set by the clock shim to each instant of contrib/clock-sweep/instants.py, with TZ
# (and, in Berlin, LANG) set to match: the end and the start of a UTC day, 03:59 UTC, a Sunday night into Monday,
# the last day of a month, and both daylight-saving changes of Europe/Berlin. Every run must pass.
#
#   contrib/clock-sweep/run.sh                  # every suite at every instant (about 20 minutes)
#   contrib/clock-sweep/run.sh utc-0359         # one instant (names as instants.py prints them)
#   QUICK=1 contrib/clock-sweep/run.sh          # the suites of time's own rules at every instant (about 2
#                                               # minutes; contrib/run-tests.sh runs this)
#   SUITES='Retention|Budget' contrib/clock-sweep/run.sh   # a `swift test --filter` expression of your own
#
# Run the whole sweep before every submission that touches time: budgets, windows, timetables, retention ages,
# prune, history, clock steps, dates in names. The shim moves CLOCK_REALTIME, gettimeofday and time, not the
# kernel's file times: a test that compares a file's time with the clock needs an injected clock. The instants lie
# ahead of the real time, so file times are always in the shifted clock's past, as on a device.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The suites whose subject is time itself (windows and timetables through daylight saving time, budget periods,
# the times a waiting reason names, backoff and retry dates, the wall-clock watch and its rebase of due times), and
# the end-to-end tests of a metered budget, keep_for, archive folders by date and prune.
quick="UploadWindowTests|BandwidthTimetableTests|MeteredBudgetTests|WaitingHoldClockTests|SchedulerStateTests"
quick+="|QueueHoldsTests|WallClockWatchTests|HTTPDateTests|RetryPolicyTests|CircuitBreakerTests|JobLifecycleTests"
quick+="|StoreHealthTests|QueueStoreTests|IntakeTests|DeviceConstraintDaemonTests/meteredBudget"
quick+="|RetentionTests/(pruneCommand|pruneCancelledFiles|keepForAWhile|archiveAcrossFileSystems)"
if [ -n "${SUITES:-}" ]; then
    filter=(--filter "$SUITES")
elif [ -n "${QUICK:-}" ]; then
    filter=(--filter "$quick")
else
    filter=()
fi

contrib/setup.sh
contrib/test-servers/setup.sh
swift build --build-tests
shim="$PWD/.build-venv/libclockshift.so"
[ -f "$shim" ] || { echo "clock-sweep: $shim was not built" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/uploadq-clock-sweep-XXXXXX")
trap 'rm -rf "$work"' EXIT
# The real time: `date` here runs under no shim.
real_now() { env -u LD_PRELOAD date +%s.%N; }

failed=()
names=("$@")
[ "${#names[@]}" -gt 0 ] || mapfile -t names < <(.build-venv/bin/python contrib/clock-sweep/instants.py | cut -d' ' -f1)
for wanted in "${names[@]}"; do
    # Each instant is computed just before its run: a whole sweep takes long enough for one computed at its start
    # to have passed by the time its turn comes.
    read -r name zone epoch local < <(.build-venv/bin/python contrib/clock-sweep/instants.py "$wanted")
    offset="$work/$name.offset"
    # The servers start a minute before the instant; the tests start at it (at.sh moves the clock forwards to it).
    # In the C locale: the offset is written with a decimal point, whatever LANG the runs use.
    LC_ALL=C awk -v e="$epoch" -v n="$(real_now)" 'BEGIN { printf "%.3f\n", e - n - 60 }' > "$offset"
    # Foundation on Linux takes no locale from the environment today; C, Perl and Python code does.
    locale=C.UTF-8
    [ "$zone" = Europe/Berlin ] && locale=de_DE.UTF-8
    echo "=== clock-sweep: $name: $local ($zone, LANG=$locale)" >&2
    started=$(real_now)
    if env LD_PRELOAD="$shim" CLOCKSHIFT_FILE="$offset" TZ="$zone" LANG="$locale" \
        contrib/test-servers/run.sh contrib/clock-sweep/at.sh "$epoch" \
        swift test --skip-build --experimental-maximum-parallelization-width 6 "${filter[@]}" \
        < /dev/null > "$work/$name.log" 2>&1; then
        tests=$(grep -oE "Test run with [0-9]+ tests?" "$work/$name.log" | grep -oE "[0-9]+" || echo "?")
        echo "=== clock-sweep: $name: $tests tests passed" \
            "($(awk -v s="$started" -v n="$(real_now)" 'BEGIN { printf "%d", n - s }') s)" >&2
    else
        failed+=("$name")
        grep -E "✘|error:|Fatal" "$work/$name.log" | head -40 >&2 || true
        cp "$work/$name.log" "${TMPDIR:-/tmp}/uploadq-clock-sweep-$name.log"
        echo "=== clock-sweep: $name FAILED; the whole output: ${TMPDIR:-/tmp}/uploadq-clock-sweep-$name.log" >&2
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "clock-sweep: failed at ${failed[*]}" >&2
    exit 1
fi
echo "clock-sweep: every instant passed" >&2
