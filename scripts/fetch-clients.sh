#!/usr/bin/env bash
# Fetches the real clients the server's tests talk to (tests/api): OpenViking's own Python
# client (openviking-sdk), the reference MCP client (mcp), and the `ov` command shipped inside
# the openviking 0.5.2 wheel. Idempotent: exits at once if DEST already holds them.
# Usage: scripts/fetch-clients.sh [DEST]   (default: target/clients in the repo)
#   DEST/venv/bin/python   with openviking-sdk and mcp installed
#   DEST/bin/ov            OpenViking's CLI (DEST/openviking/bin/ov beside the libraries the
#                          wheel bundles in DEST/openviking.libs, which its RPATH names)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/target/clients}"
# Pinned, so a new release cannot change what the tests speak to.
sdk="openviking-sdk==0.1.17"
mcp="mcp==1.*"
ov_wheel="openviking==0.5.2"

# `ov` refuses every command, --version too, until a display language is chosen in
# ~/.openviking: it is asked in a private HOME so the check never depends on this user's.
ov_runs() {
  local home rc
  home="$(mktemp -d)"
  mkdir -p "$home/.openviking"
  echo '{"language": "en"}' > "$home/.openviking/ovcli.settings.conf"
  HOME="$home" NO_COLOR=1 "$1" --version >/dev/null 2>&1 && rc=0 || rc=1
  rm -rf "$home"
  return $rc
}

have_all() {
  [ -x "$1/venv/bin/python" ] && [ -x "$1/bin/ov" ] \
    && "$1/venv/bin/python" -c 'import mcp, openviking_sdk' 2>/dev/null \
    && ov_runs "$1/bin/ov"
}

if have_all "$dest"; then
  echo "fetch-clients: $dest already holds the clients"
  exit 0
fi

mkdir -p "$dest/bin"
if [ ! -x "$dest/venv/bin/python" ]; then
  python3 -m venv "$dest/venv"
fi
timeout 900 "$dest/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$sdk" "$mcp" >&2

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
timeout 600 python3 -m pip download --quiet --no-deps --disable-pip-version-check "$ov_wheel" -d "$tmp" >&2
whl="$(ls "$tmp"/openviking-*.whl | head -1)"
python3 - "$whl" "$dest" <<'PY'
import os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n == "openviking/bin/ov" or n.startswith("openviking.libs/"):
            z.extract(n, dest)
PY
chmod +x "$dest/openviking/bin/ov"
ln -sf ../openviking/bin/ov "$dest/bin/ov"
have_all "$dest" || { echo "fetch-clients: the clients did not install into $dest" >&2; exit 1; }
echo "fetch-clients: $dest holds openviking-sdk, mcp and ov"
