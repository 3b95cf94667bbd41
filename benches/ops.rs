//! Per-operation cost of the locked operations the mount runs for rename(2) and unlink(2),
//! in process (no FUSE), until the mount would reply, beside two baselines measured in the
//! same run on plain directories of the same size:
//! - the bare syscall;
//! - the lock protocol's floor: the syscall plus the lock files' own directory changes, a link
//!   and an unlink per lock file (a file rename takes two EXACT locks, an unlink one; the
//!   design, OpenViking's lock files, seed doc "mv"). No implementation of the design can go
//!   below it; what vikingfs spends above it is its own.
//!
//! Run with `cargo bench --bench ops` (`BENCH_DIR` picks the filesystem, default /var/tmp;
//! `BENCH_FILES` the directory size, default 10,000). Numbers, not assertions.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vikingfs::config::Config;
use vikingfs::fs::{AfterReply, RenameMode};
use vikingfs::index::{Level, Record};
use vikingfs::ops::Ops;
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Medians of `ours(i)`, `floor(i)` and `bare(i)` for i in 0..n, interleaved so all see the
/// same load. `ours` runs in a reply scope, as the mount runs it, and is timed until its
/// reply: what it leaves for after the reply runs untimed.
fn time3(
    n: usize,
    mut ours: impl FnMut(usize),
    mut floor: impl FnMut(usize),
    mut bare: impl FnMut(usize),
) -> [Duration; 3] {
    let mut v: [Vec<Duration>; 3] = Default::default();
    for i in 0..n {
        let scope = AfterReply::begin();
        let t = Instant::now();
        ours(i);
        v[0].push(t.elapsed());
        drop(scope);
        let t = Instant::now();
        floor(i);
        v[1].push(t.elapsed());
        let t = Instant::now();
        bare(i);
        v[2].push(t.elapsed());
    }
    v.map(median)
}

fn row(what: &str, [ours, floor, bare]: [Duration; 3]) {
    println!(
        "{what:<28} vikingfs {:>8.1?}   protocol floor {:>8.1?}   bare syscall {:>8.1?}   above the floor {:>+8.1?}",
        ours,
        floor,
        bare,
        ours.as_secs_f64() * 1e6 - floor.as_secs_f64() * 1e6
    );
}

fn fill(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
    }
}

/// A lock file's name for `name` (OpenViking's shape: prefix, name, 16 hex digits).
fn lock_name(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!(".exact.ovlock.{name}.0123456789abcdef"))
}

fn main() {
    let n: usize = std::env::var("BENCH_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let base_dir = std::env::var_os("BENCH_DIR").unwrap_or_else(|| "/var/tmp".into());
    let dir = tempfile::tempdir_in(base_dir).unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let ops: Arc<Ops> = Ops::open(&ws, &Config::default()).unwrap();
    // As the mount daemon runs it: jobs are appended to the spool.
    ops.queue().start_spool().unwrap();
    let (plain, floor) = (dir.path().join("plain"), dir.path().join("floor"));
    // The floor's lock files are hard links of one spare, as vikingfs's lock pool places them.
    let spare = dir.path().join("spare");
    std::fs::write(&spare, b"token").unwrap();
    let d = VPath::from_rel("resources/bench").unwrap();
    let d_fs = ws.data_root().join(d.as_str());
    let vp = |name: String| d.join(&name).unwrap();
    println!("{n} files in one directory, {}", dir.path().display());

    for indexed in [false, true] {
        fill(&d_fs, n);
        fill(&plain, n);
        fill(&floor, n);
        if indexed {
            let recs: Vec<Record> = (0..n)
                .map(|i| Record {
                    uri: vp(format!("f{i}")),
                    level: Level::Content,
                    text: format!("file number {i}"),
                    vector: None,
                    snippet: String::new(),
                    source_version: "v".into(),
                    partial: false,
                })
                .collect();
            ops.index().upsert_many(&recs).unwrap();
        }
        let what = if indexed { "indexed" } else { "not indexed" };
        let t = time3(
            n,
            |i| {
                ops.rename(
                    &vp(format!("f{i}")),
                    &vp(format!("g{i}")),
                    RenameMode::Replace,
                )
                .unwrap()
            },
            |i| {
                let (a, b) = (format!("f{i}"), format!("g{i}"));
                let (la, lb) = (lock_name(&floor, &a), lock_name(&floor, &b));
                std::fs::hard_link(&spare, &la).unwrap();
                std::fs::hard_link(&spare, &lb).unwrap();
                std::fs::rename(floor.join(&a), floor.join(&b)).unwrap();
                std::fs::remove_file(&lb).unwrap();
                std::fs::remove_file(&la).unwrap();
            },
            |i| std::fs::rename(plain.join(format!("f{i}")), plain.join(format!("g{i}"))).unwrap(),
        );
        row(&format!("rename, file {what}"), t);
        let t = time3(
            n,
            |i| ops.unlink(&vp(format!("g{i}"))).unwrap(),
            |i| {
                let a = format!("g{i}");
                let la = lock_name(&floor, &a);
                std::fs::hard_link(&spare, &la).unwrap();
                std::fs::remove_file(floor.join(&a)).unwrap();
                std::fs::remove_file(&la).unwrap();
            },
            |i| std::fs::remove_file(plain.join(format!("g{i}"))).unwrap(),
        );
        row(&format!("unlink, file {what}"), t);
        // Let the queue settle between rounds: its work is not what is measured.
        ops.queue().stop_spool();
        ops.queue().start_spool().unwrap();
    }
}
