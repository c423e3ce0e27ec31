#!/usr/bin/env bash
# Installs what the integration tests need: nginx (its DAV module serves PUT), curl and openssl from Debian,
# and the Python test servers (tuspyserver on uvicorn) into a virtualenv at .build-venv/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(nginx curl openssl)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    # policy-rc.d or not, the packaged nginx service is not needed: the tests start their own.
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv=.build-venv
requirements=contrib/test-servers/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.installed"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
fi
