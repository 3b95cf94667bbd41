#!/usr/bin/env bash
# The first mount in one command, on a fresh Debian with a Rust toolchain (run as root):
# installs everything the mount needs (scripts/install.sh: fuse3 through apt when missing,
# vikingfs built and installed), then mounts the workspace ~/.vikingfs/workspace (made with
# defaults when missing) at MOUNTPOINT (default /mnt/viking, made when missing).
#
#   scripts/quickstart.sh [--force] [MOUNTPOINT]
#
# --force is install.sh's: replace another install's files in the way. VIKINGFS_BIN=PATH
# installs a binary built already. Undo it all: vikingfs umount MOUNTPOINT && scripts/uninstall.sh
set -euo pipefail
cd "$(dirname "$0")/.."
install_args=()
mp=/mnt/viking
for a in "$@"; do
  case "$a" in
    --force) install_args+=(--force) ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "quickstart: unknown option $a (scripts/quickstart.sh [--force] [MOUNTPOINT])" >&2; exit 2 ;;
    *) mp=$a ;;
  esac
done
ws=${VIKINGFS_WORKSPACE:-$HOME/.vikingfs/workspace}

scripts/install.sh "${install_args[@]}"
export PATH="/usr/local/bin:$PATH"
if [ "$(findmnt -n -o FSTYPE "$mp" 2>/dev/null)" = fuse.vikingfs ]; then
  echo "quickstart: $mp is mounted already ($(findmnt -n -o SOURCE "$mp"))"
else
  mkdir -p "$mp"
  vikingfs mount "$ws" "$mp"
fi
cat <<MSG
quickstart: $ws is mounted at $mp. Next:
  cp -r /usr/share/common-licenses $mp/resources/     # any program, any files
  vikingfs wait                                        # the index and summaries catch up
  cat $mp/resources/common-licenses/.overview.md       # a summary the workers wrote
  vikingfs find "warranty of merchantability"          # ranked; never a file that is gone
  vikingfs status                                      # the daemon, its log, queues, the index
Stop: vikingfs umount $mp
MSG
