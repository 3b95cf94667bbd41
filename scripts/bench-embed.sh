#!/usr/bin/env bash
# The BERT encoder's throughput beside the candle encoder it replaced and the machine's gemm
# peak, in one run (benches/embed.rs); needs the model (scripts/fetch-model.sh).
# Usage: scripts/bench-embed.sh [--windows N] [--repeats R] [--per-call C] [--no-old]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench embed -- "$@"
