#!/usr/bin/env bash
# Remove what scripts/install.sh installed for PREFIX: exactly the files its list names
# (PREFIX/share/vikingfs/installed): the binary, the mount helper, the systemd unit, the docs,
# the man pages and the completions. Workspaces, configuration (~/.vikingfs) and mounts' data
# are never touched, nor another install's files.
#
#   scripts/uninstall.sh [PREFIX]    (default PREFIX=/usr/local; run as root)
#
# Refuses while a daemon of this install runs (a mount or `vikingfs serve` whose binary is
# PREFIX/bin/vikingfs), naming each; another install's mounts are no concern of it.
set -euo pipefail
prefix=${1:-/usr/local}
prefix=${prefix%/}
bin=$prefix/bin/vikingfs
list=$prefix/share/vikingfs/installed

# This install's daemons: processes running its binary (a mount's daemon re-executes it, a
# mount through mount(8) too: /proc/PID/exe names the binary, not the helper's link).
mine=()
for exe in /proc/[0-9]*/exe; do
  target=$(readlink "$exe" 2>/dev/null) || continue
  [ "$target" = "$bin" ] || [ "$target" = "$bin (deleted)" ] || continue
  pid=${exe#/proc/}; pid=${pid%/exe}
  cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)
  case "$cmd" in
    *" mount "*|*" serve"*) mine+=("pid $pid: ${cmd% }") ;;
  esac
done
if [ ${#mine[@]} -gt 0 ]; then
  echo "uninstall: daemons of $bin are running (vikingfs umount MNT each mount, stop each serve first):" >&2
  printf '  %s\n' "${mine[@]}" >&2
  exit 1
fi

if [ -f "$list" ]; then
  files=$(cat "$list")
else
  # An install made before the list was kept: what that install.sh wrote.
  echo "uninstall: no $list: removing what an older install.sh put in $prefix" >&2
  files=$(printf '%s\n' "$bin" "$prefix/share/doc/vikingfs" \
    "$prefix"/share/man/man1/vikingfs.1 "$prefix"/share/man/man1/vikingfs-*.1 \
    "$prefix/share/bash-completion/completions/vikingfs" \
    "$prefix/share/zsh/site-functions/_vikingfs" \
    "$prefix/share/fish/vendor_completions.d/vikingfs.fish")
  # The helper and the unit only when they run this PREFIX's binary.
  if [ "$(readlink /sbin/mount.fuse.vikingfs 2>/dev/null)" = "$bin" ]; then
    files+=$'\n/sbin/mount.fuse.vikingfs'
  fi
  if grep -q "^ExecStart=$bin " /etc/systemd/system/vikingfs@.service 2>/dev/null; then
    files+=$'\n/etc/systemd/system/vikingfs@.service'
  fi
fi
unit_gone=0
while IFS= read -r f; do
  [ -n "$f" ] || continue
  case "$f" in
    */mount.fuse.vikingfs)
      # A helper another install put there since is that install's.
      [ "$(readlink "$f" 2>/dev/null)" = "$bin" ] || continue ;;
    */vikingfs@.service)
      grep -q "^ExecStart=$bin " "$f" 2>/dev/null || continue
      unit_gone=1 ;;
  esac
  rm -rf -- "$f"
done <<< "$files"
rmdir "$prefix/share/vikingfs" "$prefix/share/doc/vikingfs/docs" "$prefix/share/doc/vikingfs" 2>/dev/null || true
if [ "$unit_gone" -eq 1 ]; then systemctl daemon-reload 2>/dev/null || true; fi
# man -k forgets the pages: the system's index is brought up to date (a PREFIX of its own
# had its index, PREFIX/share/man/index.db, in the list).
if command -v mandb >/dev/null 2>&1 && { [ "$prefix" = /usr/local ] || [ "$prefix" = /usr ]; }; then
  timeout 300 mandb -q 2>/dev/null || true
fi
rmdir "$prefix/share/man/cat1" 2>/dev/null || true
echo "vikingfs removed from $prefix (workspaces and ~/.vikingfs left as they are)"
