#!/usr/bin/env bash
# Installs what uploadq needs to build and test on Debian/Ubuntu with Swift already installed, plus any extra
# Debian packages named as arguments (contrib/test-servers/setup.sh adds the test servers' ones).
# Safe to run again: only what is missing is installed.
set -euo pipefail

packages=(libmagic-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev pkg-config "$@")
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v swift >/dev/null || { echo "setup: swift is not on PATH (install Swift 6 first)" >&2; exit 1; }
