#!/usr/bin/env bash
# Index and queue benchmarks; prints the figures (and ratios against baselines run alongside).
# Usage: scripts/bench-index.sh [--docs N] [--queries Q] [--e2e-queries Q]
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== find latency (benches/index.rs)"
cargo bench --bench index -- "$@"

echo
echo "== queue: enqueue + complete throughput of 10,000 jobs (benches/queue.rs)"
cargo bench --bench queue
