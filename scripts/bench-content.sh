#!/usr/bin/env bash
# What a user's first day leaves in a workspace: `cp -r` of a package documentation tree
# (/usr/share/doc/git: Markdown, plain text and gzip files) and a `git clone` of this
# repository onto a fresh mount, each followed by `vikingfs wait`. Printed per build, side by
# side: time to drain, records, lexical rows, sidecar files written, dead jobs, `git status
# --porcelain` lines in the clone, sidecar files in `ls -aR` of the mount, binary bytes
# (replacement or control characters) in summaries, and the top results of two queries.
#
# Usage: scripts/bench-content.sh [BIN ...]   (default: target/release/vikingfs)
# Environment: DOCS (default /usr/share/doc/git), REPO (default: this repository), TMPDIR.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
DOCS=${DOCS:-/usr/share/doc/git}
REPO=${REPO:-$HERE}
[ $# -gt 0 ] || set -- "$HERE/target/release/vikingfs"

run_one() {
    local bin=$1 tmp ws mnt t0 t1 t2
    tmp=$(mktemp -d)
    ws=$tmp/ws
    mnt=$tmp/mnt
    mkdir -p "$mnt"
    export VIKINGFS_WORKSPACE=$ws
    timeout 60 "$bin" mount "$ws" "$mnt" >/dev/null
    trap 'timeout 30 "$bin" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null; rm -rf "$tmp"' RETURN

    t0=$(date +%s.%N)
    cp -r "$DOCS" "$mnt/resources/docs"
    timeout 900 "$bin" wait --watch >/dev/null
    t1=$(date +%s.%N)
    git clone -q "$REPO" "$mnt/resources/repo"
    timeout 900 "$bin" wait --watch >/dev/null
    t2=$(date +%s.%N)
    # The clone as git sees it after the workers wrote summaries (and a commit).
    local porcelain fsck_ok
    porcelain=$(git -C "$mnt/resources/repo" status --porcelain | wc -l)
    if git -C "$mnt/resources/repo" fsck --no-progress >/dev/null 2>&1; then fsck_ok=ok; else fsck_ok=FAILED; fi

    local data=$ws/viking/default
    local st records lexical dead partial
    st=$(timeout 60 "$bin" status --json)
    records=$(jq -r '.index.records' <<<"$st")
    lexical=$(jq -r '.index.lexical' <<<"$st")
    partial=$(jq -r '.index.partial // "-"' <<<"$st")
    dead=$(jq -r '[.queues[] | .dead] | add' <<<"$st")
    local sidecars git_sidecars listed bad
    sidecars=$(find "$data" \( -name .abstract.md -o -name .overview.md \) | wc -l)
    git_sidecars=$(find "$data/resources/repo/.git" \( -name .abstract.md -o -name .overview.md \) | wc -l)
    listed=$(ls -aR "$mnt/resources" | grep -cE '^\.(abstract|overview)\.md$' || true)
    # Replacement characters or control characters (but tab and newline) in any summary.
    bad=$(find "$data" \( -name .abstract.md -o -name .overview.md \) -print0 |
        xargs -0 grep -lP '\x{FFFD}|[\x00-\x08\x0B-\x1F\x7F]' 2>/dev/null | wc -l || true)
    printf '%-34s %s\n' "build" "$bin"
    printf '%-34s %.1f s / %.1f s\n' "drain after cp -r docs / git clone" \
        "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
    printf '%-34s %s\n' "records / lexical rows / partial" "$records / $lexical / $partial"
    printf '%-34s %s (under .git: %s)\n' "sidecar files written" "$sidecars" "$git_sidecars"
    printf '%-34s %s\n' "sidecars listed by ls -aR" "$listed"
    printf '%-34s %s\n' "summaries with binary bytes" "$bad"
    printf '%-34s %s\n' "dead jobs" "$dead"
    printf '%-34s %s lines, git fsck %s\n' "git status --porcelain (clone)" "$porcelain" "$fsck_ok"
    echo "abstract of docs/:"
    { sed 's/^/    /' "$data/resources/docs/.abstract.md" 2>/dev/null || echo "    (none)"; } | fold -s -w 100
    echo
    echo "abstract of repo/src/lock/:"
    { sed 's/^/    /' "$data/resources/repo/src/lock/.abstract.md" 2>/dev/null || echo "    (none)"; } | fold -s -w 100
    echo
    for q in "lock file" "release notes"; do
        echo "find \"$q\" (top 5):"
        timeout 60 "$bin" find --limit 5 "$q" 2>/dev/null | sed 's/^/    /' | cut -c1-110 || true
    done
    echo
}

for b in "$@"; do
    run_one "$b"
done
