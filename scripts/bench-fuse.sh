#!/usr/bin/env bash
# Benchmark a vikingfs mount against the native directory and a bindfs mount, in one run.
#
#   scripts/bench-fuse.sh [SIZE] [WORKDIR]      (SIZE default 1G, WORKDIR default a temp dir)
#
# Jobs (fio): sequential write and read of SIZE (1 MiB blocks), 4 KiB random read (10 s);
# metadata (python): create, stat, rename and unlink 10,000 small files.
# Prints each figure (best of ROUNDS=3 interleaved rounds) and its ratio to native. Needs root (mounts, drop_caches) and fio;
# bindfs is optional. Set VIKINGFS_MOUNT_OPTS (e.g. nopassthrough) to compare modes.
# Target vikingfs-pg is a vikingfs mount with its stores on PostgreSQL (storage.backend =
# "postgres", a server started by scripts/pg-server.sh, a fresh database per round), when
# scripts/fetch-postgres.sh fetched it (BENCH_PG=0 skips it). Target base is the same mount
# by BASE_BIN (an older build of vikingfs), when set: the two builds in the same rounds.
set -euo pipefail

SIZE=${1:-1G}
WORK=${2:-$(mktemp -d /var/tmp/vikingfs-bench.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)
command -v fio >/dev/null || { echo "bench-fuse: fio is not installed" >&2; exit 1; }

# Each target runs on a filesystem of its own, made fresh for every round (an ext4 image on a
# loop device): ext4 slows creates down after many deletes (it skips recently freed inodes),
# so on one shared filesystem every target would pay for the files the previous one deleted.
# FRESH_FS=0 (or no mkfs.ext4/losetup) runs all of them in WORKDIR instead.
FRESH_FS=${FRESH_FS:-1}
if [ "$FRESH_FS" = 1 ] && ! { command -v mkfs.ext4 && command -v losetup; } >/dev/null; then
    echo "bench-fuse: no mkfs.ext4/losetup: all targets share $WORK" >&2
    FRESH_FS=0
fi
mkdir -p "$WORK/fs" "$WORK/mnt" "$WORK/bindfs"

# Unmount $1, retrying while it is busy (a daemon that was just unmounted is still exiting).
unmount_retry() {
    for _ in $(seq 50); do
        mountpoint -q "$1" || return 0
        umount "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    umount -l "$1"
}

# The loop devices of the image (set up inside a $(...) subshell: found by file, not kept).
detach_loops() {
    losetup -j "$WORK/fs.img" -O NAME -n 2>/dev/null | xargs -r -n1 losetup -d 2>/dev/null || true
}

# A fresh filesystem at $WORK/fs (or the same directory, emptied, when FRESH_FS=0).
fresh_fs() {
    if [ "$FRESH_FS" = 1 ]; then
        truncate -s "${IMAGE_SIZE:-4G}" "$WORK/fs.img"
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$WORK/fs.img"
        mount "$(losetup -f --show --direct-io=on "$WORK/fs.img")" "$WORK/fs"
    else
        rm -rf "${WORK:?}/fs" && mkdir -p "$WORK/fs"
    fi
}

drop_fs() {
    if [ "$FRESH_FS" = 1 ]; then
        unmount_retry "$WORK/fs"
        detach_loops
        rm -f "$WORK/fs.img"
    fi
}

opts=()
[ -n "${VIKINGFS_MOUNT_OPTS:-}" ] && opts=(-o "$VIKINGFS_MOUNT_OPTS")
# Set up target $1 on a fresh filesystem; prints the directory its jobs run in.
target_up() {
    fresh_fs
    case $1 in
    native) mkdir -p "$WORK/fs/native" && echo "$WORK/fs/native" ;;
    vikingfs)
        HOME="$WORK" "$BIN" mount "${opts[@]}" "$WORK/fs/ws" "$WORK/mnt" >&2
        mkdir -p "$WORK/mnt/resources/bench" && echo "$WORK/mnt/resources/bench" ;;
    base)
        HOME="$WORK" "$BASE_BIN" mount "${opts[@]}" "$WORK/fs/ws" "$WORK/mnt" >&2
        mkdir -p "$WORK/mnt/resources/bench" && echo "$WORK/mnt/resources/bench" ;;
    vikingfs-pg)
        # A new workspace each round, and a database serves one workspace: a new database.
        PGDB=$((PGDB + 1))
        "$ROOT/target/postgres/bin/psql" -q "$PGDSN" -c "CREATE DATABASE round$PGDB" >&2
        mkdir -p "$WORK/pghome/.vikingfs"
        printf '{"storage":{"backend":"postgres","postgres":{"dsn":"%s"}}}\n' \
            "${PGDSN/dbname=vikingfs/dbname=round$PGDB}" > "$WORK/pghome/.vikingfs/config.json"
        HOME="$WORK/pghome" "$BIN" mount "${opts[@]}" "$WORK/fs/ws" "$WORK/mnt" >&2
        mkdir -p "$WORK/mnt/resources/bench" && echo "$WORK/mnt/resources/bench" ;;
    bindfs)
        mkdir -p "$WORK/fs/src" && bindfs "$WORK/fs/src" "$WORK/bindfs" && echo "$WORK/bindfs" ;;
    esac
}

