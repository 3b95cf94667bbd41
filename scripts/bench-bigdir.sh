#!/usr/bin/env bash
# One big directory: N empty files created in one directory, then listed, side by side on
# ext4 itself, through bindfs, through vikingfs (and BASE_BIN, an older vikingfs, when given).
#
#   scripts/bench-bigdir.sh [BASE_BIN] [WORKDIR]
#
# Prints per target: creates/s (python open+close, one syscall each), `ls -f` and `find`
# after the kernel's caches are dropped (cold) and again (warm), `ls -l` (a stat of each);
# then, in a second table, `rm -rf` of a directory of RM_N (10,000) empty files.
# vikingfs is remounted between creating and listing, so that its daemon's RSS before
# listing is a fresh daemon's and the growth after `ls -l`, per file, is what one cached
# inode costs.
# WORKDIR must be on ext4 (default: a directory under /var/tmp). Needs root (mounts,
# drop_caches).
set -euo pipefail

BASE=${1:-}
WORK=${2:-$(mktemp -d /var/tmp/vikingfs-bigdir.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
N=${N:-100000}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

targets=(ext4 bindfs vikingfs)
declare -A BINOF=([vikingfs]=$BIN)
if [ -n "$BASE" ]; then
    targets+=(base)
    BINOF[base]=$BASE
fi

cleanup() {
    umount "$WORK/bindfs/mnt" 2>/dev/null || umount -l "$WORK/bindfs/mnt" 2>/dev/null || true
    for t in vikingfs base; do
        [ -d "$WORK/$t/mnt" ] || continue
        timeout 60 "${BINOF[$t]}" umount "$WORK/$t/mnt" 2>/dev/null ||
            umount -l "$WORK/$t/mnt" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/ext4/big" "$WORK/bindfs/src" "$WORK/bindfs/mnt"
bindfs "$WORK/bindfs/src" "$WORK/bindfs/mnt"
for t in vikingfs base; do
    [ -n "${BINOF[$t]:-}" ] || continue
    mkdir -p "$WORK/$t/ws" "$WORK/$t/mnt"
    HOME="$WORK/$t" "${BINOF[$t]}" mount --pid-file "$WORK/$t/pid" "$WORK/$t/ws" "$WORK/$t/mnt"
done
dir_of() {
    case $1 in
    ext4) echo "$WORK/ext4" ;;
    bindfs) echo "$WORK/bindfs/mnt" ;;
    *) echo "$WORK/$1/mnt/resources" ;;
    esac
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$WORK/$1/pid")/status"; }

# secs CMD... -> wall seconds of CMD (output discarded)
secs() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l | xargs printf '%.3f'
}
cold() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
    secs "$@"
}

printf '%-9s %10s %9s %9s %9s %9s %9s %9s %9s %8s\n' target creates/s "ls -f" "ls -f" find find "ls -l" \
    "rss MiB" "rss MiB" "B/inode"
printf '%-9s %10s %9s %9s %9s %9s %9s %9s %9s %8s\n' "" "" cold warm cold warm warm before after ""
for t in "${targets[@]}"; do
    d=$(dir_of "$t")
    mkdir -p "$d/big"
    rate=$(python3 - "$d/big" "$N" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
for i in range(n):
    os.close(os.open(f"{d}/f{i:06}", os.O_CREAT | os.O_WRONLY, 0o644))
print(f"{n / (time.perf_counter() - t):.0f}")
PY
)
    daemon=
    if [ "$t" = vikingfs ] || [ "$t" = base ]; then
        daemon=1
        # A fresh daemon once the queue has drained: what it holds then is what listing adds.
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
        timeout 120 "${BINOF[$t]}" umount "$WORK/$t/mnt"
        HOME="$WORK/$t" "${BINOF[$t]}" mount --pid-file "$WORK/$t/pid" "$WORK/$t/ws" "$WORK/$t/mnt"
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
        before=$(rss_kib "$t")
    fi
    lfc=$(cold ls -f "$d/big")
    lfw=$(secs ls -f "$d/big")
    [ "$(ls -f "$d/big" | wc -l)" -eq $((N + 2)) ] || { echo "$t: wrong count" >&2; exit 1; }
    fc=$(cold find "$d/big")
    fw=$(secs find "$d/big")
    llw=$(secs ls -l "$d/big")
    if [ -n "$daemon" ]; then
        after=$(rss_kib "$t")
        printf '%-9s %10s %9s %9s %9s %9s %9s %9.1f %9.1f %8d\n' "$t" "$rate" "$lfc" "$lfw" "$fc" "$fw" \
            "$llw" "$(echo "$before/1024" | bc -l)" "$(echo "$after/1024" | bc -l)" \
            "$(( (after - before) * 1024 / N ))"
    else
        printf '%-9s %10s %9s %9s %9s %9s %9s %9s %9s %8s\n' "$t" "$rate" "$lfc" "$lfw" "$fc" "$fw" \
            "$llw" - - -
    fi
done

# rm -rf of RM_N empty files in one directory (each indexed first on vikingfs: its records,
# its intent and its lock are what a removal through the mount settles).
RM_N=${RM_N:-10000}
echo
printf '%-9s %10s\n' target "rm -rf $RM_N"
for t in "${targets[@]}"; do
    d=$(dir_of "$t")/rmtree
    mkdir -p "$d"
    python3 - "$d" "$RM_N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(f"{d}/f{i:06}", os.O_CREAT | os.O_WRONLY, 0o644))
PY
    if [ "$t" = vikingfs ] || [ "$t" = base ]; then
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
    fi
    sync
    printf '%-9s %10s\n' "$t" "$(secs rm -rf "$d")"
    [ ! -e "$d" ] || { echo "$t: rm -rf left $d" >&2; exit 1; }
done
