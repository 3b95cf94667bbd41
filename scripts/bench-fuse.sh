#!/usr/bin/env bash
# Benchmark a vikingfs mount against the native directory and a bindfs mount, in one run.
#
#   scripts/bench-fuse.sh [SIZE] [WORKDIR]      (SIZE default 1G, WORKDIR default a temp dir)
#
# Jobs (fio): sequential write and read of SIZE (1 MiB blocks), 4 KiB random read (one pass
# over the file in random order, at most 10 s); metadata (python): create, stat, rename and
# unlink 10,000 small files.
# Prints the best and the median of ROUNDS=3 interleaved rounds for each figure, each with its
# ratio to native's (the same statistic). Needs root (mounts, drop_caches) and fio; bindfs is
# optional (BENCH_BINDFS=0 skips it). Set VIKINGFS_MOUNT_OPTS (e.g. nopassthrough) to compare modes.
#
# Trust: before any round measures a target, the script checks that its directory is on the
# mount it claims (findmnt: fuse.vikingfs at the vikingfs mount point, fuse or fuse.bindfs at
# bindfs's, the native directory on no FUSE mount: the fresh ext4 filesystem) and refuses in
# one line otherwise. Reads never come from this machine's page cache: every read phase starts
# with caches dropped, and reads are O_DIRECT (fio --direct=1) when every target accepts
# O_DIRECT all the way down (probed before round 1: no page of the file or of a FUSE daemon's
# backing file cached after the read); when one does not, no target uses it (the page cache
# then serves only what a single pass reads ahead). BENCH_DIRECT=1 insists on O_DIRECT (refuses
# otherwise), BENCH_DIRECT=0 never uses it. Every mount made is undone on exit, failed or not.
# Target vikingfs-pg is a vikingfs mount with its stores on PostgreSQL (storage.backend =
# "postgres", a server started by scripts/pg-server.sh, a fresh database per round), when
# scripts/fetch-postgres.sh fetched it (BENCH_PG=0 skips it). Target base is the same mount
# by BASE_BIN (an older build of vikingfs), when set: the two builds in the same rounds.
set -euo pipefail

SIZE=${1:-1G}
WORK=${2:-$(mktemp -d /var/tmp/vikingfs-bench.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
# One line, then exit (the EXIT trap undoes whatever was mounted).
refuse() {
    echo "bench-fuse: $*: refusing to measure" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || refuse "not root (mounts and drop_caches need it)"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)
command -v fio >/dev/null || refuse "fio is not installed (apt-get install -y fio)"
command -v findmnt >/dev/null || refuse "findmnt is not installed (util-linux)"
[ -w /proc/sys/vm/drop_caches ] || refuse "cannot write /proc/sys/vm/drop_caches"
BENCH_DIRECT=${BENCH_DIRECT:-auto}

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

# Undo every mount this run made (on any exit: done, failed, refused or interrupted).
cleanup() {
    set +e
    if mountpoint -q "$WORK/mnt"; then
        "$BIN" umount "$WORK/mnt" 2>/dev/null
        [ -n "${BASE_BIN:-}" ] && mountpoint -q "$WORK/mnt" && "$BASE_BIN" umount "$WORK/mnt" 2>/dev/null
        mountpoint -q "$WORK/mnt" && { umount "$WORK/mnt" 2>/dev/null || umount -l "$WORK/mnt"; }
    fi
    mountpoint -q "$WORK/bindfs" && { umount "$WORK/bindfs" 2>/dev/null || umount -l "$WORK/bindfs"; }
    if [ "$FRESH_FS" = 1 ]; then
        mountpoint -q "$WORK/fs" && { umount "$WORK/fs" 2>/dev/null || umount -l "$WORK/fs"; }
        detach_loops
    fi
    [ -n "${PGDSN:-}" ] && "$ROOT/scripts/pg-server.sh" stop "$PGDIR"
    # --one-file-system: were a mount left (umount -l failed), nothing under it is removed.
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

targets=(native vikingfs)
[ -n "${BASE_BIN:-}" ] && targets+=(base)
[ "${BENCH_BINDFS:-1}" = 1 ] && command -v bindfs >/dev/null && targets+=(bindfs)
PGDIR=/tmp/vikingfs-pg-bench-$$ PGDB=0 PGDSN=
if [ "${BENCH_PG:-1}" = 1 ] && [ -x "$ROOT/target/postgres/bin/postgres" ]; then
    PGDSN=$("$ROOT/scripts/pg-server.sh" start "$PGDIR")
    targets+=(vikingfs-pg)
fi

drop_caches() { sync && echo 3 > /proc/sys/vm/drop_caches; }

# check_target NAME DIR: DIR is on the mount target NAME claims to be, and answers; else refuse.
check_target() {
    local name=$1 dir=$2 line mp fstype src
    line=$(findmnt -n -o TARGET,FSTYPE,SOURCE -T "$dir" 2>/dev/null) ||
        refuse "$name: findmnt knows no mount holding $dir"
    read -r mp fstype src <<< "$line"
    stat "$dir" > /dev/null 2>&1 || refuse "$name: $dir does not answer (on $mp, $fstype)"
    case $name in
    native)
        case $fstype in fuse | fuse.* | fuseblk)
            refuse "native: $dir is on a FUSE mount ($mp, $fstype)" ;;
        esac
        [ "$FRESH_FS" = 0 ] || [ "$mp" = "$WORK/fs" ] ||
            refuse "native: $dir is on $mp ($fstype), not the fresh filesystem at $WORK/fs" ;;
    base) # an older build: its mount may predate the fuse.vikingfs type (fuser's plain fuse)
        case $fstype in fuse | fuse.vikingfs) ;; *) false ;; esac && [ "$mp" = "$WORK/mnt" ] ||
            refuse "base: $dir is on $mp ($fstype), not a vikingfs mount at $WORK/mnt" ;;
    vikingfs | vikingfs-pg)
        [ "$mp" = "$WORK/mnt" ] && [ "$fstype" = fuse.vikingfs ] ||
            refuse "$name: $dir is on $mp ($fstype), not a fuse.vikingfs mount at $WORK/mnt"
        [ "$src" = "$WORK/fs/ws" ] ||
            refuse "$name: the mount at $WORK/mnt serves $src, not the workspace $WORK/fs/ws" ;;
    bindfs)
        case $fstype in fuse | fuse.bindfs) ;; *) false ;; esac && [ "$mp" = "$WORK/bindfs" ] ||
            refuse "bindfs: $dir is on $mp ($fstype), not a fuse/fuse.bindfs mount at $WORK/bindfs" ;;
    esac
}