target_down() {
    case $1 in
    base) "$BASE_BIN" umount "$WORK/mnt" 2>/dev/null || true; unmount_retry "$WORK/mnt" ;;
    vikingfs | vikingfs-pg) "$BIN" umount "$WORK/mnt" 2>/dev/null || true; unmount_retry "$WORK/mnt" ;;
    bindfs) unmount_retry "$WORK/bindfs" ;;
    esac
    drop_fs
}

cleanup() {
    "$BIN" umount "$WORK/mnt" 2>/dev/null || umount -l "$WORK/mnt" 2>/dev/null || true
    umount "$WORK/bindfs" 2>/dev/null || umount -l "$WORK/bindfs" 2>/dev/null || true
    if [ "$FRESH_FS" = 1 ]; then
        umount "$WORK/fs" 2>/dev/null || umount -l "$WORK/fs" 2>/dev/null || true
        detach_loops
    fi
    [ -n "${PGDSN:-}" ] && "$ROOT/scripts/pg-server.sh" stop "$PGDIR"
    rm -rf "$WORK"
}
trap cleanup EXIT

targets=(native vikingfs)
[ -n "${BASE_BIN:-}" ] && targets+=(base)
command -v bindfs >/dev/null && targets+=(bindfs)
PGDIR=/tmp/vikingfs-pg-bench-$$ PGDB=0 PGDSN=
if [ "${BENCH_PG:-1}" = 1 ] && [ -x "$ROOT/target/postgres/bin/postgres" ]; then
    PGDSN=$("$ROOT/scripts/pg-server.sh" start "$PGDIR")
    targets+=(vikingfs-pg)
fi

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# fio JOB DIR -> bandwidth in MiB/s (or IOPS for randread)
fio_job() {
    local job=$1 dir=$2 out
    case $job in
    seqwrite) out=$(fio --name=w --directory="$dir" --filename=data --rw=write --bs=1M \
        --size="$SIZE" --ioengine=psync --end_fsync=1 --output-format=terse --terse-version=3) ;;
    # The first read of a file just written often comes from the VM host's disk rather than
    # its cache (0.6 vs 3 GiB/s here, natively too): read it once from the disk (caches
    # dropped first, or the read is answered by this machine's page cache and warms nothing),
    # then drop this machine's caches again and measure.
    seqread) drop_caches; cat "$dir/data" > /dev/null; drop_caches
        out=$(fio --name=r --directory="$dir" --filename=data --rw=read \
        --bs=1M --size="$SIZE" --ioengine=psync --output-format=terse --terse-version=3) ;;
    randread) drop_caches; out=$(fio --name=rr --directory="$dir" --filename=data --rw=randread \
        --bs=4k --size="$SIZE" --ioengine=psync --time_based --runtime=10 \
        --output-format=terse --terse-version=3) ;;
    esac
    # terse v3: field 7 = read bandwidth KiB/s, 8 = read IOPS, 48 = write KiB/s
    case $job in
    seqwrite) echo "$out" | awk -F';' '{printf "%.1f", $48/1024}' ;;
    seqread) echo "$out" | awk -F';' '{printf "%.1f", $7/1024}' ;;
    randread) echo "$out" | awk -F';' '{printf "%.0f", $8}' ;;
    esac
}

# metadata DIR -> operations per second over create+stat+rename+unlink of 10,000 files
# (each phase's rate goes to stderr, prefixed with the target)
meta_job() {
    local phases
    phases=$(mktemp)
    python3 "$ROOT/scripts/meta-job.py" "$1" 10000 2>"$phases"
    sed "s|^|metadata $2: |" "$phases" >&2
    rm -f "$phases"
}

# The machine is shared and noisy: ROUNDS rounds, targets interleaved within each round,
# best figure of each kept.
ROUNDS=${ROUNDS:-3}
declare -A R
best() { awk -v a="${1:-0}" -v b="$2" 'BEGIN{print (b + 0 > a + 0) ? b : a}'; }
for ((round = 1; round <= ROUNDS; round++)); do
    for name in "${targets[@]}"; do
        target_up "$name" > "$WORK/dir"   # not in $(...): PGDB must count across rounds
        dir=$(cat "$WORK/dir")
        for job in seqwrite seqread randread; do
            v=$(fio_job $job "$dir")
            echo "$job $name: $v" >&2
            R[$name.$job]=$(best "${R[$name.$job]:-}" "$v")
        done
        rm -f "$dir/data"
        R[$name.meta]=$(best "${R[$name.meta]:-}" "$(meta_job "$dir" "$name")")
        target_down "$name"
    done
    echo "round $round/$ROUNDS done" >&2
done

printf '%-10s %-22s %-22s %-22s %-22s\n' target "seq write MiB/s" "seq read MiB/s" "rand 4k read IOPS" "metadata ops/s"
for name in "${targets[@]}"; do
    printf '%-10s' "$name"
    for job in seqwrite seqread randread meta; do
        v=${R[$name.$job]} n=${R[native.$job]}
        printf ' %-22s' "$v ($(awk -v a="$v" -v b="$n" 'BEGIN{printf "%.2fx", (b>0)?a/b:0}'))"
    done
    echo
done
