#!/usr/bin/env bash
# HTTP `POST /api/v1/search/find` of `vikingfs serve` at DOCS small documents: p50/p90/p99
# latency of one client asking one query after another (keep-alive), and requests/s of CONC
# clients for SECS seconds (Python threads, keep-alive; `ab -k` too when installed). A query
# is two words of a random document: "content" words (not among the corpus' 100 most
# frequent) for both figures, and latency also for "any" words (stopword-like ones too).
# Lexical (no model) and, when the local model exists, hybrid (embedding.dense.provider
# "local" with target/models/all-MiniLM-L6-v2).
#
#   scripts/bench-api.sh            (DOCS=10000 N=300 CONC=8 SECS=10 PORT=20100)
#   MODES=lexical scripts/bench-api.sh
#
# The documents are written straight into a fresh workspace's data directory before the
# daemon starts (it indexes them as it comes up); `system/wait` then waits for every record,
# summary and vector, and its time is printed as the time to searchable.
# Environment: VIKINGFS_BIN (default target/release/vikingfs, built when missing),
#   VIKINGFS_MODEL, BENCH_KEEP=1 keeps the workspace (its path is printed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
DOCS=${DOCS:-10000}
N=${N:-300}
CONC=${CONC:-8}
SECS=${SECS:-10}
PORT=${PORT:-20100}
MODEL=${VIKINGFS_MODEL:-$ROOT/target/models/all-MiniLM-L6-v2}
MODES=${MODES:-lexical hybrid}
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin vikingfs >&2)

WORK=$(mktemp -d /var/tmp/vikingfs-api.XXXXXX)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The corpus and the queries: pseudo-words drawn Zipf-like, so some words are common and
# most are rare, as in text; a query is two words of one document (it always matches).
cat > "$WORK/gen.py" <<'EOF'
import json, os, random, sys
root, docs, qout = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(24)
syll = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "qu", "dr", "an", "el"]
vocab = sorted({"".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(6000)})
weights = [1.0 / (i + 1) for i in range(len(vocab))]
# The corpus' 100 most frequent words play the part of stopwords: a "content" query avoids
# them (as people's queries mostly do), an "any" query does not.
common = set(vocab[:100])
queries = {"content": [], "any": []}
for i in range(docs):
    d = os.path.join(root, f"d{i // 100:03d}")
    os.makedirs(d, exist_ok=True)
    words = rng.choices(vocab, weights, k=rng.randint(30, 60))
    with open(os.path.join(d, f"doc{i:05d}.md"), "w") as f:
        f.write(f"# Note {i}\n\n" + " ".join(words) + "\n")
    if i % 7 == 0:
        queries["any"].append(" ".join(rng.sample(words, 2)))
        rare = sorted(set(words) - common)
        if len(rare) >= 2:
            queries["content"].append(" ".join(rng.sample(rare, 2)))
json.dump(queries, open(qout, "w"))
EOF

cat > "$WORK/load.py" <<'EOF'
import http.client, json, random, statistics, sys, threading, time
host, port, n, conc, secs, qfile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
every = json.load(open(qfile))
queries = every["content"]

def one(conn, q):
    body = json.dumps({"query": q, "target_uri": "", "limit": 10})
    t = time.perf_counter()
    conn.request("POST", "/api/v1/search/find", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    dt = time.perf_counter() - t
    if r.status != 200:
        raise SystemExit(f"find answered {r.status}: {data[:300]!r}")
    return dt, json.loads(data)["result"]["total"]

rng = random.Random(7)
conn = http.client.HTTPConnection(host, port)
for q in queries[:20]:
    one(conn, q)  # warm-up
for kind in ("content", "any"):
    lat, empty = [], 0
    for i in range(n):
        dt, total = one(conn, rng.choice(every[kind]))
        lat.append(dt * 1000)
        empty += total == 0
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print(f"  sequential ({kind}-word queries): {n} finds  p50 {q(0.5):.2f} ms  p90 {q(0.9):.2f} ms"
          f"  p99 {q(0.99):.2f} ms  mean {statistics.mean(lat):.2f} ms  (no result: {empty})")

done = [0] * conc
stop = time.perf_counter() + secs
def worker(k):
    c = http.client.HTTPConnection(host, port)
    r = random.Random(k)
    while time.perf_counter() < stop:
        one(c, r.choice(queries))
        done[k] += 1
threads = [threading.Thread(target=worker, args=(k,)) for k in range(conc)]
t0 = time.perf_counter()
for t in threads: t.start()
for t in threads: t.join()
el = time.perf_counter() - t0
print(f"  concurrent (content-word queries): {conc} clients x {secs:.0f} s  {sum(done) / el:.0f} requests/s  ({sum(done)} finds)")
EOF

for mode in $MODES; do
  if [ "$mode" = hybrid ] && [ ! -f "$MODEL/config.json" ]; then
    echo "hybrid: skipped (no model at $MODEL: scripts/fetch-model.sh)"
    continue
  fi
  ws="$WORK/$mode/ws"
  mkdir -p "$ws/viking/default/resources/bench" "$WORK/$mode/home"
  python3 "$WORK/gen.py" "$ws/viking/default/resources/bench" "$DOCS" "$WORK/$mode/queries.json"
  if [ "$mode" = hybrid ]; then
    printf '{"server":{"port":%s},"embedding":{"dense":{"provider":"local","model":"%s"}}}\n' \
      "$PORT" "$MODEL" > "$WORK/$mode/config.json"
  else
    printf '{"server":{"port":%s}}\n' "$PORT" > "$WORK/$mode/config.json"
  fi
  t0=$(date +%s.%N)
  HOME="$WORK/$mode/home" "$BIN" --config "$WORK/$mode/config.json" --workspace "$ws" serve \
    > "$WORK/$mode/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/$mode/serve.log"; exit 1; }
    sleep 0.1
  done
  # In steps shorter than the server's request timeout (600 s by default).
  until curl -sf -X POST "http://127.0.0.1:$PORT/api/v1/system/wait" -d '{"timeout": 300}' |
      grep -q '"drained":true'; do
    kill -0 "$PID" 2>/dev/null ||
      { echo "$mode: the daemon died; its log:"; tail -20 "$WORK/$mode/serve.log"; exit 1; }
  done
  t1=$(date +%s.%N)
  echo "$mode: $DOCS documents searchable $(echo "$t1 - $t0" | bc -l | xargs printf '%.1f') s after the daemon started"
  python3 "$WORK/load.py" 127.0.0.1 "$PORT" "$N" "$CONC" "$SECS" "$WORK/$mode/queries.json"
  if command -v ab >/dev/null; then
    q=$(python3 -c "import json,sys; print(json.dumps({'query': json.load(open(sys.argv[1]))['content'][0], 'limit': 10}))" \
      "$WORK/$mode/queries.json")
    echo "$q" > "$WORK/body.json"
    ab -q -k -c "$CONC" -t "$SECS" -n 1000000 -p "$WORK/body.json" -T application/json \
      "http://127.0.0.1:$PORT/api/v1/search/find" 2>/dev/null |
      awk -v c="$CONC" '/Requests per second/ {printf "  ab -k -c %s (one query): %s requests/s\n", c, $4}
                        /Non-2xx/ {print "  ab: " $0}'
  fi
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
done
