#!/usr/bin/env bash
# Install vikingfs system-wide: the binary on the standard PATH, the mount helper that lets
# `mount -t fuse.vikingfs WORKSPACE MOUNTPOINT` and fstab lines work, the systemd unit, man
# pages (man vikingfs, man vikingfs-mount, ...) and bash, zsh and fish completions.
#
#   scripts/install.sh [PREFIX]      (default PREFIX=/usr/local; run as root)
#
# VIKINGFS_BIN=PATH installs that binary (one built already, or downloaded) instead of
# building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}

bin=${VIKINGFS_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked
  bin=target/release/vikingfs
fi
install -D -m 0755 "$bin" "$prefix/bin/vikingfs"
# mount(8) runs /sbin/mount.fuse.vikingfs SOURCE MOUNTPOINT -o OPTIONS for type fuse.vikingfs.
ln -sf "$prefix/bin/vikingfs" /sbin/mount.fuse.vikingfs
if [ -d /etc/systemd/system ] || [ -d /lib/systemd/system ]; then
  sed "s#/usr/local/bin/vikingfs#$prefix/bin/vikingfs#" systemd/vikingfs@.service \
    > /etc/systemd/system/vikingfs@.service
  systemctl daemon-reload 2>/dev/null || true
fi
install -D -m 0644 README.md "$prefix/share/doc/vikingfs/README.md"
# Man pages and completions, made by the installed binary from its own command line.
"$prefix/bin/vikingfs" generate man "$prefix/share/man/man1"
"$prefix/bin/vikingfs" generate completions bash "$prefix/share/bash-completion/completions" >/dev/null
mv "$prefix/share/bash-completion/completions/vikingfs.bash" "$prefix/share/bash-completion/completions/vikingfs"
"$prefix/bin/vikingfs" generate completions zsh "$prefix/share/zsh/site-functions" >/dev/null
"$prefix/bin/vikingfs" generate completions fish "$prefix/share/fish/vendor_completions.d" >/dev/null
echo "vikingfs installed: $prefix/bin/vikingfs, /sbin/mount.fuse.vikingfs, vikingfs@.service, man vikingfs, shell completions"
