#!/usr/bin/env bash
# vikingfs on a shared GlusterFS volume beside GlusterFS's own FUSE mount without vikingfs, on
# one host and on two hosts at once (docs/several-hosts.md). One machine: glusterd in a network
# namespace of its own (state in WORKDIR, bind-mounted over /var/lib/glusterd, /run and
# /var/log/glusterfs in a mount namespace of its own), one brick in WORKDIR, a volume with the
# coherence settings; two GlusterFS clients (the "hosts", each its own glusterfs process and
# connection, mounted the fstab way: attribute/entry/negative timeouts 0, direct I/O), and a
# vikingfs daemon over each (postgres backend, one server by scripts/pg-server.sh).
#
#   scripts/bench-gluster.sh [WORKDIR]
#
# Workloads, each on a fresh directory, each target in turn:
#   write   FILES (1,000) files of 0-4 KiB of real text in DIRS (100) directories, by one python
#   tar     tar xf of a tarball of /usr/include/linux (763 files, 6.5 MB here)
#   mv      every file of the write tree renamed in its directory, by one python
#   rm      rm -rf of both trees
# WORKLOADS (a space-separated list) runs some of them only ("write mv rm": no tar).
# "two" runs the workload on both hosts at once, each in a directory of its own; its figure is
# the slower host's. For vikingfs, "+settled" adds the time until `vikingfs wait` returns (the
# index, the history and the summaries current). Wall seconds, one round.
# Needs root, glusterfs-server and glusterfs-client, python3, tar, PostgreSQL fetched
# (scripts/fetch-postgres.sh); everything made is undone on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${VIKINGFS_BIN:-$ROOT/target/release/vikingfs}
WORK=${1:-$(mktemp -d /var/tmp/vikingfs-gluster.XXXXXX)}
FILES=${FILES:-1000}
DIRS=${DIRS:-100}
NS=vfs-b-gluster
ADDR=10.214.250.2

