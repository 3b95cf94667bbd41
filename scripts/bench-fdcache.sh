#!/usr/bin/env bash
# Cost of the bounded inode descriptors: the metadata job of bench-fuse.sh (python create,
# stat, rename, unlink of N files) through mounts side by side, then how many files one
# directory takes before a lookup fails.
#
#   scripts/bench-fdcache.sh [BASE_BIN] [WORKDIR]
#
# Targets: native WORKDIR; vikingfs with the default budget; vikingfs with
# VIKINGFS_FD_BUDGET=$SMALL (almost every inode reopened from its handle); BASE_BIN (a vikingfs
# built before the cache) when given. WORKDIR defaults to a dir on /dev/shm (tmpfs).
# Prints the best of ROUNDS interleaved rounds and the ratio to the default-budget mount.
# Needs root (mounts, file handles).
set -euo pipefail

BASE=${1:-}
WORK=${2:-$(mktemp -d /dev/shm/vikingfs-fdbench.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
N=${N:-10000}
MANY=${MANY:-25000}
SMALL=${SMALL:-100}
ROUNDS=${ROUNDS:-3}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

names=(cached small)
declare -A BINOF=([cached]=$BIN [small]=$BIN) BUDGETOF=([cached]= [small]=$SMALL)
if [ -n "$BASE" ]; then
    names+=(base)
    BINOF[base]=$BASE BUDGETOF[base]=
fi

cleanup() {
    for n in "${names[@]}"; do
        "${BINOF[$n]}" umount "$WORK/$n/mnt" 2>/dev/null || umount -l "$WORK/$n/mnt" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/native"
for n in "${names[@]}"; do
    mkdir -p "$WORK/$n/ws" "$WORK/$n/mnt"
    HOME="$WORK/$n" VIKINGFS_FD_BUDGET=${BUDGETOF[$n]} \
        "${BINOF[$n]}" mount --pid-file "$WORK/$n/pid" "$WORK/$n/ws" "$WORK/$n/mnt"
done
dir_of() { [ "$1" = native ] && echo "$WORK/native" || echo "$WORK/$1/mnt/resources"; }

# meta DIR -> operations per second over create+stat+rename+unlink of N files
meta() {
    python3 "$ROOT/scripts/meta-job.py" "$1" "$N" 2>/dev/null
}

# many DIR PID -> "files created before the first error / daemon's descriptors"
many() {
    python3 - "$1" "$MANY" "$2" <<'PY'
import os, sys
d, n, pid = os.path.join(sys.argv[1], "many"), int(sys.argv[2]), sys.argv[3]
os.mkdir(d); done = 0
try:
    for i in range(n):
        os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)); done += 1
except OSError as e:
    pass
fds = len(os.listdir(f"/proc/{pid}/fd")) if pid != "-" else 0
print(f"{done}/{fds}")
PY
}

declare -A R
best() { awk -v a="${1:-0}" -v b="$2" 'BEGIN{print (b + 0 > a + 0) ? b : a}'; }
for ((round = 1; round <= ROUNDS; round++)); do
    for n in native "${names[@]}"; do
        R[$n]=$(best "${R[$n]:-}" "$(meta "$(dir_of $n)")")
    done
    echo "round $round/$ROUNDS done" >&2
done
for n in native "${names[@]}"; do
    pid=-; [ "$n" != native ] && pid=$(cat "$WORK/$n/pid")
    R[$n.many]=$(many "$(dir_of $n)" "$pid")
done

printf '%-8s %-10s %-26s %-28s\n' target budget "metadata ops/s (N=$N)" "$MANY creates: done/daemon fds"
for n in native "${names[@]}"; do
    b=${BUDGETOF[$n]:-default}; [ "$n" = native ] && b=-
    printf '%-8s %-10s %-26s %-28s\n' "$n" "$b" \
        "${R[$n]} ($(awk -v a="${R[$n]}" -v b="${R[cached]}" 'BEGIN{printf "%.2fx", a/b}'))" "${R[$n.many]}"
done
