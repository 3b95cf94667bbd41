#!/usr/bin/env bash
# Retrieval benchmark of `vikingfs find`: known-item search on text nobody here wrote.
#
#   Corpus A (primary): the running python3's standard library docstrings
#     (query = a docstring's first line, document = the rest of it).
#   Corpus B (outside check): Debian man pages of /usr/share/man/man1..man8
#     (query = the NAME line's description, document = the DESCRIPTION section).
#
# Systems, over the same files, in one run:
#   bm25       SQLite FTS5 bm25, tokenize='porter unicode61', query tokens OR'ed (the baseline)
#   old        the build before the search rewrite ($VIKINGFS_OLD_BIN), one `find` per query
#   lexical (no model), lexical, semantic, hybrid
#              the new build ($VIKINGFS_BIN) in batch mode (`find --mode M --queries FILE`),
#              "no model" on a workspace without a config, the others with the local MiniLM
#              model ($VIKINGFS_MODEL) configured; skipped ("new build: not available") while
#              the binary has no --queries.
#   ... (postgres) the same new-build systems with storage.backend = "postgres" (index on a
#              PostgreSQL server this script starts: scripts/pg-server.sh), when
#              scripts/fetch-postgres.sh fetched it; --no-postgres skips them. Their recall
#              should be the SQLite backend's within 0.02 (the target of issue #16).
#
# Prints per corpus: system | recall@1 | recall@10 | MRR@10 | find p50 ms | find p99 ms |
# index docs/s, and hybrid's MRR@10 minus max(bm25, semantic). Corpus building, BM25 and the
# metrics live in scripts/search_eval.py (`search_eval.py selftest` checks the metric code).
#
# Usage: scripts/bench-search.sh [--quick] [--corpus pydoc|man|all] [--no-old] [--no-new] [--no-postgres]
#   --quick   300 queries per corpus instead of 1200 (the same documents; a prefix of the
#             full run's query sample)
# Environment: VIKINGFS_BIN (default target/release/vikingfs of this repository),
#   VIKINGFS_OLD_BIN (default: commit 2341f2f, the last before the search rewrite, built once
#   into target/bench-old/ from a git worktree of this repository),
#   VIKINGFS_MODEL (default target/models/all-MiniLM-L6-v2: scripts/fetch-model.sh), TMPDIR,
#   BENCH_KEEP=1 keeps the temporary directory (its path is printed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EVAL=(python3 "$HERE/search_eval.py")

QUERIES=1200
CORPORA="pydoc man"
RUN_OLD=1
RUN_NEW=1
RUN_PG=1
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUERIES=300; shift ;;
        --corpus)
            case "${2:-}" in pydoc | man) CORPORA=$2 ;; all) ;; *) echo "--corpus pydoc|man|all" >&2; exit 2 ;; esac
            shift 2 ;;
        --no-old) RUN_OLD=0; shift ;;
        --no-new) RUN_NEW=0; shift ;;
        --no-postgres) RUN_PG=0; shift ;;
        *) echo "usage: $0 [--quick] [--corpus pydoc|man|all] [--no-old] [--no-new] [--no-postgres]" >&2; exit 2 ;;
    esac
done

REPO=$(cd "$HERE/.." && pwd)
OLD_COMMIT=2341f2f
NEW_BIN=${VIKINGFS_BIN:-$REPO/target/release/vikingfs}
OLD_BIN=${VIKINGFS_OLD_BIN:-$REPO/target/bench-old/target/release/vikingfs}
MODEL=${VIKINGFS_MODEL:-$REPO/target/models/all-MiniLM-L6-v2}
if [ "$RUN_OLD" = 1 ] && [ -z "${VIKINGFS_OLD_BIN:-}" ] && [ ! -x "$OLD_BIN" ]; then
    # The build before this benchmark's subject: a worktree of the old commit, built once.
    echo "building the old build ($OLD_COMMIT) into $REPO/target/bench-old (once)"
    if [ ! -d "$REPO/target/bench-old/src" ]; then
        git -C "$REPO" worktree add --detach "$REPO/target/bench-old/src" "$OLD_COMMIT" >/dev/null
    fi
    (cd "$REPO/target/bench-old/src" &&
        timeout 1800 cargo build --release --target-dir "$REPO/target/bench-old/target") ||
        echo "old build: cargo build failed"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/vikingfs-bench-search.XXXX")
