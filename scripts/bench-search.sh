#!/usr/bin/env bash
# Retrieval benchmark of `vikingfs find`: known-item search on text nobody here wrote.
#
#   Corpus A (primary): the running python3's standard library docstrings
#     (query = a docstring's first line, document = the rest of it).
#   Corpus B (outside check): Debian man pages of /usr/share/man/man1..man8
#     (query = the NAME line's description, document = the DESCRIPTION section).
#   Corpus C (code): Python stdlib files and Rust files of the crates in ~/.cargo/registry/src
#     (query = the first sentence of one function's doc, document = the whole file with
#     every comment and docstring removed, named .py / .rs).
#   Corpus D (docs): real PDF and HTML files of at most 1 MiB under /usr/share/doc and
#     $BENCH_DOC_DIRS (e.g. an unpacked texlive-latex-recommended-doc), stored byte for byte
#     (query = one seeded sentence of the file's text as poppler's pdftotext or Python's
#     html.parser reads it, held by no other file; BM25 runs on that text). Needs pdftotext.
#
# Systems, over the same files, in one run:
#   bm25       SQLite FTS5 bm25, tokenize='porter unicode61', query tokens OR'ed (the baseline)
#   old        the build before the search rewrite ($VIKINGFS_OLD_BIN), one `find` per query
#   lexical (no model), lexical, semantic, hybrid
#              the new build ($VIKINGFS_BIN) in batch mode (`find --mode M --queries FILE`),
#              "no model" on a workspace without a config, the others with the local MiniLM
#              model ($VIKINGFS_MODEL) configured; skipped ("new build: not available") while
#              the binary has no --queries.
#   ... (f32)  the same new-build systems with the model's linear layers in f32
#              (vikingfs.index.model_precision = "f32"; the default "auto" runs them in 8-bit
#              integers on a CPU with AVX-512 VNNI): what the int8 encoder costs in quality
#              and saves in indexing time, in one run; --no-f32 skips them.
#   ... (postgres) the same new-build systems with storage.backend = "postgres" (index on a
#              PostgreSQL server this script starts: scripts/pg-server.sh), when
#              scripts/fetch-postgres.sh fetched it; --no-postgres skips them. Their recall
#              should be the SQLite backend's within 0.02 (the target of issue #16).
#   ... (base REV) lexical (no model), lexical, semantic, hybrid of a base build
#              ($VIKINGFS_BASE_BIN, or commit REV of --base, default 1b609a3), measured the
#              same way on the same corpus files, so a change's before and after are one run.
#
# Prints per corpus: system | recall@1 | recall@10 | MRR@10 | find p50 ms | find p99 ms |
# index docs/s (a base row beside the new build's), and per build hybrid's MRR@10 minus
# max(lexical, semantic); on the code corpus also the figures per language. Corpus building,
# BM25 and the metrics live in scripts/search_eval.py (`search_eval.py selftest` checks them).
#
# Usage: scripts/bench-search.sh [--quick] [--corpus pydoc|man|code|docs|all] [--base REV]
#                                [--no-base] [--no-old] [--no-new] [--no-postgres] [--no-f32]
#   --quick   300 queries per corpus instead of 1200 (the same documents; a prefix of the
#             full run's query sample)
#   --base REV  the base build's commit (default 1b609a3); --no-base skips the base build
# Environment: VIKINGFS_BIN (default target/release/vikingfs of this repository),
#   VIKINGFS_BASE_BIN (default: commit REV of --base, built once into target/bench-base/REV/
#   from a git worktree of this repository, its dependencies copied from target/release; a
#   given binary is labelled "base REV" all the same, so pass the --base REV it was built from),
#   VIKINGFS_OLD_BIN (default: commit 2341f2f, the last before the search rewrite, built once
#   into target/bench-old/ from a git worktree of this repository),
#   VIKINGFS_MODEL (default target/models/all-MiniLM-L6-v2: scripts/fetch-model.sh), TMPDIR,
#   BENCH_KEEP=1 keeps the temporary directory (its path is printed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EVAL=(python3 "$HERE/search_eval.py")

QUERIES=1200
CORPORA="pydoc man code docs"
BASE_REV=1b609a3
RUN_BASE=1
RUN_OLD=1
RUN_NEW=1
RUN_PG=1
RUN_F32=1
USAGE="usage: $0 [--quick] [--corpus pydoc|man|code|docs|all] [--base REV] [--no-base] [--no-old] [--no-new] [--no-postgres] [--no-f32]"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUERIES=300; shift ;;
        --corpus)
            case "${2:-}" in pydoc | man | code | docs) CORPORA=$2 ;; all) ;; *) echo "--corpus pydoc|man|code|docs|all" >&2; exit 2 ;; esac
            shift 2 ;;
        --base) [ -n "${2:-}" ] || { echo "$USAGE" >&2; exit 2; }; BASE_REV=$2; shift 2 ;;
        --no-base) RUN_BASE=0; shift ;;
        --no-old) RUN_OLD=0; shift ;;
        --no-new) RUN_NEW=0; shift ;;
        --no-postgres) RUN_PG=0; shift ;;
        --no-f32) RUN_F32=0; shift ;;
        *) echo "$USAGE" >&2; exit 2 ;;
    esac
