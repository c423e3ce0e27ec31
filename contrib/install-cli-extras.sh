#!/usr/bin/env bash
# Installs uploadq's man pages and shell completions, generated from the CLI definition and the config's key table
# (so they never drift from `uploadq --help` and what the loader reads):
#
#   contrib/install-cli-extras.sh [PREFIX]      # default /usr/local
#     PREFIX/share/man/man1/uploadq.1           (every command), uploadq-COMMAND.1 (one per subcommand)
#     PREFIX/share/man/man5/uploadq.toml.5      (every config key: `uploadq config reference --man`)
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
    contrib/build-release.sh >&2
    binary="$(swift build -c release --show-bin-path)/uploadq"
fi
manual=${GENERATE_MANUAL:-}
if [ -z "$manual" ]; then
    contrib/build-release.sh --product generate-manual >&2
    manual="$(swift build -c release --show-bin-path)/generate-manual"
fi

install -d "$prefix/share/man/man1" "$prefix/share/man/man5" "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$manual" "$binary" --authors "uploadq developers" --output-directory "$work"
install -m 0644 "$work/uploadq.1" "$prefix/share/man/man1/uploadq.1"
# One page per subcommand, named as git's are (uploadq-config-check.1, whose NAME is uploadq-config-check so that
# whatis finds it, and whose synopsis reads `uploadq config check`); `help` is not a command of its own.
mkdir "$work/pages"
"$manual" "$binary" --multi-page --authors "uploadq developers" --output-directory "$work/pages"
for page in "$work"/pages/uploadq.*.1; do
    name="$(basename "$page" .1)"
    [ "$name" = uploadq.help ] && continue
    dashed="${name//./-}"
    words="${name#uploadq.}"
    awk -v dashed="$dashed" -v words="${words//./ }" '
        /^\.Xr uploadq\.help 1/ { next }
        /^\.Xr uploadq\./ { sub(/^\.Xr /, ""); split($0, parts, " "); gsub(/\./, "-", parts[1]);
                             $0 = ".Xr " parts[1] substr($0, length(parts[1]) + 1) }
        /^\.Dt / { $0 = ".Dt " toupper(dashed) " 1" }
        /^\.Nm "/ { $0 = ".Nm " dashed }
        /^\.Nm$/ { print ".Nm uploadq"; $0 = ".Cm " words }
        { print }' "$page" > "$work/page"
    install -m 0644 "$work/page" "$prefix/share/man/man1/$dashed.1"
done
"$binary" config reference --man > "$work/uploadq.toml.5"
install -m 0644 "$work/uploadq.toml.5" "$prefix/share/man/man5/uploadq.toml.5"
"$binary" --generate-completion-script bash > "$work/uploadq.bash"
"$binary" --generate-completion-script zsh > "$work/_uploadq"
"$binary" --generate-completion-script fish > "$work/uploadq.fish"
install -m 0644 "$work/uploadq.bash" "$prefix/share/bash-completion/completions/uploadq"
install -m 0644 "$work/_uploadq" "$prefix/share/zsh/site-functions/_uploadq"
install -m 0644 "$work/uploadq.fish" "$prefix/share/fish/vendor_completions.d/uploadq.fish"
echo "installed the man pages and bash, zsh and fish completions under $prefix" >&2
