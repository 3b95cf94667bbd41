//! Per-operation cost of the locked operations the mount runs for rename(2) and unlink(2),
//! in process (no FUSE), until the mount would reply, beside the bare syscall on a plain directory of the same size in the
//! same run: what the lock files, the index and the queue add to each call.
//!
//! Run with `cargo bench --bench ops` (`BENCH_DIR` picks the filesystem, default /var/tmp;
//! `BENCH_FILES` the directory size, default 10,000). Numbers, not assertions.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vikingfs::config::Config;
use vikingfs::index::{Level, Record};
use vikingfs::ops::{AfterReply, Ops, RenameFlags};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Time `ours(i)` and `base(i)` for i in 0..n, alternating so both see the same load. `ours`
/// runs in a reply scope, as the mount runs it, and is timed until its reply: what it
/// leaves for after the reply runs untimed.
fn pair(
    n: usize,
    mut ours: impl FnMut(usize),
    mut base: impl FnMut(usize),
) -> (Duration, Duration) {
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let scope = AfterReply::begin();
        let t = Instant::now();
        ours(i);
        a.push(t.elapsed());
        drop(scope);
        let t = Instant::now();
        base(i);
        b.push(t.elapsed());
    }
    (median(a), median(b))
}

fn row(what: &str, ours: Duration, base: Duration) {
    println!(
        "{what:<40} vikingfs {:>9.1?}   bare syscall {:>9.1?}   +{:>7.1?} per call",
        ours,
        base,
        ours.saturating_sub(base)
    );
}

fn fill(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
    }
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
    let plain = dir.path().join("plain");
    let d = VPath::from_rel("resources/bench").unwrap();
    let d_fs = ws.data_root().join(d.as_str());
    let vp = |name: String| d.join(&name).unwrap();
    println!("{n} files in one directory, {}", dir.path().display());

    for indexed in [false, true] {
        fill(&d_fs, n);
        fill(&plain, n);
        if indexed {
            let recs: Vec<Record> = (0..n)
                .map(|i| Record {
                    uri: vp(format!("f{i}")),
                    level: Level::Content,
                    vector: ops.embedder().embed(&["x"]).unwrap().pop().unwrap(),
                    snippet: String::new(),
                    source_version: "v".into(),
                })
                .collect();
            ops.index().upsert_many(&recs).unwrap();
        }
        let what = if indexed { "indexed" } else { "not indexed" };
        let (o, b) = pair(
            n,
            |i| {
                ops.rename(
                    &vp(format!("f{i}")),
                    &vp(format!("g{i}")),
                    RenameFlags::default(),
                )
                .unwrap()
            },
            |i| {
                std::fs::rename(plain.join(format!("f{i}")), plain.join(format!("g{i}"))).unwrap()
            },
        );
        row(&format!("rename, file {what}"), o, b);
        let (o, b) = pair(
            n,
            |i| ops.unlink(&vp(format!("g{i}"))).unwrap(),
            |i| std::fs::remove_file(plain.join(format!("g{i}"))).unwrap(),
        );
        row(&format!("unlink, file {what}"), o, b);
        // Let the queue settle between rounds: its work is not what is measured.
        ops.queue().stop_spool();
        ops.queue().start_spool().unwrap();
    }
}
