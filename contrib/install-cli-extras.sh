#!/usr/bin/env bash
# Installs uploadq's man page and shell completions, generated from the CLI definition itself (so they never
# drift from `uploadq --help`):
#
#   contrib/install-cli-extras.sh [PREFIX]      # default /usr/local
#     PREFIX/share/man/man1/uploadq.1
#     PREFIX/share/bash-completion/completions/uploadq
#     PREFIX/share/zsh/site-functions/_uploadq
#     PREFIX/share/fish/vendor_completions.d/uploadq.fish
#
# Uses $UPLOADQ_BINARY (default: builds the release binary) and swift-argument-parser's generate-manual tool
# (built here unless $GENERATE_MANUAL names it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
prefix=${1:-/usr/local}

binary=${UPLOADQ_BINARY:-}
if [ -z "$binary" ]; then
    swift build -c release --static-swift-stdlib --product uploadq >&2
    binary="$(swift build -c release --show-bin-path)/uploadq"
fi
manual=${GENERATE_MANUAL:-}
if [ -z "$manual" ]; then
    swift build -c release --product generate-manual >&2
    manual="$(swift build -c release --show-bin-path)/generate-manual"
fi

install -d "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$manual" "$binary" --authors "uploadq developers" --output-directory "$work"
install -m 0644 "$work/uploadq.1" "$prefix/share/man/man1/uploadq.1"
"$binary" --generate-completion-script bash > "$work/uploadq.bash"
"$binary" --generate-completion-script zsh > "$work/_uploadq"
"$binary" --generate-completion-script fish > "$work/uploadq.fish"
install -m 0644 "$work/uploadq.bash" "$prefix/share/bash-completion/completions/uploadq"
install -m 0644 "$work/_uploadq" "$prefix/share/zsh/site-functions/_uploadq"
install -m 0644 "$work/uploadq.fish" "$prefix/share/fish/vendor_completions.d/uploadq.fish"
echo "installed the man page and bash, zsh and fish completions under $prefix" >&2
