#!/usr/bin/env bash
# Installs what the integration tests need: nginx (its DAV module serves PUT), curl and openssl from Debian,
# and the Python test servers (tuspyserver on uvicorn) into a virtualenv at .build-venv/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."

extra=(nginx curl openssl)
command -v ip > /dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || extra+=(iproute2)   # network namespaces
python3 -c 'import venv, ensurepip' 2>/dev/null || extra+=(python3-venv)
# The packaged nginx service is not needed (policy-rc.d may refuse to start it): the tests start their own.
contrib/setup.sh "${extra[@]}"

venv=.build-venv
requirements=contrib/test-servers/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.installed"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
fi
