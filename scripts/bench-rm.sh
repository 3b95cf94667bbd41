#!/usr/bin/env bash
# rm -rf of one directory of RM_N (10,000) files of real text (RM_CONTENT, default
# /usr/include: each file the text of one header there, taken in turn; RM_CONTENT=empty for
# empty files), side by side and interleaved: through
# bindfs, through vikingfs (this build) and through BASE_BIN (an older vikingfs), ROUNDS
# times each; prints every run and the medians (a vikingfs daemon's CPU by thread too), and
# the floor on the backing filesystem itself (a native unlink beside the lock file, rename
# into the history and unlock that every kept removal makes). SYSCALLS=1 adds a run under
# `perf trace -s`: system calls per removal by thread.
#
#   scripts/bench-rm.sh BASE_BIN [WORKDIR]
#
# Two kinds of tree on vikingfs: `indexed` (each file's record written before the rm: its
# records and intent are what a removal settles) and `ignored` (under a directory that
# `.vikingignore` leaves out: no records). History is on (the default) in both: every file
# removed is kept. WORKDIR must be on ext4 (default: a directory under /var/tmp). Needs root.
set -euo pipefail

BASE=${1:?usage: bench-rm.sh BASE_BIN [WORKDIR]}
WORK=${2:-$(mktemp -d /var/tmp/vikingfs-rm.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
RM_N=${RM_N:-10000}
RM_CONTENT=${RM_CONTENT:-/usr/include}
ROUNDS=${ROUNDS:-3}
declare -A BINOF=([new]=$BIN [old]=$BASE)
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"

cleanup() {
    umount "$WORK/bindfs/mnt" 2>/dev/null || umount -l "$WORK/bindfs/mnt" 2>/dev/null || true
    for t in new old; do
        [ -d "$WORK/$t/mnt" ] || continue
        timeout 60 "${BINOF[$t]}" umount "$WORK/$t/mnt" 2>/dev/null ||
            umount -l "$WORK/$t/mnt" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/bindfs/src" "$WORK/bindfs/mnt"
bindfs "$WORK/bindfs/src" "$WORK/bindfs/mnt"
BINDFS_PID=$(pgrep -n -x bindfs)
for t in new old; do
    mkdir -p "$WORK/$t/ws" "$WORK/$t/mnt"
    HOME="$WORK/$t" "${BINOF[$t]}" mount --pid-file "$WORK/$t/pid" "$WORK/$t/ws" "$WORK/$t/mnt"
    printf 'ign/\n' >"$WORK/$t/mnt/resources/.vikingignore"
done

make_tree() {
    python3 - "$1" "$RM_N" "$RM_CONTENT" <<'PY'
import os, sys
d, n, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
texts = [b""]
if src != "empty":
    texts = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) <= 256 << 10:
                texts.append(open(p, "rb").read())
            if len(texts) >= n:
                break
        if len(texts) >= n:
            break
os.makedirs(d)
for i in range(n):
    fd = os.open(f"{d}/f{i:06}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, texts[i % len(texts)])
    os.close(fd)
PY
}
# cpu_ms TARGET -> CPU time (user + system) the target's daemon has used, in ms
cpu_ms() {
    case $1 in
    bindfs) pid_cpu_ms "$BINDFS_PID" ;;
    *) pid_cpu_ms "$(cat "$WORK/$1/pid")" ;;
    esac
}
# threads_ms TARGET -> "name ms" per thread of a vikingfs daemon, for what each part spent
threads_ms() { pid_threads_ms "$(cat "$WORK/$1/pid")"; }
# run TARGET KIND -> seconds of rm -rf, and the daemon's CPU ms meanwhile (and on stderr,
# a vikingfs daemon's by thread)
run() {
    local t=$1 kind=$2 d
    case $t in
    bindfs) d=$WORK/bindfs/mnt/t ;;
    *) if [ "$kind" = ignored ]; then d=$WORK/$t/mnt/resources/ign; else d=$WORK/$t/mnt/resources/t; fi ;;
    esac
    make_tree "$d"
    if [ "$t" != bindfs ]; then
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
    fi
    sync
    local c0 c1 s th0=
    c0=$(cpu_ms "$t")
    [ "$t" = bindfs ] || th0=$(threads_ms "$t")
    s=$(secs rm -rf "$d")
    c1=$(cpu_ms "$t")
    # On stderr before the result, so that it shows before the caller's line for this run.
    if [ -n "$th0" ]; then
        threads_delta "$th0" "$(threads_ms "$t")" | sed "s/^/  $t $kind by thread: /" >&2
    fi
    [ ! -e "$d" ] || { echo "$t: rm -rf left $d" >&2; exit 1; }
    local settle=0 th1
    if [ "$t" != bindfs ]; then
        # Until settled (records gone, the history recorded, the summaries redone): what the
        # removal left for after its replies.
        th1=$(threads_ms "$t")
        settle=$(vk_settle "${BINOF[$t]}" "$WORK/$t" "$WORK/$t/ws")
        threads_delta "$th1" "$(threads_ms "$t")" |
            sed "s/^/  $t $kind until settled, by thread: /" >&2
    fi
    echo "$s $((c1 - c0)) $settle $(($(cpu_ms "$t") - c0))"
}

