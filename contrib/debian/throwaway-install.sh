#!/usr/bin/env bash
# Installs a built uploadq .deb into a throwaway root and reports what it finds, one `key=value` per line, for the
# package test (Tests/UploadQueueTests/DebianPackageTests.swift):
#
#   contrib/debian/throwaway-install.sh uploadq_VERSION_ARCH.deb
#
# The throwaway root is this machine's own root file system under an overlay whose upper layer is a tmpfs, in a
# mount namespace of its own: dpkg, adduser and systemd's tools run for real (postinst creates users in the
# copy's /etc/passwd), and nothing reaches the real system. It then drops a file as a dropper, runs the daemon as
# the uploadq user on the packaged config until the queue is idle, removes the package (the queue is kept) and
# purges it (the queue is deleted, uploaded files are kept). Needs root.
set -euo pipefail
deb="$(realpath "$1")"
[ "$(id -u)" -eq 0 ] || { echo "throwaway-install: needs root (overlay mounts, chroot)" >&2; exit 1; }
[ -f "$deb" ] || { echo "throwaway-install: no package at $deb" >&2; exit 1; }

scratch="$(mktemp -d)"
cleanup() { umount -l "$scratch" 2>/dev/null || true; rmdir "$scratch" 2>/dev/null || true; }
trap cleanup EXIT
mount -t tmpfs -o size=512m tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
cp "$deb" "$scratch/upper.deb"

unshare --mount --propagation private bash -s "$scratch" <<'INNER'
set -euo pipefail
scratch=$1
root=$scratch/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
mount --bind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount -t tmpfs tmpfs "$root/run"     # no /run/systemd/system: a machine without systemd running
mount -t tmpfs tmpfs "$root/tmp"
cp "$scratch/upper.deb" "$root/tmp/uploadq.deb"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
say() { printf '%s=%s\n' "$1" "$2"; }

# Whatever an earlier install left in the lower layer would hide what this package does.
if in_root dpkg-query -W uploadq >/dev/null 2>&1; then echo "throwaway-install: uploadq is installed on this machine" >&2; exit 1; fi

in_root dpkg -i /tmp/uploadq.deb > "$scratch/dpkg-install.log" 2>&1 || { cat "$scratch/dpkg-install.log" >&2; exit 1; }
say installed "$(in_root dpkg-query -W -f '${Version} ${Status}' uploadq)"
say conffiles "$(in_root dpkg-query -W -f '${Conffiles}' uploadq | awk '{print $1}' | tr '\n' ' ')"
for path in /usr/bin/uploadq /etc/uploadq/uploadq.toml /lib/systemd/system/uploadq.service /var/lib/uploadq \
            /var/spool/uploadq /usr/share/man/man1/uploadq.1.gz /usr/share/man/man5/uploadq.toml.5.gz \
            /usr/share/man/man1/uploadq-status.1.gz /usr/share/bash-completion/completions/uploadq \
            /usr/share/zsh/vendor-completions/_uploadq /usr/share/fish/vendor_completions.d/uploadq.fish \
            /usr/share/doc/uploadq/copyright; do
    say "stat:$path" "$(in_root stat -c '%a %U %G %F' "$path" 2>/dev/null || echo missing)"
done
say user "$(in_root getent passwd uploadq || echo missing)"
say group "$(in_root getent group uploadq-drop || echo missing)"
say enabled "$(readlink "$root/etc/systemd/system/multi-user.target.wants/uploadq.service" || echo no)"
# Without systemd running, the unit is enabled but nothing is started: no uploadq runs inside the root.
running=0
for pid in $(pgrep -x uploadq || true); do [ "$(readlink "/proc/$pid/root")" = "$root" ] && running=$((running + 1)); done
say running "$running"
verify="$(in_root systemd-analyze verify /lib/systemd/system/uploadq.service 2>&1)" && say verify ok \
    || say verify "failed: $(echo "$verify" | tr '\n' ' ')"
say version "$(in_root uploadq --version)"
say check "$(in_root runuser -u uploadq -- uploadq config check --config /etc/uploadq/uploadq.toml 2>&1 | head -1)"

# A dropper in the droppers' group drops a file; the daemon, as the packaged unit runs it, takes and delivers it.
in_root adduser --system --quiet --no-create-home dropper
in_root adduser --quiet dropper uploadq-drop
in_root runuser -u dropper -g uploadq-drop -- sh -c 'umask 027; head -c 70000 /dev/urandom > /var/spool/uploadq/.photo.tmp && mv /var/spool/uploadq/.photo.tmp /var/spool/uploadq/photo.jpg'
sum="$(sha256sum "$root/var/spool/uploadq/photo.jpg" | cut -d' ' -f1)"
# setpriv execs the daemon (as the unit does: User=, Group=, SupplementaryGroups=), so SIGTERM reaches it.
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 setpriv --reuid=uploadq --regid=uploadq --groups=uploadq-drop -- uploadq daemon --config /etc/uploadq/uploadq.toml \
    > "$scratch/daemon.log" 2>&1 &
daemon=$!
delivered=""
for _ in $(seq 1 120); do
    delivered="$(find "$root/var/lib/uploadq/uploaded" -type f -name '*photo.jpg' 2>/dev/null | head -1 || true)"
    [ -n "$delivered" ] && break
    sleep 0.25
