#!/bin/bash
# How long a refusal of a path a user holds (`vikingfs lock`) takes through the mount and the
# CLI: rm of one locked file, rm -rf of a locked 15-file tree, `vikingfs rm`. Side by side
# with another build: B_OLD=/path/to/old/vikingfs scripts/bench-busy.sh
set -u
run() {
    local B=$1 T
    T=$(mktemp -d)
    mkdir -p "$T/mnt"
    HOME=$T timeout 60 "$B" mount "$T/ws" "$T/mnt" >/dev/null 2>&1 || { echo "$B: mount failed"; return 1; }
    local R=$T/mnt/resources
    mkdir -p "$R/tree"; echo a > "$R/one.md"
    for i in $(seq 1 15); do echo "$i" > "$R/tree/f$i.md"; done
    HOME=$T timeout 120 "$B" --workspace "$T/ws" wait >/dev/null 2>&1
    HOME=$T "$B" --workspace "$T/ws" lock "$R/one.md" -- sleep 60 & local l1=$!
    HOME=$T "$B" --workspace "$T/ws" lock --tree "$R/tree" -- sleep 60 & local l2=$!
    sleep 1
    t() {
        local s e rc
        s=$(date +%s%N); timeout 60 "$@" >/dev/null 2>&1; rc=$?; e=$(date +%s%N)
        printf '  %-28s exit %-3d %8.3f s\n' "$LABEL" "$rc" "$(echo "($e - $s) / 1000000000" | bc -l)"
    }
    echo "$B"
    LABEL="rm FILE (mount)" t rm "$R/one.md"
    LABEL="rm -rf TREE (15 files)" t rm -rf "$R/tree"
    LABEL="vikingfs rm" HOME=$T t "$B" --workspace "$T/ws" rm viking://resources/one.md
    kill $l1 $l2 2>/dev/null; wait $l1 $l2 2>/dev/null
    HOME=$T timeout 60 "$B" umount "$T/mnt" >/dev/null 2>&1 || umount -l "$T/mnt"
    rm -rf "$T"
}
run "${B:-$(dirname "$0")/../target/debug/vikingfs}"
[ -n "${B_OLD:-}" ] && run "$B_OLD"
exit 0
