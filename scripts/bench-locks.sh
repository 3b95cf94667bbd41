#!/bin/sh
# Lock engine benchmark: EXACT acquire+release and TREE acquire on 10,000 files, medians beside
# a baseline run and OpenViking 0.5.2's figures. BENCH_DIR picks the filesystem (default /tmp),
# BENCH_N the number of EXACT iterations (default 20000).
set -eu
cd "$(dirname "$0")/.."
exec cargo bench --bench locks "$@"
