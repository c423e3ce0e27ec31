#!/usr/bin/env bash
# Installs what the integration tests need: nginx (its DAV module serves PUT), curl, openssl and lintian from Debian,
# and the Python test servers (tuspyserver on uvicorn) into a virtualenv at .build-venv/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."

extra=(nginx curl openssl lintian dpkg-dev adduser procps locales fuse3 python3-pyfuse3 python3-trio strace)
# The Debian package and its tests: lintian, dpkg-shlibdeps, the package's own dependency adduser; pgrep and pkill
# for the hook tests; a German locale for the clock sweep; FUSE and pyfuse3 for the power-cut file system
# (contrib/powercut, run with the system's Python: /usr/bin/python3); strace to count the daemon's madvise calls
command -v ip > /dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || extra+=(iproute2)   # network namespaces
python3 -c 'import venv, ensurepip' 2>/dev/null || extra+=(python3-venv)
command -v gcc > /dev/null || extra+=(gcc libc6-dev)   # the clock-step shim
# The packaged nginx service is not needed (policy-rc.d may refuse to start it): the tests start their own.
contrib/setup.sh "${extra[@]}"

venv=.build-venv
requirements=contrib/test-servers/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.installed"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
fi

# swift-nio-extras' NIOResumableUpload as a second, independent RUFH server (interop 6), test-only: built here,
# never part of the product. A debug build: the tests send it a few MiB, and it builds in half the time of a release
# one (about 70 s on 2 cores the first time, against 120 s; incremental afterwards).
swift build --package-path contrib/nio-rufh-server 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -2
[ -x contrib/nio-rufh-server/.build/debug/nio-rufh-server ] \
    || { echo "test-servers: contrib/nio-rufh-server did not build" >&2; exit 1; }

# The clock sweep runs its Berlin instants under de_DE.UTF-8 (contrib/clock-sweep/run.sh).
if ! locale -a 2>/dev/null | grep -qi '^de_DE\.utf-\?8$'; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo localedef -i de_DE -f UTF-8 de_DE.UTF-8
fi

# The clock-step shim (LD_PRELOAD; see clockshift.c), rebuilt when its source changes.
shim=$venv/libclockshift.so
if [ ! -f "$shim" ] || [ contrib/test-servers/clockshift.c -nt "$shim" ]; then
    gcc -shared -fPIC -O2 -Wall -o "$shim" contrib/test-servers/clockshift.c -ldl
fi

# Droppers as real users (the spool's trust tests): uq-alice and uq-bob, both in the group uq-droppers, as two
# strangers in an admin's uploadq-drop group. No home, no login; they only write into test spools.
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
getent group uq-droppers > /dev/null || $sudo groupadd --system uq-droppers
for dropper in uq-alice uq-bob; do
    id -u "$dropper" > /dev/null 2>&1 \
        || $sudo useradd --system --no-create-home --gid uq-droppers --shell /usr/sbin/nologin "$dropper"
done
