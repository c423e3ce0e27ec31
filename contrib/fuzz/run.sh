#!/usr/bin/env bash
# Builds the libFuzzer targets under Tests/Fuzz/ against an instrumented debug build of the UploadQueue module
# (`swiftc -sanitize=fuzzer,address`), then runs each for SECONDS on a copy of its seed corpus, two at a time
# (PARALLEL=1 for one at a time).
#
#   contrib/fuzz/run.sh 15                    # every target, 15 s each (what contrib/run-tests.sh runs)
#   contrib/fuzz/run.sh 1800 Sidecar S3XML    # some targets, 30 minutes each
#
# A target that crashes, hangs (over 10 s on one input) or runs out of memory (2 GiB) fails the run; its input is
# kept as .build-fuzz/findings/TARGET/crash-… (add it to Tests/Fuzz/corpus/TARGET/ with the fix, and to a test).
# Prints, per target: executions, coverage and corpus size.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
seconds=${1:-30}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=()
    for file in Tests/Fuzz/*.swift; do
        name=$(basename "$file" .swift)
        [ "$name" = FuzzInput ] || targets+=("$name")
    done
fi
build=.build-fuzz
flags=(-Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing)
swift build --build-path "$build" -c debug --target UploadQueue "${flags[@]}" 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -3
modules="$build/debug/Modules"
[ -d "$modules" ] || modules="$build/debug"
# Every object of the module and its dependencies (not the executable's, not the tests', not plugins').
mapfile -t found < <(find "$build/debug/" -path "*.build/*.o" \
    -not -path "*/uploadq.build/*" -not -path "*/UploadQueueTests.build/*" -not -path "*Plugin*" \
    -not -path "*/plugins/*" -not -path "*/GenerateManual*" -not -path "*/GenerateDocc*" | sort)
# Only those of the sources there are now: a renamed or removed Swift file leaves its old object behind, which
# would define its symbols twice. A Swift module's output-file-map.json names its current objects.
objects=()
for object in "${found[@]}"; do
    map="$(dirname "$object")/output-file-map.json"
    if [ -f "$map" ] && ! grep -qF "/$(basename "$object")\"" "$map"; then continue; fi
    objects+=("$object")
done
# The C modules the UploadQueue module imports, directly or through its dependencies (swift-nio's and
# swift-atomics' among them), by their module maps: our own, those SwiftPM generated for C targets, and those
# the dependencies ship.
includes=()
maps=(Sources/CCurl/module.modulemap Sources/CMagic/module.modulemap
    "$build/debug/CCurlShim.build/module.modulemap" "$build/debug/CUploadQueueSystem.build/module.modulemap"
    "$build/checkouts/GRDB.swift/Sources/GRDBSQLite/module.modulemap"
    "$build/checkouts/swift-atomics/Sources/_AtomicsShims/include/module.modulemap"
    "$build/checkouts/swift-nio/Sources/CNIOWindows/include/module.modulemap")
mapfile -t generated < <(find "$build/debug/" -maxdepth 2 -path "*/CNIO*.build/module.modulemap" | sort)
for map in "${maps[@]}" "${generated[@]}"; do
    [ -f "$map" ] || { echo "fuzz: no module map $map" >&2; exit 1; }
    includes+=(-Xcc "-fmodule-map-file=$map")
done
for dir in Sources/CCurlShim/include Sources/CUploadQueueSystem/include; do includes+=(-Xcc "-I$dir"); done
mkdir -p "$build/findings"
# One target: its binary, its corpus (a copy of the seeds), its run. The verdict goes to $build/findings/TARGET.line
# (printed in the targets' order at the end); a run that stops half-way (set -e) leaves "FAILED" there.
fuzz() {
    local target=$1 binary corpus log runs cov verdict
    verdict="$build/findings/$target.line"
    echo "fuzz: $target FAILED (stopped before its run ended)" > "$verdict"
    binary="$build/fuzz-$target"
    swiftc -sanitize=fuzzer,address -parse-as-library -g -I "$modules" "${includes[@]}" \
        -I "$build/debug" Tests/Fuzz/FuzzInput.swift "Tests/Fuzz/$target.swift" "${objects[@]}" \
        -lcurl -lmagic -lcrypto -lsqlite3 -o "$binary" 2>&1 | grep -v "Cannot export local symbol" || true
    [ -x "$binary" ] || { echo "fuzz: $target did not build" > "$verdict"; return; }
    corpus="$build/corpus/$target"
    mkdir -p "$corpus" "$build/findings/$target"
    [ -d "Tests/Fuzz/corpus/$target" ] && cp -n Tests/Fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
    log="$build/findings/$target.log"
    if SWIFT_BACKTRACE=enable=no "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/findings/$target/" "$corpus" > "$log" 2>&1; then
        runs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}')
        cov=$(grep -E "^#[0-9]+.*DONE" "$log" | tail -1 | grep -oE "cov: [0-9]+" || true)
        echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, ${cov:-cov ?}, corpus $(ls "$corpus" | wc -l) inputs" \
            > "$verdict"
    else
        { echo "fuzz: $target FAILED; input kept in $build/findings/$target/:"
          grep -E "ERROR|==|Fatal error|Precondition|SUMMARY|artifact" "$log" | head -20; } > "$verdict"
    fi
}
# Two targets at once (PARALLEL): one fuzzer process each, one per core of a CI machine.
parallel=${PARALLEL:-2}
for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
    fuzz "$target" &
done
wait
failed=0
for target in "${targets[@]}"; do
    line="$build/findings/$target.line"
    if grep -q "FAILED\|did not build" "$line"; then
        cat "$line" >&2
        failed=1
    else
        cat "$line"
    fi
done
exit $failed
