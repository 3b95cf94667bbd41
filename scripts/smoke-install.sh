#!/usr/bin/env bash
# Install vikingfs as an operator would (scripts/install.sh) and mount a fresh workspace three
# ways: `vikingfs mount`, `mount -t fuse.vikingfs`, and an fstab line; remount ro/rw through
# mount(8); then uninstall. Leaves no mount behind.
#   scripts/smoke-install.sh [PREFIX]     (root; default PREFIX=/usr/local)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
work=$(mktemp -d /var/tmp/vikingfs-smoke.XXXXXX)
mnt=$work/mnt
cleanup() {
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$mnt"

timeout 900 scripts/install.sh "$prefix" >/dev/null
export PATH="$prefix/bin:$PATH"
# The man pages and completions are in place and say what the binary does.
man -M "$prefix/share/man" -P cat vikingfs-mount 2>/dev/null | grep -q -- "--log-file" \
  || grep -q -- "log-file" "$prefix/share/man/man1/vikingfs-mount.1" \
  || { echo "smoke: no man page for vikingfs mount" >&2; exit 1; }
grep -q "umount" "$prefix/share/bash-completion/completions/vikingfs" \
  || { echo "smoke: no bash completion" >&2; exit 1; }
echo "smoke: man pages and completions: ok"
check() { # $1: how it was mounted
  findmnt -n -o FSTYPE "$mnt" | grep -qx fuse.vikingfs || { echo "smoke: $1: not a fuse.vikingfs mount" >&2; exit 1; }
  echo "hello from $1" > "$mnt/resources/smoke.md"
  grep -q "hello from $1" "$work/ws/viking/default/resources/smoke.md"
  timeout 60 umount "$mnt"
  if findmnt "$mnt" >/dev/null; then echo "smoke: $1: still mounted" >&2; exit 1; fi
  echo "smoke: $1: ok"
}

timeout 60 vikingfs mount "$work/ws" "$mnt"; check "vikingfs mount"
timeout 60 mount -t fuse.vikingfs -o rw,nosuid,nodev "$work/ws" "$mnt"; check "mount -t fuse.vikingfs"
printf '%s %s fuse.vikingfs defaults,_netdev,nofail 0 0\n' "$work/ws" "$mnt" > "$work/fstab"
timeout 60 mount -T "$work/fstab" "$mnt"; check "fstab line"
# mount(8)'s own conventions: -v, and a remount (mount(8) hands the live options back, the
# kernel's user_id=/group_id= among them) that flips the mount read-only and back.
timeout 60 mount -v -t fuse.vikingfs "$work/ws" "$mnt" >/dev/null
timeout 60 mount -o remount,ro "$mnt"
if echo x 2>/dev/null > "$mnt/resources/ro.md"; then echo "smoke: remount,ro: still writable" >&2; exit 1; fi
timeout 60 mount -o remount,rw "$mnt"
echo "hello from remount" > "$mnt/resources/smoke.md"
timeout 60 umount "$mnt"
echo "smoke: mount -v, remount,ro and remount,rw: ok"
# Unknown options are refused with one line naming them.
if out=$(timeout 60 mount -t fuse.vikingfs -o bogus_opt "$work/ws" "$mnt" 2>&1); then
  echo "smoke: an unknown option was accepted" >&2; exit 1
fi
echo "$out" | grep -q bogus_opt || { echo "smoke: unknown-option error does not name it: $out" >&2; exit 1; }
echo "smoke: unknown option refused: ok"

# Uninstall refuses while a mount is live, then removes what install.sh put in place.
timeout 60 vikingfs mount "$work/ws" "$mnt"
if timeout 60 scripts/uninstall.sh "$prefix" 2>/dev/null; then
  echo "smoke: uninstall ran under a live mount" >&2; exit 1
fi
timeout 60 umount "$mnt"
timeout 60 scripts/uninstall.sh "$prefix" >/dev/null
for f in "$prefix/bin/vikingfs" /sbin/mount.fuse.vikingfs "$prefix/share/man/man1/vikingfs.1" \
  "$prefix/share/bash-completion/completions/vikingfs"; do
  if [ -e "$f" ] || [ -L "$f" ]; then echo "smoke: uninstall left $f" >&2; exit 1; fi
done
[ -d "$work/ws/viking" ] || { echo "smoke: uninstall touched the workspace" >&2; exit 1; }
echo "smoke: uninstall: ok"
