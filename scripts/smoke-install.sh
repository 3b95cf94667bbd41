#!/usr/bin/env bash
# Install vikingfs as an operator would (scripts/install.sh) and mount a fresh workspace three
# ways: `vikingfs mount`, `mount -t fuse.vikingfs`, and an fstab line; remount ro/rw through
# mount(8); a second PREFIX beside it (another install is never replaced silently, each
# uninstall minds only its own mounts); then uninstall. Leaves no mount behind.
#   scripts/smoke-install.sh [PREFIX]     (root; default PREFIX=/usr/local)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
work=$(mktemp -d /var/tmp/vikingfs-smoke.XXXXXX)
mnt=$work/mnt
cleanup() {
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  umount "$work/mnt2" 2>/dev/null || umount -l "$work/mnt2" 2>/dev/null || true
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
# EXAMPLES and FILES (the past under MNT/.history among them), beyond what --help says.
for sec in '^\.SH EXAMPLES' '^\.SH FILES' 'MNT/\.history' '^\.SH "EXIT STATUS"'; do
  grep -q -- "$sec" "$prefix/share/man/man1/vikingfs.1" \
    || { echo "smoke: man vikingfs lacks $sec" >&2; exit 1; }
done
grep -q 'allow\\-non\\-empty' "$prefix/share/man/man1/vikingfs-mount.1" \
  || { echo "smoke: man vikingfs-mount has no example of --allow-non-empty" >&2; exit 1; }
# install.sh ran mandb: man -k (apropos) finds the pages.
# (A PREFIX of its own has its index in PREFIX/share/man, found with MANPATH naming it.)
manpath_of() { case "$1" in /usr/local|/usr) manpath 2>/dev/null ;; *) echo "$1/share/man" ;; esac; }
apropos_finds() { MANPATH=$(manpath_of "$1") apropos vikingfs-mount 2>/dev/null | grep -q vikingfs-mount; }
has_apropos=0
if command -v mandb >/dev/null 2>&1 && command -v apropos >/dev/null 2>&1; then
  has_apropos=1
  apropos_finds "$prefix" || { echo "smoke: man -k does not find vikingfs-mount (mandb not run?)" >&2; exit 1; }
fi
echo "smoke: man pages (EXAMPLES, FILES), mandb and completions: ok"

# Another install's files are never replaced silently: a foreign binary where a second
# PREFIX's would go stops install.sh, named; --force replaces it. That PREFIX keeps its
# helper and unit under itself, so the first install's are untouched.
p2=$work/p2
mkdir -p "$p2/bin"
printf '#!/bin/sh\necho someone-else 1.0\n' > "$p2/bin/vikingfs"; chmod +x "$p2/bin/vikingfs"
if out=$(timeout 300 scripts/install.sh "$p2" 2>&1); then
  echo "smoke: install.sh replaced another's $p2/bin/vikingfs" >&2; exit 1
fi
echo "$out" | grep -q "$p2/bin/vikingfs (someone-else 1.0)" \
  || { echo "smoke: the refusal does not name the other install: $out" >&2; exit 1; }
timeout 300 scripts/install.sh --force "$p2" >/dev/null
[ "$(readlink "$p2/sbin/mount.fuse.vikingfs")" = "$p2/bin/vikingfs" ] \
  || { echo "smoke: PREFIX's helper is not under PREFIX" >&2; exit 1; }
[ -f "$p2/lib/systemd/system/vikingfs@.service" ] \
  && grep -q "^ExecStart=$p2/bin/vikingfs " "$p2/lib/systemd/system/vikingfs@.service" \
  || { echo "smoke: PREFIX's unit is not under PREFIX, running its binary" >&2; exit 1; }
[ "$(readlink /sbin/mount.fuse.vikingfs)" = "$prefix/bin/vikingfs" ] \
  || { echo "smoke: a second PREFIX's install replaced /sbin/mount.fuse.vikingfs" >&2; exit 1; }
if [ "$has_apropos" = 1 ]; then
  apropos_finds "$p2" || { echo "smoke: man -k does not find $p2's pages" >&2; exit 1; }
fi
# Reinstalling over one's own install is an upgrade, no --force needed.
timeout 300 scripts/install.sh "$p2" >/dev/null
echo "smoke: another install refused, --force, PREFIX honoured, upgrade: ok"
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

# Uninstall refuses while a mount of its own install is live, naming it; another install's
# live mount (the second PREFIX's) is no concern of it.
timeout 60 vikingfs mount "$work/ws" "$mnt"
if out=$(timeout 60 scripts/uninstall.sh "$prefix" 2>&1); then
  echo "smoke: uninstall ran under a live mount" >&2; exit 1
fi
echo "$out" | grep -q -- "$mnt" || { echo "smoke: uninstall's refusal does not name $mnt: $out" >&2; exit 1; }
# vikingfs umount returns once the daemon has exited (a plain umount may return before).
timeout 60 vikingfs umount "$mnt"
mnt2=$work/mnt2; mkdir -p "$mnt2"
timeout 60 "$p2/bin/vikingfs" mount "$work/ws2" "$mnt2"
timeout 60 scripts/uninstall.sh "$p2" >/dev/null 2>&1 \
  && { echo "smoke: uninstall of $p2 ran under its own live mount" >&2; umount "$mnt2"; exit 1; }
if ! out=$(timeout 60 scripts/uninstall.sh "$prefix" 2>&1); then
  echo "smoke: another install's mount stopped uninstall: $out" >&2; umount "$mnt2"; exit 1
fi
timeout 60 "$p2/bin/vikingfs" umount "$mnt2"
timeout 60 scripts/uninstall.sh "$p2" >/dev/null
[ -z "$(find "$p2" -type f -o -type l)" ] || { echo "smoke: uninstall left files in $p2" >&2; exit 1; }
timeout 300 scripts/install.sh "$prefix" >/dev/null
timeout 60 scripts/uninstall.sh "$prefix" >/dev/null
for f in "$prefix/bin/vikingfs" /sbin/mount.fuse.vikingfs "$prefix/share/man/man1/vikingfs.1" \
  "$prefix/share/bash-completion/completions/vikingfs"; do
  if [ -e "$f" ] || [ -L "$f" ]; then echo "smoke: uninstall left $f" >&2; exit 1; fi
done
[ -d "$work/ws/viking" ] || { echo "smoke: uninstall touched the workspace" >&2; exit 1; }
echo "smoke: uninstall: ok"