done

REPO=$(cd "$HERE/.." && pwd)
OLD_COMMIT=2341f2f
NEW_BIN=${VIKINGFS_BIN:-$REPO/target/release/vikingfs}
OLD_BIN=${VIKINGFS_OLD_BIN:-$REPO/target/bench-old/target/release/vikingfs}
BASE_DIR=$REPO/target/bench-base/$BASE_REV
BASE_BIN=${VIKINGFS_BASE_BIN:-$BASE_DIR/target/release/vikingfs}
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
if [ "$RUN_BASE" = 1 ] && [ -z "${VIKINGFS_BASE_BIN:-}" ] && [ ! -x "$BASE_BIN" ]; then
    # The base build: a worktree of commit BASE_REV, built once. Its target directory starts
    # as a copy of this repository's release build, so cargo rebuilds vikingfs, not its
    # dependencies (their fingerprints name the same registry sources).
    echo "building the base build ($BASE_REV) into $BASE_DIR (once)"
    if [ ! -d "$BASE_DIR/src" ]; then
        mkdir -p "$BASE_DIR"
        git -C "$REPO" worktree add --detach "$BASE_DIR/src" "$BASE_REV" >/dev/null
    fi
    if [ ! -d "$BASE_DIR/target/release" ] && [ -d "$REPO/target/release/deps" ]; then
        mkdir -p "$BASE_DIR/target"
        cp -a --reflink=auto "$REPO/target/release" "$BASE_DIR/target/release"
        # Whatever the copy holds of vikingfs itself goes: cargo must build it from REV.
        (cd "$BASE_DIR/target/release" &&
            rm -rf .fingerprint/vikingfs-* build/vikingfs-* deps/vikingfs-* deps/libvikingfs-* \
                vikingfs vikingfs.d libvikingfs.* examples incremental)
    fi
    (cd "$BASE_DIR/src" &&
        timeout 3600 cargo build --release --target-dir "$BASE_DIR/target") ||
        echo "base build: cargo build failed"
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
# The code corpus reads the crates cargo downloaded, wherever HOME points next.
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
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

# has_batch BIN: the build answers `find --queries FILE` (the batch mode the runs use).
has_batch() {
    [ -x "$1" ] && timeout 60 "$1" find --help 2>/dev/null | grep -q -- --queries
}
# The new and the base build take part when they have batch queries.
NEW_OK=0
if [ "$RUN_NEW" = 1 ]; then
    if has_batch "$NEW_BIN"; then
        NEW_OK=1
        echo "new build: $NEW_BIN"
    else
        echo "new build: not available ($NEW_BIN missing or without \`find --queries\`)"
    fi
fi
BASE_OK=0
BASE_LABEL="base $BASE_REV"
if [ "$RUN_BASE" = 1 ]; then
    if has_batch "$BASE_BIN"; then
        BASE_OK=1
        echo "base build ($BASE_LABEL): $BASE_BIN"
    else
        echo "base build: not available ($BASE_BIN missing or without \`find --queries\`)"
    fi
fi
if [ $((NEW_OK + BASE_OK)) -gt 0 ]; then
    if [ -d "$MODEL" ]; then
        printf '{"embedding":{"dense":{"provider":"local","model":"%s"}}}\n' "$MODEL" > "$WORK/model.json"
        echo "model: $MODEL"
    else
        echo "model: not found at $MODEL: semantic and hybrid not measured"
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

