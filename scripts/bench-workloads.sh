#!/usr/bin/env bash
# What people and agents do to a tree of real files, side by side on one fresh ext4 image:
# natively, through bindfs, through vikingfs (this build, release, default settings: index on,
# history on) and through BASE_BIN (an older vikingfs) when given; ROUNDS (3) interleaved
# rounds, the targets' order turned by one each round.
#
#   scripts/bench-workloads.sh [BASE_BIN] [WORKDIR]
#
# Workloads, in this order each round, each target in turn:
#   clone    git clone --no-local of REPO (default: this repository, by path): a pack received,
#            then the checkout written
#   tar      tar xf of a tarball of /usr/include (made once, outside the image)
#   cp       cp -r /usr/share/doc
#   npm      an npm-like tree: NPM_FILES (10,000) files of 0-4 KiB of real text (pieces of
#            /usr/include's headers) in NPM_DIRS (2,000) directories under NPM_ROOT
#            (node_modules: not indexed by default), written by one python
#   du       du -s of all four trees, caches dropped first (cold)
#   find     find of all four trees, cold
#   mv       every file of the npm-like tree renamed in its directory, by one python
#            (rename(2) of indexed files)
#   rm-*     rm -rf of each tree in turn (each indexed: the previous step settled)
# Per run: wall seconds; the daemon's CPU meanwhile (vikingfs's or bindfs's; native has
# none); for vikingfs the seconds from the workload's end until the index, the history and
# the summaries are current (`vikingfs wait`: its queues drained, its removals settled) and
# the daemon's CPU in that time; the daemon's peak RSS over both (VmHWM, reset before each
# run; each run's line on stderr gives its RSS once settled too). The table gives each
# target's medians and its wall time's ratio to bindfs's median.
# THREADS=1 prints a vikingfs daemon's CPU by thread for each run (stderr). WORKLOADS (a
# space-separated list) runs some of them only, in the order given.
#
# Every step is bounded by STEP_TIMEOUT (1800 s); every mount and the loop device are undone
# on exit, failed or not. WORKDIR (default a directory under /var/tmp) holds the image
# (IMAGE_SIZE, 16G, sparse). Needs root (mounts, drop_caches), bindfs, git, tar, python3.
set -euo pipefail

