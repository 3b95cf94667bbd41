//! `vikingfs status` reports locks and the index beside the queues, as text and JSON.

use std::process::Command;

/// `vikingfs --workspace WS`, its HOME the workspace's directory.
fn vikingfs(ws: &std::path::Path) -> Command {
    let mut c = crate::support::vikingfs(ws);
    c.arg("--workspace").arg(ws);
    c
}

#[test]
fn status_shows_a_held_lock_and_the_index() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path().join("ws");
    // `status` runs while `vikingfs lock` holds a TREE lock, so it must list exactly that lock.
    let out = vikingfs(&ws)
        .args(["lock", "--tree", "viking://resources/docs", "--"])
        .arg(crate::support::BIN)
        .arg("--workspace")
        .arg(&ws)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["locks"]["held"], 1, "{v}");
    assert_eq!(v["locks"]["list"][0]["uri"], "viking://resources/docs");
    assert_eq!(v["locks"]["list"][0]["kind"], "tree");
    assert_eq!(v["index"]["records"], 0);
    assert!(v["queues"]["semantic"].is_object());
    assert!(v["daemons"].as_array().unwrap().is_empty());

    // After the holder exits the lock is gone, and the text form says so.
    let out = vikingfs(&ws).arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("locks: 0 held, 0 stale"), "{text}");
    assert!(text.contains("index: 0 records"), "{text}");
}

#[test]
fn bad_watch_interval_is_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = vikingfs(d.path())
        .args(["status", "--watch", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--watch"), "{err}");
}
