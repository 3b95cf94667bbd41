#!/usr/bin/env bash
# A throwaway PostgreSQL 18 with pgvector for benchmarks (the tests start their own from Rust,
# tests/pg_support): `initdb` as `nobody` (PostgreSQL refuses root) into DIR, listening on
# 127.0.0.1 only, with a database `vikingfs`.
#
#   scripts/pg-server.sh start DIR    # prints the DSN on stdout
#   scripts/pg-server.sh stop DIR     # stops it (immediate) and removes DIR
#
# The binaries come from scripts/fetch-postgres.sh (target/postgres; VIKINGFS_PG_BIN overrides
# the bin directory). DIR must be reachable by `nobody` (not under /root).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${VIKINGFS_PG_BIN:-$HERE/../target/postgres/bin}
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

case "$cmd" in
start)
    [ -x "$BIN/postgres" ] || { echo "pg-server: no PostgreSQL at $BIN: run scripts/fetch-postgres.sh" >&2; exit 1; }
    mkdir -p "$dir"
    chmod 755 "$dir"
    chown nobody "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    (cd / && as_nobody timeout 120 "$BIN/initdb" -D "$dir/data" -U postgres -A trust >/dev/null)
    (cd / && as_nobody timeout 120 "$BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >/dev/null)
    timeout 60 "$BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE vikingfs" >/dev/null
    echo "host=127.0.0.1 port=$port dbname=vikingfs user=postgres"
    ;;
stop)
    if [ -d "$dir/data" ]; then
        (cd / && as_nobody timeout 60 "$BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1) || true
    fi
    rm -rf "$dir"
    ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