BASE_BIN=${1:-}
WORK=${2:-$(mktemp -d /var/tmp/vikingfs-workloads.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
ROUNDS=${ROUNDS:-3}
REPO=${REPO:-$ROOT}
NPM_FILES=${NPM_FILES:-10000}
NPM_DIRS=${NPM_DIRS:-2000}
# Where the npm-like tree's packages go: node_modules (left out of the index by default, as
# npm's are) or, e.g. NPM_ROOT=pkgs, a directory that is indexed.
NPM_ROOT=${NPM_ROOT:-node_modules}
STEP_TIMEOUT=${STEP_TIMEOUT:-1800}
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"

refuse() {
    echo "bench-workloads: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || refuse "not root (mounts and drop_caches need it)"
for c in bindfs git tar python3 mkfs.ext4 losetup findmnt bc; do
    command -v $c >/dev/null || refuse "$c is not installed"
done
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

targets=(native bindfs vikingfs)
declare -A BINOF=([vikingfs]=$BIN)
if [ -n "$BASE_BIN" ]; then
    targets+=(base)
    BINOF[base]=$BASE_BIN
fi
is_vk() { [ "$1" = vikingfs ] || [ "$1" = base ]; }

# Undo every mount this run made, then the loop device, then the work directory.
cleanup() {
    set +e
    local t
    for t in vikingfs base; do
        mountpoint -q "$WORK/$t.mnt" || continue
        timeout 60 "${BINOF[$t]}" umount "$WORK/$t.mnt" 2>/dev/null
        mountpoint -q "$WORK/$t.mnt" && { umount "$WORK/$t.mnt" 2>/dev/null || umount -l "$WORK/$t.mnt"; }
    done
    mountpoint -q "$WORK/bindfs.mnt" && { umount "$WORK/bindfs.mnt" 2>/dev/null || umount -l "$WORK/bindfs.mnt"; }
    if mountpoint -q "$WORK/fs"; then
        for _ in $(seq 50); do umount "$WORK/fs" 2>/dev/null && break; sleep 0.2; done
        mountpoint -q "$WORK/fs" && umount -l "$WORK/fs"
    fi
    losetup -j "$WORK/fs.img" -O NAME -n 2>/dev/null | xargs -r -n1 losetup -d 2>/dev/null
    # --one-file-system: were a mount left (umount -l failed), nothing under it is removed.
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# One fresh ext4 image for every target (each in a directory of its own).
mkdir -p "$WORK/fs" "$WORK/bindfs.mnt" "$WORK/vikingfs.mnt" "$WORK/base.mnt"
truncate -s "${IMAGE_SIZE:-16G}" "$WORK/fs.img"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$WORK/fs.img"
mount "$(losetup -f --show --direct-io=on "$WORK/fs.img")" "$WORK/fs"

declare -A DIR PID
mkdir -p "$WORK/fs/native" "$WORK/fs/bindfs.src"
DIR[native]=$WORK/fs/native
bindfs "$WORK/fs/bindfs.src" "$WORK/bindfs.mnt"
PID[bindfs]=$(pgrep -n -x bindfs)
DIR[bindfs]=$WORK/bindfs.mnt
for t in vikingfs base; do
    [ -n "${BINOF[$t]:-}" ] || continue
    mkdir -p "$WORK/fs/$t/home" "$WORK/fs/$t/ws"
    HOME="$WORK/fs/$t/home" timeout 120 "${BINOF[$t]}" mount --pid-file "$WORK/$t.pid" \
        "$WORK/fs/$t/ws" "$WORK/$t.mnt" >&2
    PID[$t]=$(cat "$WORK/$t.pid")
    DIR[$t]=$WORK/$t.mnt/resources/bench
    mkdir -p "${DIR[$t]}"
done
# Each target's directory is where it claims to be: native on the image itself, the others
# on their FUSE mounts.
for t in "${targets[@]}"; do
    mp=$(findmnt -n -o TARGET -T "${DIR[$t]}")
    fstype=$(findmnt -n -o FSTYPE -T "${DIR[$t]}")
    case $t in
    native) [ "$mp" = "$WORK/fs" ] ;;
    bindfs) [ "$mp" = "$WORK/bindfs.mnt" ] && [[ $fstype == fuse* ]] ;;
    *) [ "$mp" = "$WORK/$t.mnt" ] && [[ $fstype == fuse* ]] ;;
    esac || refuse "$t: ${DIR[$t]} is on $mp ($fstype), not where it should be"
done

tar cf "$WORK/include.tar" -C /usr include
python3 - "$WORK/npm.texts" <<'PY'
# Real text for the npm-like tree: the headers of /usr/include, cut into pieces of 0-4 KiB.
import os, random, sys
random.seed(44)
pool = []
for root, _, files in os.walk("/usr/include"):
    for f in sorted(files):
        p = os.path.join(root, f)
        if os.path.isfile(p) and not os.path.islink(p):
            pool.append(open(p, "rb").read())
blob = b"".join(pool)
with open(sys.argv[1], "wb") as out:
    out.write(blob[: 64 << 20])
PY

npm_tree() {
    python3 - "$1" "$NPM_FILES" "$NPM_DIRS" "$WORK/npm.texts" "$NPM_ROOT" <<'PY'
import os, random, sys
d, nfiles, ndirs, texts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
top = sys.argv[5]
blob = open(texts, "rb").read()
rnd = random.Random(44)
# NPM_ROOT/pkgN/{., lib, lib/internal, dist, test}: five directories a package.
dirs = []
for i in range((ndirs + 4) // 5):
    pkg = f"{d}/{top}/pkg{i:04}"
    dirs += [pkg, f"{pkg}/lib", f"{pkg}/lib/internal", f"{pkg}/dist", f"{pkg}/test"]
dirs = dirs[:ndirs]
for x in dirs:
    os.makedirs(x, exist_ok=True)
for i in range(nfiles):
    size = rnd.randrange(0, 4097)
    at = rnd.randrange(0, len(blob) - size)
    ext = ("js", "json", "md", "ts")[i % 4]
    with open(f"{dirs[i % len(dirs)]}/f{i:05}.{ext}", "wb") as f:
        f.write(blob[at : at + size])
PY
}
cold() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
    "$@"
}
# workload NAME DIR: run workload NAME in DIR
workload() {
    local d=$2
    case $1 in
    clone) git clone -q --no-local "$REPO" "$d/repo" ;;
    tar) mkdir "$d/inc" && tar xf "$WORK/include.tar" -C "$d/inc" ;;
    cp) cp -r /usr/share/doc "$d/doc" ;;
    npm) npm_tree "$d/npm" ;;
    du) cold du -s "$d" ;;
    find) cold find "$d" ;;
    mv) python3 -c 'import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        os.rename(f"{root}/{f}", f"{root}/{f}.moved")' "$d/npm" ;;
    rm-clone) rm -rf "$d/repo" ;;
    rm-tar) rm -rf "$d/inc" ;;
    rm-cp) rm -rf "$d/doc" ;;
    rm-npm) rm -rf "$d/npm" ;;
    esac
}
# For `timeout bash -c`: every step bounded.
export -f workload npm_tree cold
export WORK NPM_FILES NPM_DIRS NPM_ROOT REPO
# check NAME DIR: what the workload left is what it should have
check() {
    local d=$2
    case $1 in
    clone) [ -n "$(git -C "$d/repo" rev-parse HEAD)" ] ;;
    tar) [ "$(find "$d/inc" -type f | wc -l)" = "$(find /usr/include -type f | wc -l)" ] ;;
    cp) [ "$(find "$d/doc" | wc -l)" = "$(find /usr/share/doc | wc -l)" ] ;;
    npm) [ "$(find "$d/npm" -type f | wc -l)" = "$NPM_FILES" ] ;;
    mv) [ "$(find "$d/npm" -type f -name '*.moved' | wc -l)" = "$NPM_FILES" ] ;;
    rm-clone) [ ! -e "$d/repo" ] ;;
    rm-tar) [ ! -e "$d/inc" ] ;;
    rm-cp) [ ! -e "$d/doc" ] ;;
    rm-npm) [ ! -e "$d/npm" ] ;;
    *) true ;;
    esac || refuse "$1 on ${3:-?}: the tree is not what it should be"
}

