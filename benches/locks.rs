//! Lock engine benchmark: medians of the operations every vikingfs call pays, each printed
//! beside a baseline measured in the same run (the raw syscalls the operation cannot avoid)
//! and beside OpenViking 0.5.2's figures on this kind of machine.
//!
//! Run with `scripts/bench-locks.sh` (or `cargo bench --bench locks`). Numbers, not assertions.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use vikingfs::config::LockConfig;
use vikingfs::lock::{LockKind, LockManager};
use vikingfs::workspace::Workspace;

const OPENVIKING_EXACT: Duration = Duration::from_micros(200);
const OPENVIKING_TREE: Duration = Duration::from_millis(60);
const TARGET_EXACT: Duration = Duration::from_micros(20);
const TARGET_TREE: Duration = Duration::from_millis(6);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Medians of `a` and `b`, run alternately so both see the same machine load.
fn time_pair(n: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..n / 10 + 1 {
        a();
        b();
    }
    let (mut va, mut vb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        a();
        va.push(t.elapsed());
        let t = Instant::now();
        b();
        vb.push(t.elapsed());
    }
    (median(va), median(vb))
}

fn walk_plain(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += walk_plain(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

fn row(
    what: &str,
    ours: Duration,
    base_name: &str,
    base: Duration,
    ov: Duration,
    target: Duration,
) {
    println!(
        "{what:<34} median {:>10.1?}   baseline ({base_name}) {:>10.1?}  x{:<5.2}  OpenViking {:>8.1?}  {:>5.1}x faster  target {:?}: {}",
        ours,
        base,
        ours.as_secs_f64() / base.as_secs_f64(),
        ov,
        ov.as_secs_f64() / ours.as_secs_f64(),
        target,
        if ours <= target { "met" } else { "MISSED" }
    );
}

fn main() {
    let dir = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| "/tmp".into()))
        .unwrap();
    let ws = Workspace::open(dir.path(), "default", "default").unwrap();
    let m = LockManager::new(&ws, LockConfig::default()).unwrap();
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);

    // EXACT acquire + release on a file in an existing directory.
    let data = ws.data_root();
    std::fs::create_dir_all(data.join("resources/a")).unwrap();
    std::fs::write(data.join("resources/a/b.md"), b"x").unwrap();
    let p = ws.parse_uri("viking://resources/a/b.md").unwrap();
    let raw = data.join("resources/a/.raw");
    let (exact, base) = time_pair(
        n,
        || drop(m.exact(&p).unwrap()),
        || {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&raw)
                .unwrap();
            f.write_all(b"owner:1:E").unwrap();
            drop(f);
            std::fs::remove_file(&raw).unwrap();
        },
    );
    row(
        "EXACT acquire+release",
        exact,
        "O_EXCL create+write+unlink",
        base,
        OPENVIKING_EXACT,
        TARGET_EXACT,
    );

    // TREE acquire on a directory of 10,000 files in 100 subdirectories.
    let big = data.join("resources/big");
    for d in 0..100 {
        let sd = big.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sd).unwrap();
        for f in 0..100 {
            std::fs::write(sd.join(format!("f{f:03}.md")), b"").unwrap();
        }
    }
    let bp = ws.parse_uri("viking://resources/big").unwrap();
    let runs = (n / 200).max(20);
    let (mut acq, mut walks) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs + 3 {
        let t = Instant::now();
        let g = m
            .acquire(&[(bp.clone(), LockKind::Tree)], Duration::ZERO)
            .unwrap();
        let el = t.elapsed();
        drop(g);
        let t = Instant::now();
        assert_eq!(walk_plain(&big), 10_000);
        let wl = t.elapsed();
        if i >= 3 {
            acq.push(el);
            walks.push(wl);
        }
    }
    let (tree, walk) = (median(acq), median(walks));
    row(
        "TREE acquire, 10,000 files/100 dirs",
        tree,
        "std read_dir walk",
        walk,
        OPENVIKING_TREE,
        TARGET_TREE,
    );
}
