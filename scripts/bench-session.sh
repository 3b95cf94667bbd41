#!/usr/bin/env bash
# Session figures, each beside a baseline run the same way:
#   - `vikingfs session add` per message, vs `vikingfs lock FILE -- true` (same process start and
#     EXACT lock, no append): what the append itself costs;
#   - phase 1 of a commit of N messages (archive + in-place trim under the TREE lock), vs `cp` of
#     the same file (the bytes it must write at least);
#   - phase 2 + indexing of that archive (`session recover --wait`).
# Usage: scripts/bench-session.sh [N_MESSAGES] [N_ADDS]   (builds release first)
set -euo pipefail
N=${1:-5000}
ADDS=${2:-200}
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=$PWD/target/release/vikingfs
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
echo '{}' >"$T/config.json"
vk() { "$BIN" --config "$T/config.json" --workspace "$T/ws" "$@"; }
now() { date +%s%N; }
ms() { echo "scale=2; ($2 - $1) / 1000000" | bc; }

vk session add s user "warm up" >/dev/null
t0=$(now); for i in $(seq "$ADDS"); do vk lock viking://session/s/messages.jsonl -- true; done; t1=$(now)
for i in $(seq "$ADDS"); do vk session add s user "message $i: I prefer dark mode"; done; t2=$(now)
base=$(ms "$t0" "$t1"); add=$(ms "$t1" "$t2")
printf 'session add x%d      %9.1f ms  (%.2f ms each)   baseline lock+true %9.1f ms   ratio %.2f\n' \
  "$ADDS" "$add" "$(echo "$add / $ADDS" | bc -l)" "$base" "$(echo "$add / $base" | bc -l)"

live="$T/ws/viking/default/user/default/sessions/s/messages.jsonl"
for i in $(seq "$N"); do
  printf '{"role":"user","content":"line %d: my colleague Rui likes green tea and I live in Porto"}\n' "$i"
done >>"$live"
bytes=$(stat -c %s "$live")
t0=$(now); cp "$live" "$T/copy.jsonl"; sync "$T/copy.jsonl"; t1=$(now)
vk session commit s >/dev/null; t2=$(now)
base=$(ms "$t0" "$t1"); p1=$(ms "$t1" "$t2")
printf 'commit phase 1, %d msgs (%d B) %9.1f ms   baseline cp+sync %9.1f ms   ratio %.2f\n' \
  "$((N + ADDS + 1))" "$bytes" "$p1" "$base" "$(echo "$p1 / $base" | bc -l)"
t0=$(now); vk session recover --wait >/dev/null; t1=$(now)
printf 'phase 2 + indexing       %9.1f ms\n' "$(ms "$t0" "$t1")"
test ! -s "$live" && echo "live file empty after commit: ok"