refuse() { echo "bench-gluster: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || refuse "not root"
for c in glusterd gluster mount.glusterfs python3 tar; do
    command -v $c >/dev/null || refuse "$c is not installed"
done
[ -x "$BIN" ] || refuse "no vikingfs at $BIN (cargo build --release)"
# PostgreSQL runs as nobody, under WORKDIR.
chmod 755 "$WORK"
mkdir -p "$WORK"/{state/lib,state/run/gluster,state/log,brick,a,b}

cleanup() {
    set +e
    for h in a b; do
        [ -f "$WORK/$h/mnt.pid" ] || continue
        timeout 30 "$BIN" umount "$WORK/$h/mnt" 2>/dev/null || {
            kill -KILL "$(cat "$WORK/$h/mnt.pid")" 2>/dev/null
            umount -l "$WORK/$h/mnt"
        }
    done
    for h in a b; do umount -l "$WORK/$h/gv" 2>/dev/null; done
    [ -n "${SERVER_PID:-}" ] && kill -KILL "$SERVER_PID" 2>/dev/null
    for p in $(ip netns pids $NS 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del $NS 2>/dev/null
    ip link del vfs-b-g0 2>/dev/null
    "$ROOT/scripts/pg-server.sh" stop "$WORK/pg" >/dev/null 2>&1
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

ip netns add $NS
ip link add vfs-b-g0 type veth peer name vfs-b-g1 netns $NS
ip addr add 10.214.250.1/24 dev vfs-b-g0
ip link set vfs-b-g0 up
ip -n $NS addr add $ADDR/24 dev vfs-b-g1
ip -n $NS link set vfs-b-g1 up
ip -n $NS link set lo up
STATE=$WORK/state nsenter --net=/run/netns/$NS -- unshare --mount --propagation private \
    --pid --fork --kill-child -- sh -c '
    mount --bind "$STATE/lib" /var/lib/glusterd
    mount --bind "$STATE/run" /run
    mount --bind "$STATE/log" /var/log/glusterfs
    exec glusterd -N -L WARNING' >"$WORK/glusterd.out" 2>&1 &
SERVER_PID=$!
G=(gluster --mode=script "--glusterd-sock=$WORK/state/run/glusterd.socket")
for _ in $(seq 100); do "${G[@]}" volume list >/dev/null 2>&1 && break; sleep 0.1; done
"${G[@]}" volume create gv "$ADDR:$WORK/brick" force >/dev/null
for o in quick-read io-cache open-behind write-behind stat-prefetch read-ahead readdir-ahead; do
    "${G[@]}" volume set gv performance.$o off >/dev/null
done
"${G[@]}" volume start gv >/dev/null
DSN=$("$ROOT/scripts/pg-server.sh" start "$WORK/pg")
for h in a b; do
    mkdir -p "$WORK/$h/gv" "$WORK/$h/mnt" "$WORK/$h/home/.vikingfs"
    mount -t glusterfs -o "attribute-timeout=0,entry-timeout=0,negative-timeout=0,direct-io-mode=enable,log-file=$WORK/$h.client.log" \
        "$ADDR:/gv" "$WORK/$h/gv"
    printf '{"storage": {"backend": "postgres", "postgres": {"dsn": "%s"}}}\n' "$DSN" \
        >"$WORK/$h/home/.vikingfs/config.json"
done
for h in a b; do
    HOME=$WORK/$h/home "$BIN" mount --pid-file "$WORK/$h/mnt.pid" "$WORK/$h/gv/ws" "$WORK/$h/mnt"
done
tar cf "$WORK/linux.tar" -C /usr/include linux

# The directory host $1 works in on target $2 (gluster: the bare client mount).
dir_of() {
    case $2 in
        gluster) echo "$WORK/$1/gv/bare" ;;
        vikingfs) echo "$WORK/$1/mnt/resources" ;;
    esac
}
# Run workload $1 in directory $2 (made fresh by "write").
work() {
    local d=$2
    case $1 in
        write) python3 - "$d/w" "$FILES" "$DIRS" <<'EOF'
import os, sys, glob
root, n, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/include/linux/*.h"))[:200])
for d in range(dirs):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
for i in range(n):
    size = (i * 2654435761) % 4096
    with open(f"{root}/d{i % dirs}/f{i}.txt", "wb") as f:
        f.write(text[(i * 977) % (len(text) - 4096):][:size])
EOF
            ;;
        tar) mkdir -p "$d/t" && tar xf "$WORK/linux.tar" -C "$d/t" ;;
        mv) python3 - "$d/w" <<'EOF'
import os, sys
for dp, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        os.rename(os.path.join(dp, f), os.path.join(dp, "m" + f))
EOF
            ;;
        rm) rm -rf "$d/w" "$d/t" ;;
    esac
}
now() { date +%s.%N; }
settle() { for h in $1; do HOME=$WORK/$h/home timeout 1800 "$BIN" --workspace "$WORK/$h/gv/ws" wait >/dev/null; done; }

printf '%-8s %-6s %10s %10s %12s\n' workload hosts gluster vikingfs '+settled'
round=0
for hosts in "a" "a b"; do
    round=$((round + 1))
    for wl in ${WORKLOADS:-write tar mv rm}; do
        declare -A T=()
        for target in gluster vikingfs; do
            t0=$(now)
            pids=()
            for h in $hosts; do
                d=$(dir_of "$h" $target)/r$round$h
                [ "$wl" = write ] && mkdir -p "$d"
                work "$wl" "$d" &
                pids+=($!)
            done
            # Only these (glusterd runs in the background too).
            wait "${pids[@]}"
            T[$target]=$(echo "$(now) - $t0" | bc)
            if [ $target = vikingfs ]; then
                settle "$hosts"
                T[settled]=$(echo "$(now) - $t0" | bc)
            fi
        done
        printf '%-8s %-6s %10.2f %10.2f %12.2f\n' "$wl" "$(echo $hosts | wc -w)" \
            "${T[gluster]}" "${T[vikingfs]}" "${T[settled]}"
    done
done