# Whether DIR reads with O_DIRECT, all the way down: the read is accepted, and neither the
# file nor the file beneath it in $WORK/fs (a FUSE daemon's backing file) is left in the page
# cache (a FUSE daemon may serve an O_DIRECT read with buffered reads of its own: bindfs does).
direct_ok() {
    local f=$1/probe ok=0 pages
    head -c 8M /dev/urandom > "$f" && drop_caches || return 1
    dd if="$f" of=/dev/null bs=1M iflag=direct status=none 2>/dev/null &&
        dd if="$f" of=/dev/null bs=4k count=64 iflag=direct status=none 2>/dev/null || ok=1
    if [ $ok = 0 ] && command -v fincore >/dev/null; then
        # shellcheck disable=SC2046
        pages=$(fincore -n -o PAGES "$f" $(find "$WORK/fs" -xdev -type f -name probe) |
            awk '{s += $1} END {print s + 0}')
        [ "$pages" = 0 ] || ok=1
    fi
    rm -f "$f"
    return $ok
}

# Before round 1: every target up, checked and probed for O_DIRECT, then down again.
DIRECT=1
for name in "${targets[@]}"; do
    target_up "$name" > "$WORK/dir"
    dir=$(cat "$WORK/dir")
    check_target "$name" "$dir"
    if [ "$BENCH_DIRECT" != 0 ] && ! direct_ok "$dir"; then
        [ "$BENCH_DIRECT" = 1 ] && refuse "$name: O_DIRECT reads of $dir are refused or cached"
        echo "bench-fuse: $name: O_DIRECT reads refused or cached beneath: no target uses them" >&2
        DIRECT=0
    fi
    target_down "$name"
done
[ "$BENCH_DIRECT" = 0 ] && DIRECT=0
if [ "$DIRECT" = 1 ]; then
    READS="O_DIRECT (fio --direct=1), caches dropped before each read phase"
else
    READS="buffered, caches dropped before each read phase"
