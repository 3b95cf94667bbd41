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
    // A bad argument is a usage error: exit 2, as the exit-status table says.
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--watch"), "{err}");
}

/// Every bad argument exits 2 (usage), the ones clap judges and the ones a command judges
/// alike; before, `history --since yesterday` and `find --limit 0` exited 1 like an error of
/// the work itself.
#[test]
fn bad_arguments_exit_2_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    for args in [
        &["history", "--since", "yesterday"][..],
        &["undo", "viking://resources/x", "--at", "last week"],
        &["undo", "--since", "yesterday"],
        &["find", "--limit", "0", "q"],
        &["add-resource", "--timeout", "-1", "/etc/hostname"],
        &[
            "lock",
            "--timeout",
            "-1",
            "viking://resources/x",
            "--",
            "true",
        ],
    ] {
        let out = vikingfs(d.path()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?}");
    }
    // The time's own problem is named.
    let out = vikingfs(d.path())
        .args(["history", "--since", "yesterday"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("yesterday") && err.contains("RFC 3339"),
        "{err}"
    );
}

/// A read-only command never creates the workspace it is pointed at: one line naming it and
/// the remedy, exit 1, and nothing on disk.
#[test]
fn read_only_commands_on_a_missing_workspace_create_nothing() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path().join("missing/ws");
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["find", "anything"],
        &["locks"],
        &["wait"],
        &["wait", "--watch"],
        &["fsck"],
        &["session", "list"],
        &["session", "show", "s1"],
    ] {
        let out = vikingfs(&ws).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err.trim(),
            format!(
                "vikingfs: no workspace at {} (vikingfs mount {} MOUNTPOINT creates one)",
                ws.display(),
                ws.display()
            ),
            "{args:?}"
        );
        assert!(!d.path().join("missing").exists(), "{args:?} created it");
    }
    // A directory that holds no workspace is not made one either.
    let plain = d.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("notes.txt"), "mine\n").unwrap();
    let out = vikingfs(&plain).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no workspace at"));
    assert_eq!(
        std::fs::read_dir(&plain).unwrap().count(),
        1,
        "status wrote into {plain:?}"
    );
    // `config show` needs none: it says where the workspace would be.
    let out = vikingfs(&ws).args(["config", "show"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("(does not exist yet)"));
    // A command that changes the workspace still creates it with defaults.
    let out = vikingfs(&ws)
        .args(["write", "viking://resources/a.md", "--from", "/dev/null"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ws.join("viking/default/resources/a.md").is_file());
    let out = vikingfs(&ws).args(["status", "--json"]).output().unwrap();
    assert!(out.status.success());
}