# measure TAG BIN LABEL: one build's systems on corpus $C: lexical on a workspace without
# a config, then lexical, semantic and hybrid on one with the model (and, for the new build,
# the same on PostgreSQL). TAG names its files, LABEL its rows ("" for the new build).
measure() {
    local tag=$1 bin=$2 label=$3 what=${3:-new build} ws backend backends conf suffix mode t0
    t0=$(date +%s)
    echo "-- $what, out of the box (no model config)"
    ws=$WORK/ws-$tag-nomodel-$CORPUS
    run "$tag lexical-index" timeout $((T_INDEX + 120)) "${EVAL[@]}" index --bin "$bin" --workspace "$ws" \
        --src "$C/docs" --meta "$C/$tag-nomodel.meta" --timeout $T_INDEX &&
        { "${EVAL[@]}" status --bin "$bin" --workspace "$ws" || true; } &&
        run "$tag lexical (no model)" timeout $T_RUN "${EVAL[@]}" run-batch --bin "$bin" --workspace "$ws" \
            --mode lexical --corpus "$C" --out "$C/$tag-lexical-nomodel.run" --timeout $T_RUN &&
        "${EVAL[@]}" score "$C" "$C/$tag-lexical-nomodel.run" --system "lexical (no model)" \
            --build "$label" --meta "$C/$tag-nomodel.meta" --latency batch --results "$R" || true
    rm -rf "$ws"

    backends=sqlite
    [ "$RUN_F32" = 1 ] && [ "$tag" = new ] && backends="$backends f32"
    [ "$RUN_PG" = 1 ] && [ "$tag" = new ] && backends="$backends postgres"
    for backend in $backends; do
        [ -f "$WORK/model.json" ] || break
        conf=$WORK/model.json suffix=""
        if [ "$backend" = postgres ]; then
            DSN=$("$HERE/pg-server.sh" start "$PGDIR") || { FAILED+=("$CORPUS/postgres-server"); break; }
            python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c["storage"] = {"backend": "postgres", "postgres": {"dsn": sys.argv[2]}}
print(json.dumps(c))' "$WORK/model.json" "$DSN" > "$WORK/model-pg.json"
            conf=$WORK/model-pg.json suffix=" (postgres)"
            echo "-- $what, model configured, index on PostgreSQL"
        elif [ "$backend" = f32 ]; then
            python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c["vikingfs"] = {"index": {"model_precision": "f32"}}
print(json.dumps(c))' "$WORK/model.json" > "$WORK/model-f32.json"
            conf=$WORK/model-f32.json suffix=" (f32)"
            echo "-- $what, model configured, its linear layers in f32"
        else
            echo "-- $what, model configured"
        fi
        ws=$WORK/ws-$tag-model-$CORPUS-$backend
        if run "$tag model-index$suffix" timeout $((T_INDEX + 120)) "${EVAL[@]}" index --bin "$bin" \
            --workspace "$ws" --config "$conf" --src "$C/docs" \
            --meta "$C/$tag-model-$backend.meta" --timeout $T_INDEX; then
            "${EVAL[@]}" status --bin "$bin" --workspace "$ws" --config "$conf" || true
            for mode in lexical semantic hybrid; do
                run "$tag $mode$suffix" timeout $T_RUN "${EVAL[@]}" run-batch --bin "$bin" --workspace "$ws" \
                    --config "$conf" --mode "$mode" --corpus "$C" \
                    --out "$C/$tag-$mode-$backend.run" --timeout $T_RUN &&
                    "${EVAL[@]}" score "$C" "$C/$tag-$mode-$backend.run" --system "$mode$suffix" \
                        --build "$label" --meta "$C/$tag-model-$backend.meta" --latency batch \
                        --results "$R" || true
            done
            # Queries holding quotes or dashed words, as written against stripped of them
            # (issue 46: a query is text unless it is unmistakably syntax).
            if [ "$backend" = sqlite ] && [ "$tag" = new ]; then
                "${EVAL[@]}" strip "$C" --out "$C/stripped" >/dev/null
                for mode in lexical hybrid; do
                    run "$tag $mode stripped" timeout $T_RUN "${EVAL[@]}" run-batch --bin "$bin" \
                        --workspace "$ws" --config "$conf" --mode "$mode" --corpus "$C/stripped" \
                        --out "$C/$tag-$mode-stripped.run" --timeout $T_RUN >/dev/null &&
                        "${EVAL[@]}" syntax "$C" "$C/$tag-$mode-$backend.run" \
                            "$C/$tag-$mode-stripped.run" --system "$mode" | tee -a "$C/syntax.txt" || true
                done
            fi
        fi
        # BENCH_KEEP=1 keeps the model's workspaces too (to query them again).
        [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$ws"
        if [ "$backend" = postgres ]; then "$HERE/pg-server.sh" stop "$PGDIR"; fi
    done
    echo "   ($what on corpus $CORPUS: $(( $(date +%s) - t0 )) s)"
}

for CORPUS in $CORPORA; do
    C=$WORK/$CORPUS
    R=$C/results.jsonl
    T0=$(date +%s)
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
    echo "   (built in $(( $(date +%s) - T0 )) s)"

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

    # The base build first, then the new one: the same corpus files, the same steps.
    if [ "$BASE_OK" = 1 ]; then measure base "$BASE_BIN" "$BASE_LABEL"; fi
    if [ "$NEW_OK" = 1 ]; then measure new "$NEW_BIN" ""; fi
    echo
    if [ -s "$R" ]; then
        "${EVAL[@]}" table "$R" --title "== results: corpus $CORPUS (top $((10)), known-item)"
        if [ -s "$C/syntax.txt" ]; then cat "$C/syntax.txt"; fi
    else
        echo "== results: corpus $CORPUS: no system measured"
    fi
    echo "  (corpus $CORPUS: $(( $(date +%s) - T0 )) s)"
done

echo
echo "total: $(( $(date +%s) - START )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed: ${FAILED[*]}" >&2
    exit 1
fi