# run TARGET WORKLOAD -> "wall cpu_ms settle_s settle_cpu_ms peak_kib rss_kib"
run() {
    local t=$1 w=$2 pid=${PID[$1]:-} c0=0 c1=0 c2=0 th0= s settle=0 peak=0 rss=0
    if [ -n "$pid" ]; then
        peak_reset "$pid"
        c0=$(pid_cpu_ms "$pid")
        is_vk "$t" && th0=$(pid_threads_ms "$pid")
    fi
    s=$(secs timeout "$STEP_TIMEOUT" bash -c 'workload "$@"' _ "$w" "${DIR[$t]}") ||
        refuse "$w on $t failed or took over ${STEP_TIMEOUT}s"
    [ -n "$pid" ] && c1=$(pid_cpu_ms "$pid")
    if is_vk "$t"; then
        settle=$(vk_settle "${BINOF[$t]}" "$WORK/fs/$t/home" "$WORK/fs/$t/ws" "$STEP_TIMEOUT") ||
            refuse "$t did not settle after $w within ${STEP_TIMEOUT}s"
        [ "${THREADS:-0}" = 1 ] &&
            threads_delta "$th0" "$(pid_threads_ms "$pid")" | sed "s/^/  $t $w by thread: /" >&2
    fi
    if [ -n "$pid" ]; then
        c2=$(pid_cpu_ms "$pid")
        peak=$(peak_kib "$pid")
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    fi
    check "$w" "${DIR[$t]}" "$t"
    echo "$s $((c1 - c0)) $settle $((c2 - c1)) $peak $rss"
}

read -r -a workloads <<<"${WORKLOADS:-clone tar cp npm du find mv rm-clone rm-tar rm-cp rm-npm}"
declare -A WALL CPU SETTLE SCPU PEAK
n=${#targets[@]}
for r in $(seq "$ROUNDS"); do
    # The order turns each round, so no target always runs right after the same one.
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${targets[$(((i + r - 1) % n))]}"); done
    for w in "${workloads[@]}"; do
        for t in "${order[@]}"; do
            read -r s c st sc pk rs < <(run "$t" "$w")
            k=$t.$w
            WALL[$k]+="$s " CPU[$k]+="$c " SETTLE[$k]+="$st " SCPU[$k]+="$sc " PEAK[$k]+="$pk "
            printf 'round %d: %-8s %-9s %8.3f s  daemon CPU %6d ms  settled in %7.3f s, CPU %6d ms  peak %4d MiB, then %4d MiB\n' \
                "$r" "$t" "$w" "$s" "$c" "$st" "$sc" $((pk / 1024)) $((rs / 1024)) >&2
        done
    done
done

echo
echo "medians of $ROUNDS round(s); ratio = wall / bindfs's wall; CPU of the daemon (s);"
echo "settle = from the workload's end until the index and summaries are current"
printf '%-9s %-8s %8s %6s %8s %8s %8s %8s\n' workload target wall ratio CPU settle "CPU set" "peak MiB"
for w in "${workloads[@]}"; do
    bw=$(echo "${WALL[bindfs.$w]}" | median)
    for t in "${targets[@]}"; do
        k=$t.$w
        m=$(echo "${WALL[$k]}" | median)
        printf '%-9s %-8s %8.3f %6.2f %8.2f %8.3f %8.2f %8d\n' "$w" "$t" "$m" \
            "$(echo "$m / ($bw + 0.0005)" | bc -l)" \
            "$(echo "$(echo "${CPU[$k]}" | median) / 1000" | bc -l)" \
            "$(echo "${SETTLE[$k]}" | median)" \
            "$(echo "$(echo "${SCPU[$k]}" | median) / 1000" | bc -l)" \
            $(($(echo "${PEAK[$k]}" | median) / 1024))
    done
done
