#!/usr/bin/env bash
# Checks a release binary against the function order (contrib/release/uploadq.order):
#
#   contrib/release/check-order.sh [BINARY]      (default: .build/release/uploadq)
#
# Fails when the binary was not linked with the order (the order's first 500 functions lie in the first quarter
# of the binary's code: all of them when it was, a fifth when not), or when the order has gone stale (fewer than
# 80 % of its names are functions of the binary). Then run contrib/release/make-order.sh and commit the order it
# writes.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
binary=${1:-$root/.build/release/uploadq}
[ -x "$binary" ] || { echo "check-order: no release binary at $binary (contrib/build-release.sh)" >&2; exit 1; }
text=$(readelf -SW "$binary" \
    | sed -nE 's/^ *\[ *[0-9]+\] \.text +PROGBITS +([0-9a-f]+) [0-9a-f]+ ([0-9a-f]+) .*/\1 \2/p')
[ -n "$text" ] || { echo "check-order: $binary has no .text section" >&2; exit 1; }
nm --defined-only "$binary" | python3 -c '
import sys
order_file, start, size = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
order = [line.strip() for line in open(order_file) if line.strip()]
if not order:
    sys.exit(f"check-order: {order_file} is empty: run contrib/release/make-order.sh")
address = {}
for line in sys.stdin:
    fields = line.split()
    if len(fields) == 3 and fields[1] in "tTwW":
        address.setdefault(fields[2], int(fields[0], 16))
placed = [address[name] - start for name in order if name in address]
named = len(placed) / len(order)
first = placed[:500]
front = sum(1 for offset in first if offset < size / 4) / max(len(first), 1)
print(f"check-order: {named:.0%} of the order names functions of the binary; "
      f"{front:.0%} of its first {len(first)} lie in the first quarter of the code")
if named < 0.8:
    sys.exit("check-order: the order is stale: run contrib/release/make-order.sh and commit "
             "contrib/release/uploadq.order")
if front < 0.9:
    sys.exit("check-order: the binary was not linked with the order: build it with contrib/build-release.sh "
             "(which needs ld.lld, from the Swift toolchain or the PATH)")
' "$root/contrib/release/uploadq.order" $text
