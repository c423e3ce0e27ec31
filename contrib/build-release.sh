#!/usr/bin/env bash
# The release build, one way for everything that makes it (contrib/run-daemon.sh, the Debian package, the harnesses,
# the benchmarks): contrib/build-release.sh [swift build arguments]   (default: --product uploadq)
#
# - The Swift runtime is linked in statically: one file to install, and less resident memory than shared libraries.
# - Full RELRO (`-z now`): the GOT is read-only once the daemon runs.
# - Linked by lld with the functions the daemon runs placed together, in the order of
#   contrib/release/uploadq.order (made by contrib/release/make-order.sh). The kernel maps a binary's pages in
#   64 KiB windows around each one touched; the functions a run needs lie scattered over 24 MiB of code, so
#   nearly all of it was resident. Together (every function in a section of its own, `-function-sections`), an
#   idle daemon is 38 MiB resident instead of 46. The relative relocations are packed (`-z pack-relative-relocs`,
#   glibc 2.36): 20 KiB instead of 2.5 MiB read at every start. No symbol is exported (`--no-export-dynamic`):
#   nothing loads the executable's symbols, and the dynamic loader searched their 2 MiB table for every symbol
#   of every library it bound.
# Every product of .build/release is built with the same flags, or switching between them would compile all again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ "$#" -gt 0 ] || set -- --product uploadq
flags=(-c release --static-swift-stdlib -Xlinker -z -Xlinker now)
swiftc_dir="$(dirname "$(readlink -f "$(command -v swiftc)")")"
if [ -x "$swiftc_dir/ld.lld" ]; then
    flags+=(-Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xswiftc -use-ld=lld
        -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic
        -Xlinker "--symbol-ordering-file=$root/contrib/release/uploadq.order" -Xlinker --no-warn-symbol-ordering)
else
    echo "build-release: no ld.lld beside $swiftc_dir/swiftc: linked by the system linker without the function" \
        "order (the daemon is about 9 MiB more resident)" >&2
fi
exec swift build "${flags[@]}" "$@"