# The PostgreSQL server of the postgres systems (started below, one per workspace).
PGDIR=/tmp/vikingfs-pg-bench-$$
if [ "${BENCH_KEEP:-0}" = 1 ]; then
    trap '"$HERE/pg-server.sh" stop "$PGDIR"; echo "kept $WORK"' EXIT
else
    trap '"$HERE/pg-server.sh" stop "$PGDIR"; rm -rf "$WORK"' EXIT
fi
if [ "$RUN_PG" = 1 ] && [ ! -x "${VIKINGFS_PG_BIN:-$REPO/target/postgres/bin}/postgres" ]; then
    echo "postgres: not fetched (scripts/fetch-postgres.sh): the postgres systems are not measured"
    RUN_PG=0
fi
# No ~/.vikingfs/config.json or environment of the caller's leaks into the workspaces.
mkdir -p "$WORK/home"
export HOME=$WORK/home RUST_LOG=${RUST_LOG:-error}
unset VIKINGFS_CONFIG VIKINGFS_WORKSPACE

# Time bounds (seconds).
T_BUILD=900      # building one corpus
T_INDEX=3600     # one add-resource --wait (the model-configured one embeds every document)
T_QUERY=60       # one find process
T_RUN=5400       # all the queries of one system on one corpus
FAILED=()

START=$(date +%s)
"${EVAL[@]}" selftest

# The new build takes part when it has batch queries.
NEW_OK=0
if [ "$RUN_NEW" = 1 ]; then
    if [ -x "$NEW_BIN" ] && timeout 60 "$NEW_BIN" find --help 2>/dev/null | grep -q -- --queries; then
        NEW_OK=1
        echo "new build: $NEW_BIN"
        if [ -d "$MODEL" ]; then
            printf '{"embedding":{"dense":{"provider":"local","model":"%s"}}}\n' "$MODEL" > "$WORK/model.json"
            echo "model: $MODEL"
        else
            echo "model: not found at $MODEL: semantic and hybrid not measured"
        fi
    else
        echo "new build: not available ($NEW_BIN has no \`find --queries\`)"
    fi
fi
if [ "$RUN_OLD" = 1 ] && [ ! -x "$OLD_BIN" ]; then
    echo "old build: not available ($OLD_BIN missing; build it with cargo build --release in its checkout)"
    RUN_OLD=0
fi

# run NAME CMD...: a measured step; a failure is reported and the run goes on.
run() {
    local name=$1; shift
    if ! "$@"; then
        echo "  $name: FAILED" >&2
        FAILED+=("$CORPUS/$name")
        return 1
    fi
}

for CORPUS in $CORPORA; do
    C=$WORK/$CORPUS
    R=$C/results.jsonl
    echo
    echo "== corpus $CORPUS: building"
    timeout $T_BUILD "${EVAL[@]}" build --corpus "$CORPUS" --out "$C" --queries "$QUERIES" > "$C.json"
    python3 - "$C/corpus.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
print(f"  {c['documents']} documents ({c['words']} words), {c['queryable']} queryable, "
      f"{c['queries']} queried (seed {c['seed']})")
print("  " + ", ".join(f"{k}={v}" for k, v in c.items()
                       if k not in ("corpus", "seed", "documents", "words", "queryable", "queries")))
