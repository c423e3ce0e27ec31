#!/usr/bin/env bash
# Builds the Debian package: contrib/package-deb.sh [OUTDIR]   (default: .build/deb)
#   OUTDIR/uploadq_VERSION_ARCH.deb
#
# Contents: the release binary (Swift runtime linked in) as /usr/bin/uploadq, /etc/uploadq/uploadq.toml as a
# conffile (contrib/systemd/uploadq.toml), the systemd unit, the man page and bash, zsh and fish completions
# (generated from the CLI definition), and the maintainer scripts of contrib/debian/. The version is the binary's
# own (`uploadq --version`, from UploadQueueVersion); the dependencies come from dpkg-shlibdeps.
#
# Uses $UPLOADQ_BINARY and $GENERATE_MANUAL when set (as contrib/install-cli-extras.sh does); otherwise builds
# both in release mode. Needs dpkg-deb and dpkg-shlibdeps (dpkg-dev); no root.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out=${1:-.build/deb}
mkdir -p "$out"
out="$(cd "$out" && pwd)"

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

version="$("$binary" --version)"
arch="$(dpkg --print-architecture)"
[[ "$version" =~ ^[0-9][0-9A-Za-z.+~]*$ ]] || { echo "package-deb: '$version' is not a Debian version" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tree="$work/tree"
install -d "$tree/DEBIAN" "$tree/usr/bin" "$tree/etc/uploadq" "$tree/lib/systemd/system" \
    "$tree/usr/share/doc/uploadq" "$tree/usr/share/lintian/overrides"

install -m 0755 "$binary" "$tree/usr/bin/uploadq"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$tree/usr/bin/uploadq"
install -m 0644 contrib/systemd/uploadq.toml "$tree/etc/uploadq/uploadq.toml"

# The unit as packaged: the binary in /usr/bin, and the droppers' group, which postinst creates.
unit="$tree/lib/systemd/system/uploadq.service"
sed -e 's|/usr/local/bin/uploadq|/usr/bin/uploadq|' \
    -e 's|^# SupplementaryGroups=uploadq-drop .*$|SupplementaryGroups=uploadq-drop|' \
    contrib/systemd/uploadq.service > "$unit"
chmod 0644 "$unit"
grep -q '^ExecStart=/usr/bin/uploadq daemon' "$unit" && grep -q '^SupplementaryGroups=uploadq-drop$' "$unit" \
    || { echo "package-deb: contrib/systemd/uploadq.service changed: ExecStart or SupplementaryGroups not found" >&2; exit 1; }

# The man page and the completions, from the CLI definition; zsh's go where Debian's zsh looks for packages'.
UPLOADQ_BINARY="$binary" GENERATE_MANUAL="$manual" contrib/install-cli-extras.sh "$tree/usr" 2>/dev/null
# bash-completion sources its files: no `#!` line.
sed -i '1{/^#!/d}' "$tree/usr/share/bash-completion/completions/uploadq"
install -d "$tree/usr/share/zsh/vendor-completions"
mv "$tree/usr/share/zsh/site-functions/_uploadq" "$tree/usr/share/zsh/vendor-completions/_uploadq"
rmdir "$tree/usr/share/zsh/site-functions"
gzip -9n "$tree"/usr/share/man/man1/*.1 "$tree"/usr/share/man/man5/*.5

install -m 0644 contrib/debian/copyright "$tree/usr/share/doc/uploadq/copyright"
sed -e "s|@VERSION@|$version|" -e "s|@DATE@|$(date -R -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")|" \
    contrib/debian/changelog | gzip -9n > "$tree/usr/share/doc/uploadq/changelog.gz"
chmod 0644 "$tree/usr/share/doc/uploadq/changelog.gz"
install -m 0644 contrib/debian/lintian-overrides "$tree/usr/share/lintian/overrides/uploadq"

# Dependencies of the binary's shared libraries, as dpkg-shlibdeps finds them (it reads debian/control).
install -d "$work/debian"
printf 'Source: uploadq\n\nPackage: uploadq\nArchitecture: any\n' > "$work/debian/control"
depends="$(cd "$work" && dpkg-shlibdeps -O --warnings=0 tree/usr/bin/uploadq | sed -n 's/^shlibs:Depends=//p')"
[ -n "$depends" ] || { echo "package-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
# The packed relocations of contrib/build-release.sh need glibc 2.36 (the version GLIBC_ABI_DT_RELR), which
# dpkg-shlibdeps does not count.
if readelf -V "$binary" | grep GLIBC_ABI_DT_RELR > /dev/null; then
    depends="$(printf '%s' "$depends" | sed -E 's/libc6 \(>= 2\.([0-9]|[12][0-9]|3[0-5])(\.[0-9]+)?\)/libc6 (>= 2.36)/')"
    [[ "$depends" == *"libc6 (>= 2.36)"* || "$depends" =~ libc6\ \(\>=\ 2\.(3[6-9]|[4-9][0-9]) ]] \
        || { echo "package-deb: no libc6 dependency to raise to 2.36 in: $depends" >&2; exit 1; }
fi

install -m 0644 contrib/debian/conffiles "$tree/DEBIAN/conffiles"
install -m 0755 contrib/debian/postinst contrib/debian/prerm contrib/debian/postrm "$tree/DEBIAN/"
size="$(du -k -s --exclude=DEBIAN "$tree" | cut -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
    contrib/debian/control.in > "$tree/DEBIAN/control"
(cd "$tree" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum) \
    > "$tree/DEBIAN/md5sums"
chmod 0644 "$tree/DEBIAN/md5sums"

deb="$out/uploadq_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$tree" "$deb" >&2
echo "$deb"
