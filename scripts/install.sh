#!/usr/bin/env bash
# Install vikingfs system-wide: the binary on the standard PATH, the mount helper that lets
# `mount -t fuse.vikingfs WORKSPACE MOUNTPOINT` and fstab lines work, and the systemd unit.
#
#   scripts/install.sh [PREFIX]      (default PREFIX=/usr/local; run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}

cargo build --release --locked
install -D -m 0755 target/release/vikingfs "$prefix/bin/vikingfs"
# mount(8) runs /sbin/mount.fuse.vikingfs SOURCE MOUNTPOINT -o OPTIONS for type fuse.vikingfs.
ln -sf "$prefix/bin/vikingfs" /sbin/mount.fuse.vikingfs
if [ -d /etc/systemd/system ] || [ -d /lib/systemd/system ]; then
  sed "s#/usr/local/bin/vikingfs#$prefix/bin/vikingfs#" systemd/vikingfs@.service \
    > /etc/systemd/system/vikingfs@.service
  systemctl daemon-reload 2>/dev/null || true
fi
install -D -m 0644 README.md "$prefix/share/doc/vikingfs/README.md"
echo "vikingfs installed: $prefix/bin/vikingfs, /sbin/mount.fuse.vikingfs, vikingfs@.service"
