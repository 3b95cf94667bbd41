//! Owners that die and owners that live: a lock of a process killed with SIGKILL is free at
//! once; a live holder keeps its lock through long work, its token kept fresh for observers
//! that can only judge it by age (OpenViking).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vikingfs::config::LockConfig;
use vikingfs::lock::{codec, LockError, LockManager};
use vikingfs::workspace::Workspace;

const CHILD_ENV: &str = "VIKINGFS_LOCK_LIVENESS_CHILD";

fn manager(ws: &Workspace, expire: Duration) -> std::sync::Arc<LockManager> {
    LockManager::new(
        ws,
        LockConfig {
            timeout: Duration::ZERO,
            expire,
        },
    )
    .unwrap()
}

/// Child: take a TREE on viking://resources/held, say "locked", then hold for `secs` (0 =
/// forever), doing work, then say "done" and release.
fn child(ws_dir: &str, expire_ms: u64, secs: u64) {
    let ws = Workspace::open(ws_dir, "default", "default").unwrap();
    let m = manager(&ws, Duration::from_millis(expire_ms));
    let g = m
        .tree(&ws.parse_uri("viking://resources/held").unwrap())
        .unwrap();
    // A leading newline: libtest has already printed "test NAME ... " without one.
    println!("\n@@locked {}", g.files()[0].display());
    let t0 = Instant::now();
    while secs == 0 || t0.elapsed() < Duration::from_secs(secs) {
        // Work: busy for a while, as a long rm or summary would be.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        std::thread::sleep(Duration::from_millis(20));
    }
    g.release().expect("the lock was still ours after the work");
    println!("\n@@done");
}

/// Kills the child if the test fails before it ends, so no holder outlives the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(
    test: &str,
    ws_dir: &std::path::Path,
    expire_ms: u64,
    secs: u64,
) -> (KillOnDrop, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("lock_liveness::{test}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}|{expire_ms}|{secs}", ws_dir.display()),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(c.stdout.take().unwrap());
    (KillOnDrop(c), out)
}

fn wait_line(out: &mut BufReader<std::process::ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended before {prefix:?}"
        );
        if let Some(rest) = line.trim().strip_prefix("@@") {
            if rest.starts_with(prefix) {
                return rest.to_string();
            }
        }
    }
}

fn maybe_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let v: Vec<&str> = spec.split('|').collect();
    child(v[0], v[1].parse().unwrap(), v[2].parse().unwrap());
    true
}

#[test]
fn killed_holder_frees_its_lock_at_once() {
    if maybe_child() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ws = Workspace::open(d.path(), "default", "default").unwrap();
    let (mut c, mut out) = spawn_child("killed_holder_frees_its_lock_at_once", d.path(), 30_000, 0);
    wait_line(&mut out, "locked");
    // lock_expire is 30 s: while the holder runs, we are refused.
    let m = manager(&ws, Duration::from_secs(30));
    let inner = ws.parse_uri("viking://resources/held/x.md").unwrap();
    assert!(matches!(m.exact(&inner), Err(LockError::Busy { .. })));
    c.0.kill().unwrap(); // SIGKILL
    c.0.wait().unwrap();
    let t0 = Instant::now();
    let g = m
        .exact(&inner)
        .expect("a dead owner's lock is free at once");
    assert!(t0.elapsed() < Duration::from_secs(30));
    drop(g);
    // Its stale TREE file was removed on the way.
    let l = m.list().unwrap();
    assert!(l.is_empty(), "{l:?}");
}

#[test]
fn live_holder_keeps_its_lock_through_long_work() {
    if maybe_child() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ws = Workspace::open(d.path(), "default", "default").unwrap();
    let (mut c, mut out) = spawn_child(
        "live_holder_keeps_its_lock_through_long_work",
        d.path(),
        2_000,
        10,
    );
    let line = wait_line(&mut out, "locked");
    let file = std::path::PathBuf::from(line.trim_start_matches("locked "));
    let m = manager(&ws, Duration::from_secs(2));
    let target = ws.parse_uri("viking://resources/held").unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = wait_line(&mut out, "done");
        let _ = done_tx.send(());
        // Keep draining: the child's harness still prints its summary.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    let mut tries = 0;
    let mut max_age = 0u64;
    while done_rx.try_recv().is_err() {
        match m.tree(&target) {
            Err(LockError::Busy { .. }) => tries += 1,
            // The child says "done" after releasing: a success can only follow that.
            Ok(g) => {
                drop(g);
                assert!(
                    done_rx.recv_timeout(Duration::from_secs(30)).is_ok(),
                    "took the lock of a live holder"
                );
                break;
            }
            Err(e) => panic!("{e}"),
        }
        // What an observer that can only judge by age (OpenViking) sees: never older than
        // lock_expire, because the holder refreshes every lock_expire / 3.
        if let Ok(tok) = std::fs::read_to_string(&file) {
            if let Some(codec::Content::Token(t)) = codec::parse(tok.as_bytes()) {
                let age = codec::now_ns().saturating_sub(t.time_ns);
                max_age = max_age.max(age);
                assert!(age < 2_000_000_000, "token {age} ns old, past lock_expire");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = c.0.wait().unwrap();
    assert!(st.success(), "holder lost its lock");
    assert!(tries > 20, "contender barely tried ({tries})");
    eprintln!(
        "contender refused {tries} times; oldest token seen {:.2}s",
        max_age as f64 / 1e9
    );
}