done
sleep 0.5
kill -TERM "$daemon"
wait "$daemon" && say daemon stopped || say daemon "exited $?: $(tail -3 "$scratch/daemon.log" | tr '\n' ' ')"
say delivered "$([ -n "$delivered" ] && sha256sum "$delivered" | cut -d' ' -f1 || echo none) expected $sum"
say spool "$(find "$root/var/spool/uploadq" -mindepth 1 -maxdepth 1 ! -name .rejected | wc -l)"
say jobs "$(in_root runuser -u uploadq -- uploadq list --json --config /etc/uploadq/uploadq.toml 2>&1 | tr -d '\n' | head -c 4000 || true)"

# An upgrade (the same package again), as after a conffile that came back 0644: it is 0640 again, the unit stays
# enabled, nothing starts. Then one with the conffile deleted by the admin: the upgrade still completes.
chmod 0644 "$root/etc/uploadq/uploadq.toml"
chgrp root "$root/etc/uploadq/uploadq.toml"
in_root dpkg -i /tmp/uploadq.deb > "$scratch/dpkg-upgrade.log" 2>&1 || { cat "$scratch/dpkg-upgrade.log" >&2; exit 1; }
say upgraded:config "$(in_root stat -c '%a %U %G' /etc/uploadq/uploadq.toml)"
say upgraded:enabled "$(readlink "$root/etc/systemd/system/multi-user.target.wants/uploadq.service" || echo no)"
mv "$root/etc/uploadq/uploadq.toml" "$scratch/kept.toml"
in_root dpkg -i /tmp/uploadq.deb > "$scratch/dpkg-upgrade2.log" 2>&1 && say upgraded:without-config ok \
    || say upgraded:without-config "failed: $(tail -3 "$scratch/dpkg-upgrade2.log" | tr '\n' ' ')"
mv "$scratch/kept.toml" "$root/etc/uploadq/uploadq.toml"

# A file the queue took but could not upload yet (no daemon runs): its copy waits in blobs/.
head -c 5000 /dev/urandom > "$root/tmp/pending.jpg"
chmod 0644 "$root/tmp/pending.jpg"
in_root setpriv --reuid=uploadq --regid=uploadq --init-groups -- uploadq enqueue --config /etc/uploadq/uploadq.toml \
    /tmp/pending.jpg > "$scratch/enqueue.log" 2>&1 || { cat "$scratch/enqueue.log" >&2; exit 1; }

in_root dpkg -r uploadq > "$scratch/dpkg-remove.log" 2>&1 || { cat "$scratch/dpkg-remove.log" >&2; exit 1; }
say removed:binary "$([ -e "$root/usr/bin/uploadq" ] && echo present || echo gone)"
say removed:queue "$([ -e "$root/var/lib/uploadq/queue.sqlite" ] && echo kept || echo gone)"
say removed:config "$([ -e "$root/etc/uploadq/uploadq.toml" ] && echo kept || echo gone)"
# Purged while the queue still holds a file: the queue and the file stay, and it says so.
in_root dpkg -P uploadq > "$scratch/dpkg-purge.log" 2>&1 || { cat "$scratch/dpkg-purge.log" >&2; exit 1; }
say purged-pending:queue "$([ -e "$root/var/lib/uploadq/queue.sqlite" ] && echo kept || echo gone)"
say purged-pending:blobs "$(find "$root/var/lib/uploadq/blobs" -type f 2>/dev/null | wc -l)"
say purged-pending:said "$(grep -c 'the queue still holds files' "$scratch/dpkg-purge.log" || true)"
say purged:config "$([ -e "$root/etc/uploadq/uploadq.toml" ] && echo kept || echo gone)"
say purged:enabled "$([ -e "$root/etc/systemd/system/multi-user.target.wants/uploadq.service" ] && echo yes || echo no)"

# Installed again, the daemon finds the kept queue and delivers the waiting file; purged then, the queue goes.
in_root dpkg -i /tmp/uploadq.deb > "$scratch/dpkg-reinstall.log" 2>&1 || { cat "$scratch/dpkg-reinstall.log" >&2; exit 1; }
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 setpriv --reuid=uploadq --regid=uploadq \
    --groups=uploadq-drop -- uploadq daemon --config /etc/uploadq/uploadq.toml --exit-when-idle > "$scratch/daemon2.log" 2>&1 \
    && say reinstalled:daemon ok || say reinstalled:daemon "failed: $(tail -3 "$scratch/daemon2.log" | tr '\n' ' ')"
say reinstalled:delivered "$(find "$root/var/lib/uploadq/uploaded" -type f -name '*pending.jpg' | wc -l)"
in_root dpkg -P uploadq > "$scratch/dpkg-purge2.log" 2>&1 || { cat "$scratch/dpkg-purge2.log" >&2; exit 1; }
say purged:queue "$([ -e "$root/var/lib/uploadq/queue.sqlite" ] && echo kept || echo gone)"
say purged:uploaded "$(find "$root/var/lib/uploadq/uploaded" -type f 2>/dev/null | wc -l)"
INNER