EOF

    echo "-- bm25"
    run bm25 timeout $T_RUN "${EVAL[@]}" bm25 "$C" --out "$C/bm25.run" --meta "$C/bm25.meta" &&
        "${EVAL[@]}" score "$C" "$C/bm25.run" --system bm25 --meta "$C/bm25.meta" \
            --latency inproc --results "$R" || true

    if [ "$RUN_OLD" = 1 ]; then
        echo "-- old ($OLD_BIN)"
        WS=$WORK/ws-old-$CORPUS
        run old-index timeout $((T_INDEX + 120)) "${EVAL[@]}" index --bin "$OLD_BIN" --workspace "$WS" \
            --src "$C/docs" --meta "$C/old.meta" --timeout $T_INDEX &&
            run old timeout $T_RUN "${EVAL[@]}" run-cli --bin "$OLD_BIN" --workspace "$WS" \
                --corpus "$C" --out "$C/old.run" --timeout $T_QUERY &&
            "${EVAL[@]}" score "$C" "$C/old.run" --system old --meta "$C/old.meta" \
                --latency process --results "$R" || true
        rm -rf "$WS"
    fi

    if [ "$NEW_OK" = 1 ]; then
        echo "-- new build, out of the box (no model config)"
        WS=$WORK/ws-new-$CORPUS
        run new-index timeout $((T_INDEX + 120)) "${EVAL[@]}" index --bin "$NEW_BIN" --workspace "$WS" \
            --src "$C/docs" --meta "$C/new.meta" --timeout $T_INDEX &&
            { "${EVAL[@]}" status --bin "$NEW_BIN" --workspace "$WS" || true; } &&
            run "lexical (no model)" timeout $T_RUN "${EVAL[@]}" run-batch --bin "$NEW_BIN" --workspace "$WS" \
                --mode lexical --corpus "$C" --out "$C/lexical-nomodel.run" --timeout $T_RUN &&
            "${EVAL[@]}" score "$C" "$C/lexical-nomodel.run" --system "lexical (no model)" \
                --meta "$C/new.meta" --latency batch --results "$R" || true
        rm -rf "$WS"

        BACKENDS=sqlite
        [ "$RUN_PG" = 1 ] && BACKENDS="sqlite postgres"
        for BACKEND in $BACKENDS; do
            [ -f "$WORK/model.json" ] || break
            CONF=$WORK/model.json SUFFIX=""
            if [ "$BACKEND" = postgres ]; then
                DSN=$("$HERE/pg-server.sh" start "$PGDIR") || { FAILED+=("$CORPUS/postgres-server"); break; }
                python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c["storage"] = {"backend": "postgres", "postgres": {"dsn": sys.argv[2]}}
print(json.dumps(c))' "$WORK/model.json" "$DSN" > "$WORK/model-pg.json"
                CONF=$WORK/model-pg.json SUFFIX=" (postgres)"
                echo "-- new build, model configured, index on PostgreSQL"
            else
                echo "-- new build, model configured"
            fi
            WS=$WORK/ws-model-$CORPUS-$BACKEND
            if run "model-index$SUFFIX" timeout $((T_INDEX + 120)) "${EVAL[@]}" index --bin "$NEW_BIN" \
                --workspace "$WS" --config "$CONF" --src "$C/docs" \
                --meta "$C/model-$BACKEND.meta" --timeout $T_INDEX; then
                "${EVAL[@]}" status --bin "$NEW_BIN" --workspace "$WS" --config "$CONF" || true
                for MODE in lexical semantic hybrid; do
                    run "$MODE$SUFFIX" timeout $T_RUN "${EVAL[@]}" run-batch --bin "$NEW_BIN" --workspace "$WS" \
                        --config "$CONF" --mode "$MODE" --corpus "$C" \
                        --out "$C/$MODE-$BACKEND.run" --timeout $T_RUN &&
                        "${EVAL[@]}" score "$C" "$C/$MODE-$BACKEND.run" --system "$MODE$SUFFIX" \
                            --meta "$C/model-$BACKEND.meta" --latency batch --results "$R" || true
                done
            fi
            rm -rf "$WS"
            if [ "$BACKEND" = postgres ]; then "$HERE/pg-server.sh" stop "$PGDIR"; fi
        done
    fi

    echo
    if [ -s "$R" ]; then
        "${EVAL[@]}" table "$R" --title "== results: corpus $CORPUS (top $((10)), known-item)"
    else
        echo "== results: corpus $CORPUS: no system measured"
    fi
done

echo
echo "total: $(( $(date +%s) - START )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed: ${FAILED[*]}" >&2
    exit 1
fi
