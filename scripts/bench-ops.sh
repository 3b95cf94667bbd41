#!/usr/bin/env bash
# Benchmarks of the locked operations, each beside OpenViking 0.5.2's figure on this machine
# kind and a native baseline (cp -r / mv / rm -r on a plain directory), as ratios.
#
#   add-resource of 200 small markdown files until searchable   (OpenViking ~20 s,  target <= 1 s)
#   mv of that directory                                         (OpenViking ~2.3 s, target <= 50 ms)
#   rm -r of that directory                                      (OpenViking ~0.8 s, target <= 50 ms)
#   mv of a 1 GiB directory                                      (target <= 100 ms)
#
# The first three are run again with the stores on PostgreSQL (storage.backend = "postgres",
# a server started by scripts/pg-server.sh, a fresh database per run) when
# scripts/fetch-postgres.sh fetched it; --no-postgres skips that.
#
# Usage: scripts/bench-ops.sh [--files N] [--runs R] [--no-postgres]   (median of R runs, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=200
RUNS=5
PG=1
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --no-postgres) PG=0; shift ;;
        *) echo "usage: $0 [--files N] [--runs R] [--no-postgres]" >&2; exit 2 ;;
    esac
done

cargo build --release --quiet
BIN=$PWD/target/release/vikingfs
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vikingfs-bench.XXXXXX")
PGDIR=/tmp/vikingfs-pg-bench-$$
trap 'scripts/pg-server.sh stop "$PGDIR"; rm -rf "$WORK"' EXIT
[ -x "${VIKINGFS_PG_BIN:-target/postgres/bin}/postgres" ] || PG=0
export HOME=$WORK VIKINGFS_WORKSPACE=$WORK/ws RUST_LOG=error
unset VIKINGFS_CONFIG

now_ns() { date +%s%N; }
# ms between two now_ns stamps, with 2 decimals
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e6 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Small markdown files in 10 subdirectories, each with a unique word.
SRC=$WORK/notes
for d in $(seq 0 9); do mkdir -p "$SRC/topic$d"; done
word() { echo "kw$(echo "$1" | tr 0-9 a-j)q"; }  # 200 -> kwcaaq: one word, letters only
for i in $(seq 1 "$FILES"); do
    printf '# Note %d\n\nThis note talks about subject %d and the word %s.\n' \
        "$i" "$((i % 17))" "$(word "$i")" > "$SRC/topic$((i % 10))/note$i.md"
done

declare -a ADD MV RM NCP NMV NRM PADD PMV PRM
# One run of add-resource, mv and rm of the small files; appends to the arrays named $1 $2 $3.
small_run() {
    local -n add=$1 mv=$2 rm=$3
    rm -rf "$WORK/ws"
    "$BIN" config show >/dev/null  # creates the workspace outside the timings
    t0=$(now_ns)
    "$BIN" add-resource "$SRC" --to viking://resources/notes --wait >/dev/null
    # Searchable: the last file is the first result.
    "$BIN" find "$(word "$FILES")" --limit 1 --json | grep -q "note$FILES.md"
    t1=$(now_ns); add+=("$(ms "$t0" "$t1")")

    t0=$(now_ns); "$BIN" mv viking://resources/notes viking://resources/moved; t1=$(now_ns)
    mv+=("$(ms "$t0" "$t1")")
    "$BIN" find "$(word 1)" --limit 3 --json | grep -q "resources/moved/" \
        || { echo "bench: moved files are not findable" >&2; exit 1; }

    t0=$(now_ns); "$BIN" rm -r viking://resources/moved; t1=$(now_ns)
    rm+=("$(ms "$t0" "$t1")")
}
for r in $(seq 1 "$RUNS"); do
    small_run ADD MV RM

    # Native baselines on a plain directory of the same files.
    rm -rf "$WORK/plain" "$WORK/plain2"
    t0=$(now_ns); cp -r "$SRC" "$WORK/plain"; t1=$(now_ns); NCP+=("$(ms "$t0" "$t1")")
    t0=$(now_ns); mv "$WORK/plain" "$WORK/plain2"; t1=$(now_ns); NMV+=("$(ms "$t0" "$t1")")
    t0=$(now_ns); rm -r "$WORK/plain2"; t1=$(now_ns); NRM+=("$(ms "$t0" "$t1")")