fi
echo "bench-fuse: reads $READS" >&2

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
    seqread) drop_caches; dd if="$dir/data" of=/dev/null bs=1M status=none "${ddirect[@]}"
        drop_caches
        out=$(fio --name=r --directory="$dir" --filename=data --rw=read --direct="$DIRECT" \
        --bs=1M --size="$SIZE" --ioengine=psync --output-format=terse --terse-version=3) ;;
    # One pass in random order (fio's random map reads no block twice), so that without
    # O_DIRECT no read is answered by a page an earlier read of the job brought in; at most 10 s.
    # No fadvise(RANDOM): it would switch readahead off for native's file only, not for the
    # file a FUSE daemon reads beneath the mount.
    randread) drop_caches; out=$(fio --name=rr --directory="$dir" --filename=data \
        --rw=randread --direct="$DIRECT" --bs=4k --size="$SIZE" --ioengine=psync --runtime=10 \
        --fadvise_hint=0 --output-format=terse --terse-version=3) ;;
    esac
    # terse v3: field 7 = read bandwidth KiB/s, 8 = read IOPS, 48 = write KiB/s
    case $job in
    seqwrite) echo "$out" | awk -F';' '{printf "%.1f", $48/1024}' ;;
    seqread) echo "$out" | awk -F';' '{printf "%.1f", $7/1024}' ;;
    randread) echo "$out" | awk -F';' '{printf "%.0f", $8}' ;;
    esac
}

# metadata DIR NAME -> operations per second over create+stat+rename+unlink of 10,000 files
# (each phase's rate goes to stderr, prefixed with the target, and to $WORK/phases)
meta_job() {
    drop_caches
    python3 "$ROOT/scripts/meta-job.py" "$1" 10000 2>"$WORK/phases"
    sed "s|^|metadata $2: |" "$WORK/phases" >&2
}

# The machine is shared and noisy: ROUNDS rounds, targets interleaved within each round, each
# target checked before it is measured; every figure of every round kept (R[target.job] is the
# list), the best and the median reported.
ROUNDS=${ROUNDS:-3}
declare -A R
ddirect=()
[ "$DIRECT" = 1 ] && ddirect=(iflag=direct)
for ((round = 1; round <= ROUNDS; round++)); do
    for name in "${targets[@]}"; do
        target_up "$name" > "$WORK/dir"   # not in $(...): PGDB must count across rounds
        dir=$(cat "$WORK/dir")
        check_target "$name" "$dir"
        for job in seqwrite seqread randread; do
            v=$(fio_job $job "$dir")
            echo "$job $name: $v" >&2
            R[$name.$job]+=" $v"
        done
        rm -f "$dir/data"
        v=$(meta_job "$dir" "$name")
        R[$name.meta]+=" $v"
        # create=N/s stat=N/s rename=N/s unlink=N/s
        for kv in $(cat "$WORK/phases"); do
            R[$name.${kv%%=*}]+=" $(echo "${kv#*=}" | tr -dc 0-9.)"
        done
        target_down "$name"
    done
    echo "round $round/$ROUNDS done" >&2
done

# stat best|median LIST
stat_of() {
    tr ' ' '\n' <<< "$2" | grep . | sort -g | awk -v s="$1" '{v[NR] = $1}
        END {
            if (!NR) { print 0; exit }
            if (s == "best") print v[NR]
            else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        }'
}

# table TITLE JOB... : one line per target and statistic, each figure with its ratio to native's.
table() {
    local title=$1 name s job v n
    shift
    printf '%-12s %-7s' "$title" stat
    for job in "$@"; do printf ' %-20s' "${HEAD[$job]}"; done
    echo
    for name in "${targets[@]}"; do
        for s in best median; do
            printf '%-12s %-7s' "$name" "$s"
            for job in "$@"; do
                v=$(stat_of $s "${R[$name.$job]:-}") n=$(stat_of $s "${R[native.$job]:-}")
                printf ' %-20s' "$(awk -v a="$v" -v b="$n" 'BEGIN {
                    printf (a < 100) ? "%.1f" : "%.0f", a; printf " (%.2fx)", (b > 0) ? a / b : 0 }')"
            done
            echo
        done
    done
}

declare -A HEAD=([seqwrite]="seq write MiB/s" [seqread]="seq read MiB/s"
    [randread]="rand 4k read IOPS" [meta]="metadata ops/s" [create]="create/s"
    [stat]="stat/s" [rename]="rename/s" [unlink]="unlink/s")
echo "size $SIZE, $ROUNDS rounds; reads $READS"
table target seqwrite seqread randread meta
echo
table metadata create stat rename unlink
