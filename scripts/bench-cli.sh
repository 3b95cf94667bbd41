#!/usr/bin/env bash
# Latency of a one-shot CLI command (`vikingfs mv` of an indexed file, there and back) for
# this build and, side by side, BASE_BIN (an older build), in interleaved rounds.
#
#   scripts/bench-cli.sh [BASE_BIN]     (N=40 round trips per round, ROUNDS=2)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
N=${N:-40}
ROUNDS=${ROUNDS:-2}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)
bins=("$BIN")
[ -n "${1:-}" ] && bins+=("$1")
for round in $(seq "$ROUNDS"); do
  for b in "${bins[@]}"; do
    w=$(mktemp -d /var/tmp/vikingfs-cli.XXXXXX)
    mkdir "$w/src"
    for i in 1 2 3; do echo "file $i words" > "$w/src/f$i.md"; done
    HOME=$w "$b" --workspace "$w/ws" add-resource "$w/src" --to viking://resources/docs --wait >/dev/null
    t0=$(date +%s%N)
    for _ in $(seq "$N"); do
      HOME=$w "$b" --workspace "$w/ws" mv viking://resources/docs/f1.md viking://resources/docs/g1.md
      HOME=$w "$b" --workspace "$w/ws" mv viking://resources/docs/g1.md viking://resources/docs/f1.md
    done
    t1=$(date +%s%N)
    clean=$(HOME=$w "$b" --workspace "$w/ws" fsck >/dev/null 2>&1 && echo clean || echo PROBLEMS)
    printf 'round %s  %-40s %6.1f ms per vikingfs mv  (fsck %s)\n' "$round" "$b" \
      "$(echo "($t1 - $t0) / 1000000 / (2 * $N)" | bc -l)" "$clean"
    rm -rf "$w"
  done
done