# The floor on the backing filesystem itself, no FUSE: what each removal must do to the
# directories, natively — bindfs's one unlink(2), against vikingfs's OpenViking-format lock
# file linked in, the file renamed into the history, the lock file unlinked.
floor() {
    local kind
    for kind in unlink lock+rename+unlock; do
        make_tree "$WORK/floor/t"
        mkdir -p "$WORK/floor/blobs"
        echo token >"$WORK/floor/spare"
        sync
        python3 - "$WORK/floor" "$kind" <<'PY'
import os, sys, time
base, kind = sys.argv[1], sys.argv[2]
d = f"{base}/t"
names = sorted(os.listdir(d))
t0 = time.perf_counter()
for name in names:
    if kind == "unlink":
        os.unlink(f"{d}/{name}")
        continue
    lock = f"{d}/.exact.ovlock.{name}.0123456789abcdef"
    os.link(f"{base}/spare", lock)
    os.rename(f"{d}/{name}", f"{base}/blobs/{name}")
    os.unlink(lock)
print(kind, f"{(time.perf_counter() - t0) * 1e6 / len(names):.1f}")
PY
        rm -rf "$WORK/floor"
    done
}

declare -A RES CPU SETTLE ALL FLOOR
for r in $(seq "$ROUNDS"); do
    while read -r k us; do
        FLOOR[$k]+="$us "
        echo "round $r: native $k $us us per file" >&2
    done < <(floor)
    for k in indexed ignored; do
        for t in bindfs old new; do
            [ "$t" = bindfs ] && [ "$k" = ignored ] && continue
            read -r s c w a < <(run "$t" "$k")
            RES[$t.$k]+="$s "
            CPU[$t.$k]+="$c "
            SETTLE[$t.$k]+="$w "
            ALL[$t.$k]+="$a "
            echo "round $r: $t $k $s s, daemon CPU $c ms; then settled in $w s, CPU $a ms in all" >&2
        done
    done
done
printf '%-8s %-8s %8s %10s %10s %12s   %s\n' target tree "median s" "CPU ms" "settled s" \
    "CPU ms all" "runs (s)"
for key in bindfs.indexed old.indexed new.indexed old.ignored new.ignored; do
    printf '%-8s %-8s %8s %10s %10s %12s   %s\n' "${key%.*}" "${key#*.}" \
        "$(echo "${RES[$key]}" | median)" "$(echo "${CPU[$key]}" | median)" \
        "$(echo "${SETTLE[$key]}" | median)" "$(echo "${ALL[$key]}" | median)" "${RES[$key]}"
done
for k in unlink lock+rename+unlock; do
    printf 'native   %-20s %s us per file (median; runs: %s)\n' "$k" \
        "$(echo "${FLOOR[$k]}" | median)" "${FLOOR[$k]}"
done

# SYSCALLS=1: one more indexed rm -rf on each vikingfs under `perf trace -s` (slow: read
# only the counts), printed as system calls per removal by thread kind, the most first.
if [ "${SYSCALLS:-0}" = 1 ]; then
    for t in old new; do
        d=$WORK/$t/mnt/resources/t
        make_tree "$d"
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
        sync
        perf trace -s -p "$(cat "$WORK/$t/pid")" -o "$WORK/trace.$t" 2>/dev/null &
        tracer=$!
        sleep 1
        rm -rf "$d"
        HOME="$WORK/$t" timeout 1200 "${BINOF[$t]}" --workspace "$WORK/$t/ws" wait --timeout 1200 >/dev/null
        kill -INT "$tracer"
        wait "$tracer" || true
        python3 - "$WORK/trace.$t" "$RM_N" "$t" <<'PY'
import re, sys
path, n, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
calls, thread = {}, None
for line in open(path):
    m = re.match(r"\s*(\S+) \(\d+\), \d+ events", line)
    if m:
        thread = re.sub(r"-?\d+$", "", m.group(1))
        continue
    m = re.match(r"\s+(\w+)\s+(\d+)\s", line)
    if m and thread:
        by = calls.setdefault(thread, {})
        by[m.group(1)] = by.get(m.group(1), 0) + int(m.group(2))
for thread, by in sorted(calls.items(), key=lambda kv: -sum(kv[1].values())):
    total = sum(by.values()) / n
    if total < 0.5:
        continue
    top = sorted(by.items(), key=lambda kv: -kv[1])[:8]
    print(f"syscalls {target:4} {thread:16} {total:5.1f} per removal: "
          + " ".join(f"{k} {v / n:.2f}" for k, v in top))
PY
    done
fi
