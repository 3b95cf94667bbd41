#!/usr/bin/env bash
# What keeping the replaced version costs an overwrite: a 100 MiB file overwritten in place
# (`cat NEW > FILE`: open with O_TRUNC, then 100 MiB written) through vikingfs with history
# on and off, on loop images of XFS and btrfs (reflinks: the old version shares its blocks)
# and ext4 (none: the old version is copied, up to history.max_file_bytes — raised here to
# 256 MiB so that the copy is measured), beside the filesystem itself, plainly and keeping
# each replaced version as vikingfs does (`cp --reflink=auto`, then the overwrite). Images
# are 4 GiB (IMAGE_GIB), written through with zeros before mkfs: on a sparse or merely
# preallocated image every block written where none was before costs the filesystem under
# the image an allocation (or an unwritten-extent conversion) too — what a disk does not
# have, and what keeping versions (new blocks each time, the old ones kept) meets far more
# than rewriting the same blocks does.
#
#   scripts/bench-overwrite.sh [WORKDIR]
#
# Prints the median of ROUNDS (5) overwrites per cell, in seconds. Needs root (loop mounts) and
# mkfs.xfs / mkfs.btrfs (Debian's xfsprogs, btrfs-progs); a filesystem whose mkfs is
# missing is skipped.
set -euo pipefail

WORK=${1:-$(mktemp -d /var/tmp/vikingfs-overwrite.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)
ROUNDS=${ROUNDS:-5}

cleanup() {
    for m in "$WORK"/*/mnt-*; do
        [ -d "$m" ] || continue
        timeout 60 "$BIN" umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    for img in "$WORK"/*/disk; do
        [ -d "$img" ] || continue
        umount "$img" 2>/dev/null || umount -l "$img" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

secs() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }
overwrite() { cat "$1" >"$2" && sync "$2"; }

head -c $((100 << 20)) /dev/urandom >"$WORK/new"
printf '%-7s %10s %14s %13s %12s %12s\n' fs native "native+reflink" "native+moved" "history off" "history on"
for fs in xfs btrfs ext4; do
    command -v "mkfs.$fs" >/dev/null || { echo "$fs: no mkfs.$fs, skipped"; continue; }
    d="$WORK/$fs"
    mkdir -p "$d/disk"
    dd if=/dev/zero of="$d/img" bs=16M count=$((${IMAGE_GIB:-4} * 64)) conv=fsync status=none
    case $fs in
    ext4) mkfs.ext4 -q -F "$d/img" ;;
    *) "mkfs.$fs" -q -f "$d/img" >/dev/null ;;
    esac
    mount -o loop "$d/img" "$d/disk"
    row=()
    # The filesystem itself.
    head -c $((100 << 20)) /dev/urandom >"$d/disk/native"
    row+=("$(for _ in $(seq $ROUNDS); do secs overwrite "$WORK/new" "$d/disk/native"; done | median)")
    # The filesystem itself keeping each replaced version as vikingfs does (a reflink where
    # it has them, before the truncation): what keeping costs without vikingfs.
    keep() { cp --reflink=auto "$2" "$2.kept.$RANDOM$RANDOM" && overwrite "$1" "$2"; }
    row+=("$(for _ in $(seq $ROUNDS); do secs keep "$WORK/new" "$d/disk/native"; done | median)")
    rm -f "$d/disk/native".kept.*
    # ...and keeping each replaced file itself (moved aside, then a new file written), as
    # vikingfs does when nobody has the file open: new blocks each time, the old kept.
    aside() { mv "$2" "$2.kept.$RANDOM$RANDOM" && overwrite "$1" "$2"; }
    row+=("$(for _ in $(seq $ROUNDS); do secs aside "$WORK/new" "$d/disk/native"; done | median)")
    rm -f "$d/disk/native".kept.*
    for h in false true; do
        home="$d/home-$h"
        mkdir -p "$home/.vikingfs" "$d/mnt-$h"
        echo "{\"vikingfs\":{\"history\":{\"enabled\":$h,\"max_file_bytes\":268435456,\"max_bytes\":1073741824}}}" \
            >"$home/.vikingfs/config.json"
        HOME="$home" "$BIN" mount "$d/disk/ws-$h" "$d/mnt-$h"
        f="$d/mnt-$h/resources/big"
        head -c $((100 << 20)) /dev/urandom >"$f"
        row+=("$(for _ in $(seq $ROUNDS); do secs overwrite "$WORK/new" "$f"; done | median)")
        HOME="$home" timeout 120 "$BIN" umount "$d/mnt-$h"
    done
    printf '%-7s %10s %14s %13s %12s %12s\n' "$fs" "${row[@]}"
    umount "$d/disk"
done
