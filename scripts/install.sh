#!/usr/bin/env bash
# Install vikingfs: everything the mount needs on a fresh Debian with a Rust toolchain.
#
#   scripts/install.sh [--force] [PREFIX]      (run as root; default PREFIX=/usr/local)
#
# What it does, and where it writes (each path is printed at the end):
#   - fuse3 through apt-get when /dev/fuse or fusermount3 is missing (Debian, Ubuntu);
#   - builds a release binary (cargo build --release --locked), unless VIKINGFS_BIN=PATH names
#     one built already (or downloaded) to install instead;
#   - PREFIX/bin/vikingfs;
#   - the mount helper, so that `mount -t fuse.vikingfs WS MNT` and fstab lines work:
#     SBINDIR/mount.fuse.vikingfs, a link to the binary. mount(8) looks in /sbin only, so
#     SBINDIR is /sbin for the default PREFIX and PREFIX/sbin for any other;
#   - the systemd unit vikingfs@.service into UNITDIR: /etc/systemd/system for the default
#     PREFIX, PREFIX/lib/systemd/system for any other (systemd reads the first only);
#   - man pages (man vikingfs, man vikingfs-mount, ...; mandb is run so that man -k finds
#     them), bash, zsh and fish completions, and the docs, under PREFIX/share;
#   - a list of every file it wrote, PREFIX/share/vikingfs/installed, which uninstall.sh
#     reads and which tells this install's files from another's.
# SBINDIR=DIR and UNITDIR=DIR choose those two places for any PREFIX.
#
# It never replaces another install's file without being told: a vikingfs binary, mount
# helper or unit that this PREFIX's list does not name (another PREFIX's, a package's) stops
# it, naming the file and what it is; --force replaces them.
set -euo pipefail
cd "$(dirname "$0")/.."

force=0
prefix=/usr/local
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install: unknown option $a (scripts/install.sh [--force] [PREFIX])" >&2; exit 2 ;;
    *) prefix=$a ;;
  esac
