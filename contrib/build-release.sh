#!/usr/bin/env bash
# The release build, one way for everything that makes it (contrib/run-daemon.sh, the Debian package, the harnesses,
# the benchmarks): contrib/build-release.sh [swift build arguments]   (default: --product uploadq)
#
# - The Swift runtime is linked in statically: one file to install, and less resident memory than shared libraries.
# - Full RELRO (`-z now`): the GOT is read-only once the daemon runs.
# - Linked by lld with the functions the daemon runs placed together, in the order of
#   contrib/release/uploadq.order (made by contrib/release/make-order.sh). The kernel maps a binary's pages in
#   windows around each one touched; the functions a run needs lay scattered over 24 MiB of code, so nearly all of
#   it was resident. Together (every function in a section of its own, `-function-sections`), an idle daemon is
#   about 38 MiB resident instead of 46–48. No symbol is exported (`--no-export-dynamic`): nothing looks the
#   executable's symbols up, and the dynamic loader searched their 2 MiB table for every symbol of every library it
#   bound.
# - With glibc 2.36 or later, the relative relocations are packed (`-z pack-relative-relocs`): 20 KiB instead of
#   2.5 MiB read at every start. The binary then needs glibc 2.36 (the package says so).
# Every product of .build/release is built with the same flags, or switching between them would compile all again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ "$#" -gt 0 ] || set -- --product uploadq
flags=(-c release --static-swift-stdlib -Xlinker -z -Xlinker now)
# The toolchain's own lld (clang, which links, looks there first), or one on the PATH.
resources=$(swiftc -print-target-info | sed -n 's/.*"runtimeResourcePath": "\(.*\)".*/\1/p')
order="$root/contrib/release/uploadq.order"
if [ -x "$resources/../../bin/ld.lld" ] || command -v ld.lld > /dev/null; then
    flags+=(-Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xswiftc -use-ld=lld
        -Xlinker --no-export-dynamic
        -Xlinker "--symbol-ordering-file=$order" -Xlinker --no-warn-symbol-ordering)
    glibc=$(getconf GNU_LIBC_VERSION 2> /dev/null | sed -n 's/^glibc 2\.\([0-9]*\).*/\1/p') || glibc=0
    if [ "${glibc:-0}" -ge 36 ]; then flags+=(-Xlinker -z -Xlinker pack-relative-relocs); fi
    # SwiftPM does not know the order as an input: a binary linked with another order is linked again.
    stamp=".build/release-order.sha256"
    if [ "$(cat "$stamp" 2> /dev/null)" != "$(sha256sum < "$order")" ]; then
        rm -f .build/release/uploadq
    fi
    swift build "${flags[@]}" "$@"
    sha256sum < "$order" > "$stamp"
else
    echo "build-release: no ld.lld in the Swift toolchain nor on the PATH: linked by the system linker, without the" \
        "function order (an idle daemon is about 9 MiB more resident; contrib/release/check-order.sh fails)" >&2
    swift build "${flags[@]}" "$@"
fi
