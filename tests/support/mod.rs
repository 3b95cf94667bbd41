//! The one support tree of the integration tests, included once by each test binary
//! (`#[path = "../support/mod.rs"] mod support;`).
//!
//! This file owns what every area needs: the `vikingfs` binary run with an isolated HOME,
//! the checks of its output (success, a crash point reached, `find --json`, `fsck --json`),
//! processes (alive, gone, killed), unique search tokens, the model directory and a walk of
//! a tree's files. Each submodule owns one kind of fixture:
//! - [`backend`]: the backend a store's rules run on, as a value, and `backends!` making one
//!   test per backend of them;
//! - [`daemon`]: a real mount ([`daemon::Mount`]) and the shell and tree helpers used on it;
//! - [`ops`]: a workspace driven through the CLI ([`ops::Env`]) and its consistency checks;
//! - [`pg`]: a real PostgreSQL server per test ([`pg::PgServer`]);
//! - [`queue`]: the test binary re-run as child processes with a role, and their logs;
//! - [`serve`]: a real `vikingfs serve` daemon ([`serve::Served`]), HTTP calls to it, and the
//!   real clients (OpenViking's SDK, `ov`, MCP) the API is tested with;
//! - [`session`]: a workspace for sessions ([`session::Ws`]) and readers of its files.

// Each binary uses a part of the tree; what one leaves unused another uses.
#![allow(dead_code)]

pub mod backend;
pub mod daemon;
pub mod gluster;
pub mod netns;
pub mod ops;
pub mod pg;
pub mod queue;
pub mod serve;
pub mod session;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_vikingfs");

/// The variable `.ci/run` sets: every prerequisite is installed there, so a test that would
/// skip fails instead (`CI=true` or `1`, as CI services set it, counts too).
pub const NO_SKIP: &str = "VIKINGFS_NO_SKIP";

/// Whether a skip must fail: under CI ([`NO_SKIP`]).
pub fn skips_fail() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| matches!(v.as_str(), "1" | "true"));
    set(NO_SKIP) || set("CI")
}

/// A test that cannot run here for want of `why` (a tool, the fetched clients, root): the
/// caller returns after this. It says `SKIP:` on stderr (nextest shows it with the test's
/// output), and under CI it panics instead, so that a missing prerequisite is a red test
/// there, never one passing green untested.
pub fn skip(why: &str) {
    if skips_fail() {
        panic!(
            "SKIP refused ({NO_SKIP} or CI is set: every prerequisite must be installed): {why}"
        );
    }
    eprintln!("SKIP: {why}");
}

/// `vikingfs` with HOME at `home` and none of the caller's vikingfs variables (config,
/// workspace, an armed crash point), so no user setting leaks into a test.
pub fn vikingfs(home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("HOME", home)
        .env_remove("VIKINGFS_CONFIG")
        .env_remove("VIKINGFS_WORKSPACE")
        .env_remove("VIKINGFS_CRASH_AT");
    c
}

/// `out` succeeded; otherwise panic with `what` (the arguments), its status and both streams.
pub fn assert_ok(out: &Output, what: &[&str]) {
    assert!(
        out.status.success(),
        "vikingfs {what:?} failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `out` is of a process that aborted at crash point `point` (SIGABRT, and it said so).
pub fn assert_crashed_at(out: &Output, point: &str, what: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{what:?} with {point} armed did not abort ({:?}): {stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!("crash point {point} reached")),
        "{stderr}"
    );
}

/// The stdout of `find --json`, checking its exit status: 0 with results, 1 (like grep) with
/// none (`[]`).
pub fn found_json(out: &Output) -> String {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let empty = stdout.trim() == "[]";
    assert_eq!(
        out.status.code(),
        Some(if empty { 1 } else { 0 }),
        "find: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The results of `find --json` (its output, status checked by [`found_json`]) as (uri,
/// level, score), best first.
pub fn hits(out: &Output) -> Vec<(String, u64, f64)> {
    let v: serde_json::Value = serde_json::from_str(&found_json(out)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["uri"].as_str().unwrap().to_string(),
                h["level"].as_u64().unwrap(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// `dir` holds a damaged database moved aside (`index.db.damaged-…`).
pub fn has_damaged_aside(dir: &Path) -> bool {
    damaged_aside(dir, "index.db") > 0
}

/// How many damaged copies of `store` (`index.db`, `queue.db`) were set aside in `dir`.
pub fn damaged_aside(dir: &Path, store: &str) -> usize {
    let prefix = format!("{store}.damaged-");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            // The main file, not its -wal and -shm.
            name.starts_with(&prefix) && !name.ends_with("-wal") && !name.ends_with("-shm")
        })
        .count()
}

/// The output of `fsck --json` names no problem but those a repair is for (the scratch of a
/// killed process and stale locks).
pub fn assert_fsck_clean(out: &Output) {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fsck output: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    for p in v["problems"].as_array().unwrap() {
        let kind = p["kind"].as_str().unwrap();
        assert!(
            matches!(kind, "leftover" | "stale_lock"),
            "index and files disagree: {p}"
        );
    }
}

/// A word no other file shares, so `find` must name exactly its file: 12 letters from a hash
/// of `tag`, so that two tokens share no more character n-grams than chance gives.
pub fn token(tag: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..12)
        .map(|_| {
            h = h
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(b'a' + ((h >> 33) % 26) as u8)
        })
        .collect()
}

/// Where the model's tests find all-MiniLM-L6-v2: `VIKINGFS_TEST_MODEL`, else
/// `target/models/all-MiniLM-L6-v2` (`scripts/fetch-model.sh` puts it there; CI runs it).
pub fn model_path() -> PathBuf {
    std::env::var_os("VIKINGFS_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        })
}

/// This machine's Python standard library (real code nobody here wrote, for search and
/// history tests).
pub fn python_stdlib() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .expect("python3");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// [`model_path`], insisting the model is there (with the remedy when it is not).
pub fn model_dir() -> PathBuf {
    let dir = model_path();
    assert!(
        dir.join("model.safetensors").is_file(),
        "no model at {} (set VIKINGFS_TEST_MODEL or run scripts/fetch-model.sh)",
        dir.display()
    );
    dir
}

/// Every regular file below `root` (relative path -> content), skipping names that start
/// with `.` (summaries, lock files, vikingfs's own), files and directories alike.
pub fn files_under(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// Running (a zombie waiting for its reaper counts as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Wait (generously) until process `pid` has exited.
pub fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send `signal` to process `pid` (not a child of this one: a daemon that detached).
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill takes no pointer and writes no memory; the callers name a process they
    // started, never this one.
    unsafe { libc::kill(pid, signal) };
}
