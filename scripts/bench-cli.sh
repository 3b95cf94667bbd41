#!/usr/bin/env bash
# Latency of one-shot CLI commands, side by side.
#
#   scripts/bench-cli.sh [BASE_BIN]     both parts below (BENCH=mv or BENCH=find for one)
#
# mv: `vikingfs mv` of an indexed file, there and back, for this build and BASE_BIN (an older
#     build), in interleaved rounds (N=40 round trips per round, ROUNDS=2).
# find: `vikingfs find` per process, p50 and p90 over RUNS=40 processes each, without a daemon
#     and with one (`vikingfs serve` on the workspace: the command asks it over the workspace's
#     socket), lexical and hybrid with the local model (MODEL, default target/models/
#     all-MiniLM-L6-v2, from scripts/fetch-model.sh), at DOCS=10000 small documents written
#     into the workspace directly and indexed by the daemon (`vikingfs wait`). Also the floor:
#     a process that only parses its arguments (`vikingfs --version`) and one that loads the
#     configuration (`vikingfs config show`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
N=${N:-40}
ROUNDS=${ROUNDS:-2}
BENCH=${BENCH:-all}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

bench_mv() {
  local bins=("$BIN")
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
}

bench_find() {
  local docs=${DOCS:-10000} runs=${RUNS:-40}
  local model=${MODEL:-$ROOT/target/models/all-MiniLM-L6-v2}
  [ -f "$model/model.safetensors" ] || { echo "no model at $model (scripts/fetch-model.sh)" >&2; exit 1; }
  w=$(mktemp -d /var/tmp/vikingfs-find.XXXXXX)
  # shellcheck disable=SC2064
  trap "[ -f '$w/serve.pid' ] && kill \$(cat '$w/serve.pid') 2>/dev/null; rm -rf '$w'" EXIT
  mkdir -p "$w/home/.vikingfs"
  printf '{"embedding": {"dense": {"provider": "local", "model": "%s"}}, "server": {"port": 0}}\n' \
    "$model" > "$w/home/.vikingfs/config.json"
  export HOME=$w/home
  local vf=("$BIN" --workspace "$w/ws")
  # Notes of 40-120 words drawn from a 30,000-word made-up vocabulary by a Zipf law (as words
  # in text are: a few in every note, most in a few), and queries of two mid-frequency words.
  python3 - "$w/ws/viking/default/resources/corpus" "$docs" "$w/queries.txt" <<'EOF'
import os, random, sys
root, n, queries = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
syl = ["ka", "lo", "mi", "ru", "ten", "sa", "vor", "el", "quin", "dra", "po", "fi", "gar", "nu",
       "bel", "tas", "or", "zen", "mu", "lia", "cor", "pen", "sti", "wa", "xe", "hol", "bri", "an",
       "dus", "ve"]
vocab = sorted({"".join(rng.choice(syl) for _ in range(rng.randint(2, 4))) for _ in range(30000)})
rng.shuffle(vocab)
weights = [1.0 / (r + 1) ** 1.07 for r in range(len(vocab))]
for i in range(n):
    d = os.path.join(root, f"d{i // 100:03d}")
    os.makedirs(d, exist_ok=True)
    body = " ".join(rng.choices(vocab, weights, k=rng.randint(40, 120)))
    with open(os.path.join(d, f"n{i:05d}.md"), "w") as f:
        f.write(f"# note {i}\n\n{body}.\n")
with open(queries, "w") as f:
    for r in range(100, 3000, 150):
        f.write(f"{vocab[r]} {vocab[r + 7]}\n")
EOF
  "${vf[@]}" serve --pid-file "$w/serve.pid" >"$w/serve.log" 2>&1 &
  for _ in $(seq 600); do [ -S "$w/ws/.vikingfs/daemon.sock" ] && [ -f "$w/serve.pid" ] && break; sleep 0.1; done
  local t0 t1
  t0=$(date +%s)
  "${vf[@]}" wait
  t1=$(date +%s)
  echo "find: $docs documents written, indexed and embedded by the daemon in $((t1 - t0)) s" >&2
  # Per-process latency: each run its own process, timed alone; p50 and p90 of RUNS. A
  # trailing "--" runs the command as it is, without a query.
  measure() {
    python3 - "$w/queries.txt" "$runs" "$@" <<'EOF'
import subprocess, sys, time
queries = open(sys.argv[1]).read().split("\n")[:-1]
runs, cmd = int(sys.argv[2]), sys.argv[3:]
bare = cmd[-1] == "--"
if bare:
    cmd = cmd[:-1]
args = lambda q: cmd if bare else cmd + [q]
subprocess.run(args("warm up"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ts = []
for i in range(runs):
    q = queries[i % len(queries)]
    t = time.perf_counter()
    r = subprocess.run(args(q), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ts.append((time.perf_counter() - t) * 1000)
    if r.returncode not in (0, 1):
        sys.exit(f"{cmd} {q!r} failed: {r.stderr.decode()}")
ts.sort()
print(f"{ts[len(ts) // 2]:7.1f} ms (p90 {ts[int(len(ts) * 0.9)]:6.1f})")
EOF
  }
  local floor_v floor_c dl dh ll lh
  floor_v=$(measure "$BIN" --version --)
  floor_c=$(measure "${vf[@]}" config show --json --)
  dl=$(measure "${vf[@]}" find --mode lexical)
  dh=$(measure "${vf[@]}" find)
  kill "$(cat "$w/serve.pid")"
  for _ in $(seq 200); do [ -S "$w/ws/.vikingfs/daemon.sock" ] || break; sleep 0.1; done
  rm -f "$w/serve.pid"
  ll=$(measure "${vf[@]}" find --mode lexical)
  lh=$(measure "${vf[@]}" find)
  printf '\nvikingfs find per process, %s documents, p50 over %s processes (%s)\n' "$docs" "$runs" "$BIN"
  printf '  %-34s %-26s %s\n' "" "without a daemon" "with a daemon (its socket)"
  printf '  %-34s %-26s %s\n' "lexical (--mode lexical)" "$ll" "$dl"
  printf '  %-34s %-26s %s\n' "hybrid, $(basename "$model")" "$lh" "$dh"
  printf '  %-34s %s\n' "floor: vikingfs --version" "$floor_v"
  printf '  %-34s %s\n' "floor: vikingfs config show" "$floor_c"
}

case $BENCH in
  mv) bench_mv "${1:-}" ;;
  find) bench_find ;;
  all) bench_mv "${1:-}"; bench_find ;;
  *) echo "BENCH=mv|find|all" >&2; exit 2 ;;
esac
