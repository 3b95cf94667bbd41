#!/usr/bin/env bash
# Remove what scripts/install.sh installed: the binary, the mount helper, the systemd unit, the
# installed README, the man pages and the completions. Workspaces, configuration (~/.vikingfs) and mounts' data are never
# touched. Refuses while a vikingfs mount is live (unmount it first: vikingfs umount MNT).
#
#   scripts/uninstall.sh [PREFIX]    (default PREFIX=/usr/local; run as root)
set -euo pipefail
prefix=${1:-/usr/local}

live=$(findmnt -rn -t fuse.vikingfs -o TARGET 2>/dev/null || true)
if [ -n "$live" ]; then
  echo "uninstall: vikingfs mounts are live (vikingfs umount each first):" >&2
  echo "$live" | sed 's/^/  /' >&2
  exit 1
fi
if [ -f /etc/systemd/system/vikingfs@.service ]; then
  rm -f /etc/systemd/system/vikingfs@.service
  systemctl daemon-reload 2>/dev/null || true
fi
# The helper only when it is ours (a link to this prefix's binary).
if [ "$(readlink /sbin/mount.fuse.vikingfs 2>/dev/null)" = "$prefix/bin/vikingfs" ]; then
  rm -f /sbin/mount.fuse.vikingfs
fi
rm -f "$prefix/bin/vikingfs"
rm -rf "$prefix/share/doc/vikingfs"
rm -f "$prefix"/share/man/man1/vikingfs.1 "$prefix"/share/man/man1/vikingfs-*.1
rm -f "$prefix/share/bash-completion/completions/vikingfs" \
  "$prefix/share/zsh/site-functions/_vikingfs" \
  "$prefix/share/fish/vendor_completions.d/vikingfs.fish"
echo "vikingfs removed from $prefix (workspaces and ~/.vikingfs left as they are)"
