//! `vikingfs status` and `vikingfs wait` against a real workspace, run as the real binary.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use vikingfs::queue::{JobError, Queue};
use vikingfs::workspace::Workspace;

fn vikingfs(home: &std::path::Path, ws: &std::path::Path, args: &[&str]) -> Command {
    let mut c = crate::support::vikingfs(home);
    c.arg("--workspace").arg(ws).args(args).stdin(Stdio::null());
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("running vikingfs")
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, Queue) {
    let dir = tempfile::tempdir().unwrap();
    let ws_path = dir.path().join("ws");
    let ws = Workspace::open(&ws_path, "default", "default").unwrap();
    let q = Queue::open(&ws.queue_db()).unwrap();
    (dir, ws_path, q)
}

#[test]
fn status_json_shows_counts_and_dead_errors() {
    let (dir, ws, q) = setup();
    q.enqueue("embedding", Some("viking://resources/a.md"), &json!({}))
        .unwrap();
    q.enqueue("embedding", None, &json!({})).unwrap();
    q.enqueue("semantic", None, &json!({})).unwrap();
    let job = q
        .claim("semantic", "t", Duration::from_secs(600))
        .unwrap()
        .unwrap();
    q.fail(&job, &JobError::Permanent("no such directory".into()))
        .unwrap();
    q.enqueue("semantic", None, &json!({})).unwrap();
    q.claim("semantic", "t", Duration::from_secs(600))
        .unwrap()
        .unwrap();

    let out = run(vikingfs(dir.path(), &ws, &["status", "--json"]).stderr(Stdio::inherit()));
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let qs = &v["queues"];
    assert_eq!(qs["embedding"]["pending"], 2);
    assert_eq!(qs["embedding"]["running"], 0);
    assert!(qs["embedding"]["oldest_age_secs"].as_f64().unwrap() >= 0.0);
    assert_eq!(qs["semantic"]["running"], 1);
    assert_eq!(qs["semantic"]["dead"], 1);
    assert_eq!(qs["semantic"]["last_dead"][0]["error"], "no such directory");
    assert_eq!(
        qs["session_commit"]["pending"], 0,
        "known queues listed even when empty"
    );
    assert_eq!(qs["session_commit"]["oldest_age_secs"], Value::Null);

    let text = run(&mut vikingfs(dir.path(), &ws, &["status"]));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("no such directory"), "{text}");
}

#[test]
fn wait_times_out_with_one_line_and_succeeds_once_drained() {
    let (dir, ws, q) = setup();
    q.enqueue("semantic", None, &json!({})).unwrap();

    let out = run(&mut vikingfs(
        dir.path(),
        &ws,
        &["wait", "--watch", "--timeout", "0.3"],
    ));
    assert_eq!(out.status.code(), Some(vikingfs::cli::wait::EXIT_TIMEOUT));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("timed out") && err.contains("1 job"), "{err}");

    // A waiter started before the work is done returns once another process finishes it.
    let waiter = vikingfs(dir.path(), &ws, &["wait", "--watch", "--timeout", "120"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let job = q
        .claim("semantic", "t", Duration::from_secs(600))
        .unwrap()
        .unwrap();
    q.complete(&job).unwrap();
    let out = waiter.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn wait_rejects_a_bad_timeout() {
    let (dir, ws, _q) = setup();
    let out = run(&mut vikingfs(
        dir.path(),
        &ws,
        &["wait", "--timeout", "soon"],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("\"soon\" is not a number of seconds"), "{err}");
}

/// The text of a log line without its colours.
fn plain(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            it.by_ref().take_while(|&c| c != 'm').for_each(drop);
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn a_failed_job_logs_in_its_span_at_its_errors_level() {
    let (dir, ws, q) = setup();
    // A payload that never parses: permanent, and a warning (not a user's doing).
    q.enqueue("embedding", Some("k1"), &json!({"uri": "http://nope"}))
        .unwrap();
    let out = run(vikingfs(dir.path(), &ws, &["wait", "--timeout", "60"]).env_remove("RUST_LOG"));
    assert!(out.status.success());
    let err = plain(&String::from_utf8(out.stderr).unwrap());
    let line = err
        .lines()
        .find(|l| l.contains("job failed"))
        .unwrap_or_else(|| panic!("no failure logged: {err}"));
    assert!(line.contains(" WARN "), "{line}");
    assert!(
        line.contains("job{queue=embedding id=1 key=\"k1\" attempt=1}"),
        "{line}"
    );
    assert!(
        line.contains("job failed: permanent: not a viking:// URI: \"http://nope\""),
        "{line}"
    );
}