done
case "$prefix" in
  /*) ;;
  *) echo "install: PREFIX must be an absolute path, not $prefix" >&2; exit 2 ;;
esac
prefix=${prefix%/}
if [ "$prefix" = /usr/local ]; then
  sbindir=${SBINDIR:-/sbin}
  unitdir=${UNITDIR:-/etc/systemd/system}
else
  sbindir=${SBINDIR:-$prefix/sbin}
  unitdir=${UNITDIR:-$prefix/lib/systemd/system}
fi
list=$prefix/share/vikingfs/installed

if [ "$(id -u)" -ne 0 ]; then
  echo "install: run as root (it installs into $prefix, $sbindir and $unitdir, and may apt-get install fuse3)" >&2
  exit 1
fi

# This install's own files (from a previous run for the same PREFIX): replacing them is an
# upgrade. Anything else in the way is another install's.
ours() { [ -f "$list" ] && grep -qxF -- "$1" "$list"; }
others=()
claim() { # $1: a path about to be written; $2: what is there now, when it is not ours
  if { [ -e "$1" ] || [ -L "$1" ]; } && ! ours "$1"; then
    others+=("$1 ($2)")
  fi
}
claim "$prefix/bin/vikingfs" "$("$prefix/bin/vikingfs" --version 2>/dev/null || echo 'a file')"
# The helper and the unit name the binary they run: one naming this PREFIX's is this
# install's whatever the list says (an install made before the list was kept).
helper_now=$(readlink "$sbindir/mount.fuse.vikingfs" 2>/dev/null || true)
if [ "$helper_now" != "$prefix/bin/vikingfs" ]; then
  claim "$sbindir/mount.fuse.vikingfs" "${helper_now:+a link to $helper_now}"
fi
unit_now=$(grep -m1 '^ExecStart=' "$unitdir/vikingfs@.service" 2>/dev/null || true)
case "$unit_now" in
  "ExecStart=$prefix/bin/vikingfs "*) ;;
  *) claim "$unitdir/vikingfs@.service" "${unit_now:-a unit}" ;;
esac
if [ ${#others[@]} -gt 0 ] && [ "$force" -ne 1 ]; then
  echo "install: another install's files are in the way (not in $list):" >&2
  printf '  %s\n' "${others[@]}" >&2
  echo "install: remove that install first (its own uninstall), choose another PREFIX, or pass --force to replace them" >&2
  exit 1
fi

# The mount needs the kernel's FUSE device and, for unmounting as a user, fusermount3.
if { [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1; } && command -v apt-get >/dev/null; then
  if ! dpkg -s fuse3 >/dev/null 2>&1; then
    echo "install: installing fuse3 (apt-get)"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq fuse3
  fi
fi
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
[ -e /dev/fuse ] || echo "install: warning: /dev/fuse is missing (in a container: run it with --device /dev/fuse); vikingfs serve and vikingfs mcp need none" >&2

bin=${VIKINGFS_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked
  bin=target/release/vikingfs
fi

written=()
put() { written+=("$1"); }
install -D -m 0755 "$bin" "$prefix/bin/vikingfs"; put "$prefix/bin/vikingfs"
# mount(8) runs SBINDIR/mount.fuse.vikingfs SOURCE MOUNTPOINT -o OPTIONS for type fuse.vikingfs.
mkdir -p "$sbindir"
ln -sfn "$prefix/bin/vikingfs" "$sbindir/mount.fuse.vikingfs"; put "$sbindir/mount.fuse.vikingfs"
mkdir -p "$unitdir"
sed -e "s#/usr/local/bin/vikingfs#$prefix/bin/vikingfs#" \
    -e "s#/usr/local/share/doc/vikingfs#$prefix/share/doc/vikingfs#" \
    systemd/vikingfs@.service > "$unitdir/vikingfs@.service"
put "$unitdir/vikingfs@.service"
if [ "$unitdir" = /etc/systemd/system ]; then
  systemctl daemon-reload 2>/dev/null || true
fi
doc=$prefix/share/doc/vikingfs
install -D -m 0644 README.md "$doc/README.md"; put "$doc/README.md"
for f in docs/*.md; do
  install -D -m 0644 "$f" "$doc/$f"; put "$doc/$f"
done
# Man pages and completions, made by the installed binary from its own command line.
man1=$prefix/share/man/man1
"$prefix/bin/vikingfs" generate man "$man1"
for f in "$man1"/vikingfs.1 "$man1"/vikingfs-*.1; do put "$f"; done
comp=$prefix/share/bash-completion/completions
"$prefix/bin/vikingfs" generate completions bash "$comp" >/dev/null
mv "$comp/vikingfs.bash" "$comp/vikingfs"; put "$comp/vikingfs"
put "$("$prefix/bin/vikingfs" generate completions zsh "$prefix/share/zsh/site-functions")"
put "$("$prefix/bin/vikingfs" generate completions fish "$prefix/share/fish/vendor_completions.d")"
# man -k (apropos) reads mandb's index, not the pages: bring it up to date.
if command -v mandb >/dev/null 2>&1; then
  if [ "$prefix" = /usr/local ] || [ "$prefix" = /usr ]; then
    timeout 300 mandb -q 2>/dev/null || true
  else
    timeout 300 mandb -q "$prefix/share/man" 2>/dev/null || true
    # Its index there is this install's too.
    if [ -f "$prefix/share/man/index.db" ]; then put "$prefix/share/man/index.db"; fi
  fi
fi
mkdir -p "$(dirname "$list")"
put "$list"
printf '%s\n' "${written[@]}" > "$list"

echo "vikingfs installed ($("$prefix/bin/vikingfs" --version)):"
echo "  $prefix/bin/vikingfs"
echo "  $sbindir/mount.fuse.vikingfs (mount -t fuse.vikingfs, fstab)"
echo "  $unitdir/vikingfs@.service"
echo "  $man1/vikingfs*.1, completions and docs under $prefix/share"
echo "  the list of them: $list (scripts/uninstall.sh $prefix removes exactly these)"
if [ "$sbindir" != /sbin ] && [ "$sbindir" != /usr/sbin ]; then
  echo "note: mount(8) looks for helpers in /sbin: ln -s $sbindir/mount.fuse.vikingfs /sbin/ for mount -t and fstab"
fi
if [ "$unitdir" != /etc/systemd/system ]; then
  echo "note: systemd reads /etc/systemd/system: systemctl link $unitdir/vikingfs@.service to use the unit"
fi
case ":${MANPATH:-}:" in
  *":$prefix/share/man:"*) ;;
  *) [ "$prefix" = /usr/local ] || [ "$prefix" = /usr ] || echo "note: man and man -k find the pages with MANPATH=$prefix/share/man:\$(manpath)" ;;
esac
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH" ;;
esac
