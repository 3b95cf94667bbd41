#!/usr/bin/env bash
# Install vikingfs as an operator would (scripts/install.sh) and mount a fresh workspace three
# ways: `vikingfs mount`, `mount -t fuse.vikingfs`, and an fstab line. Leaves no mount behind.
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
# Unknown options are refused with one line naming them.
if out=$(timeout 60 mount -t fuse.vikingfs -o bogus_opt "$work/ws" "$mnt" 2>&1); then
  echo "smoke: an unknown option was accepted" >&2; exit 1
fi
echo "$out" | grep -q bogus_opt || { echo "smoke: unknown-option error does not name it: $out" >&2; exit 1; }
echo "smoke: unknown option refused: ok"
