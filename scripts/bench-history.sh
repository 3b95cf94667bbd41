#!/usr/bin/env bash
# What the history costs and what undo takes, side by side: vikingfs with history on (the
# default) and off, and bindfs, each on ext4.
#
#   scripts/bench-history.sh [WORKDIR]
#
# Prints per target: the metadata job (create, stat, rename, unlink of 10,000 files, one
# syscall each: scripts/meta-job.py, ops/s), `rm -rf` of a directory of RM_N (10,000) small
# files each indexed first, and for history on, `vikingfs undo` of that rm until `find`
# answers for the files again. Needs root (mounts).
set -euo pipefail

WORK=${1:-$(mktemp -d /var/tmp/vikingfs-history.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
RM_N=${RM_N:-10000}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

cleanup() {
    umount "$WORK/bindfs/mnt" 2>/dev/null || umount -l "$WORK/bindfs/mnt" 2>/dev/null || true
    for t in on off; do
        [ -d "$WORK/$t/mnt" ] || continue
        HOME="$WORK/$t" timeout 60 "$BIN" umount "$WORK/$t/mnt" 2>/dev/null ||
            umount -l "$WORK/$t/mnt" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

secs() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l | xargs printf '%.3f'
}

mkdir -p "$WORK/bindfs/src" "$WORK/bindfs/mnt"
bindfs "$WORK/bindfs/src" "$WORK/bindfs/mnt"
for t in on off; do
    mkdir -p "$WORK/$t/ws" "$WORK/$t/mnt" "$WORK/$t/.vikingfs"
    enabled=true
    [ "$t" = off ] && enabled=false
    echo "{\"vikingfs\":{\"history\":{\"enabled\":$enabled}}}" >"$WORK/$t/.vikingfs/config.json"
    HOME="$WORK/$t" "$BIN" mount "$WORK/$t/ws" "$WORK/$t/mnt"
done
vfs() { HOME="$WORK/$1" timeout 1200 "$BIN" --workspace "$WORK/$1/ws" "${@:2}"; }
dir_of() {
    case $1 in
    bindfs) echo "$WORK/bindfs/mnt" ;;
    *) echo "$WORK/$1/mnt/resources" ;;
    esac
}

printf '%-12s %12s %12s %12s\n' target "meta ops/s" "rm -rf $RM_N" "undo+find"
for t in on off bindfs; do
    d=$(dir_of "$t")
    meta=$(python3 "$ROOT/scripts/meta-job.py" "$d" 10000 2>/dev/null)
    mkdir -p "$d/tree"
    python3 - "$d/tree" "$RM_N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(f"{d}/f{i:06}.md", "w") as f:
        f.write(f"note {i} token{i:06}x\n")
PY
    [ "$t" = bindfs ] || vfs "$t" wait --timeout 1200 >/dev/null
    rm_s=$(secs rm -rf "$d/tree")
    undo=-
    if [ "$t" = on ]; then
        t0=$(date +%s.%N)
        vfs on undo viking://resources/tree >/dev/null
        # Until the last file's record answers again.
        last=$(printf 'token%06dx' $((RM_N - 1)))
        until vfs on find --limit 1 "$last" 2>/dev/null | grep -q "f$(printf '%06d' $((RM_N - 1)))"; do
            sleep 0.05
        done
        t1=$(date +%s.%N)
        undo=$(echo "$t1 - $t0" | bc -l | xargs printf '%.3f')
        [ "$(ls "$d/tree" | wc -l)" -eq "$RM_N" ] || { echo "undo: files missing" >&2; exit 1; }
    fi
    printf '%-12s %12s %12s %12s\n' "vikingfs-$t" "$meta" "$rm_s" "$undo" | sed 's/vikingfs-bindfs/bindfs/'
done