done
if [ "$PG" = 1 ]; then
    DSN=$(scripts/pg-server.sh start "$PGDIR")
    for r in $(seq 1 "$RUNS"); do
        # A database per run: each run's workspace is a new one, and a database serves one.
        target/postgres/bin/psql -q "$DSN" -c "CREATE DATABASE run$r" >/dev/null
        mkdir -p "$HOME/.vikingfs"
        printf '{"storage":{"backend":"postgres","postgres":{"dsn":"%s"}}}\n' \
            "${DSN/dbname=vikingfs/dbname=run$r}" > "$HOME/.vikingfs/config.json"
        small_run PADD PMV PRM
    done
    rm -f "$HOME/.vikingfs/config.json"
    scripts/pg-server.sh stop "$PGDIR"
fi

# 1 GiB directory: 16 files of 64 MiB, placed in the workspace and indexed first.
rm -rf "$WORK/ws"
"$BIN" config show >/dev/null
BIG=$WORK/ws/viking/default/resources/big
mkdir -p "$BIG" "$WORK/bigplain"
for i in $(seq 1 16); do
    fallocate -l 64M "$BIG/part$i.bin" 2>/dev/null || head -c 64M /dev/zero > "$BIG/part$i.bin"
    fallocate -l 64M "$WORK/bigplain/part$i.bin" 2>/dev/null || head -c 64M /dev/zero > "$WORK/bigplain/part$i.bin"
done
"$BIN" fsck --repair >/dev/null || true
"$BIN" wait >/dev/null
declare -a BMV NBMV
for r in $(seq 1 "$RUNS"); do
    if [ $((r % 2)) = 1 ]; then a=big; b=big2; else a=big2; b=big; fi
    t0=$(now_ns); "$BIN" mv "viking://resources/$a" "viking://resources/$b"; t1=$(now_ns)
    BMV+=("$(ms "$t0" "$t1")")
    t0=$(now_ns); mv "$WORK/bigplain" "$WORK/bigplain2"; t1=$(now_ns); NBMV+=("$(ms "$t0" "$t1")")
    mv "$WORK/bigplain2" "$WORK/bigplain"
done

row() { # name, vikingfs samples, native samples, openviking ms, target ms
    local v n
    v=$(printf '%s\n' $2 | median); n=$(printf '%s\n' $3 | median)
    awk -v name="$1" -v v="$v" -v n="$n" -v ov="$4" -v t="$5" 'BEGIN {
        ovs = (ov == "-") ? "-" : sprintf("%.0f ms", ov)
        sp = (ov == "-") ? "-" : sprintf("%.0fx", ov / v)
        printf "%-34s %10.2f ms %12s %9s %10.2f ms %8.1fx %9s %s\n", name, v, ovs, sp, n, v / n, t " ms", (v <= t ? "ok" : "MISSED")
    }'
}
printf '\nvikingfs ops, median of %d runs, %d files (release build, CLI process start included)\n' "$RUNS" "$FILES"
printf '%-34s %13s %12s %9s %13s %9s %9s\n' "operation" "vikingfs" "OpenViking" "speedup" "native" "vs native" "target"
row "add-resource until searchable" "${ADD[*]}" "${NCP[*]}" 20000 1000
row "mv of the directory" "${MV[*]}" "${NMV[*]}" 2300 50
row "rm -r of the directory" "${RM[*]}" "${NRM[*]}" 800 50
row "mv of a 1 GiB directory" "${BMV[*]}" "${NBMV[*]}" - 100
if [ "$PG" = 1 ]; then
    row "postgres: add-resource, searchable" "${PADD[*]}" "${NCP[*]}" 20000 1000
    row "postgres: mv of the directory" "${PMV[*]}" "${NMV[*]}" 2300 50
    row "postgres: rm -r of the directory" "${PRM[*]}" "${NRM[*]}" 800 50
fi
echo "(native: cp -r / mv / rm -r of a plain directory with the same files)"
