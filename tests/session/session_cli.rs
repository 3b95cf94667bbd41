//! The session commands' faces: listing and showing, bad input answered with one line, and a
//! pending commit whose record no longer matches the files refused without touching a byte.

use crate::support::session;

use serde_json::Value;
use session::Ws;

#[test]
fn bad_input_is_one_line_and_changes_nothing() {
    let ws = Ws::new();
    for (args, want) in [
        // A path (it has a `/`, or is `.` or `..`) names a session's directory under a
        // mount: none here.
        (
            vec!["session", "add", "../x", "user", "hi"],
            "neither a viking:// URI nor a path under a mount",
        ),
        (
            vec!["session", "add", "..", "user", "hi"],
            "neither a viking:// URI nor a path under a mount",
        ),
        (
            vec!["session", "add", "viking://session/..", "user", "hi"],
            "'..'",
        ),
        (vec!["session", "add", "s", "", "hi"], "empty role"),
        (vec!["session", "commit", "nope"], "does not exist"),
        (
            vec!["session", "show", "viking://resources/a"],
            "names no session",
        ),
    ] {
        let out = ws.cmd().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(!ws
        .root()
        .join("viking/default/user/default/sessions")
        .exists());
}

#[test]
fn list_and_show_report_live_messages_and_archives() {
    let ws = Ws::new();
    ws.ok(&["session", "add", "a", "user", "one"]);
    ws.ok(&["session", "add", "a", "assistant", "two"]);
    ws.ok(&["session", "commit", "a", "--wait"]);
    ws.ok(&["session", "add", "a", "user", "three"]);
    ws.ok(&[
        "session",
        "add",
        "viking://user/default/sessions/b",
        "user",
        "x",
    ]);

    let list: Value = serde_json::from_str(&ws.ok(&["session", "list", "--json"])).unwrap();
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(rows[0]["session"], "a");
    assert_eq!(rows[0]["live_messages"], 1);
    assert_eq!(rows[0]["archives"], 1);
    assert_eq!(rows[1]["session"], "b");
    assert_eq!(rows[1]["archives"], 0);

    let show: Value =
        serde_json::from_str(&ws.ok(&["session", "show", "viking://session/a", "--json"])).unwrap();
    assert_eq!(show["messages"][0]["content"], "three");
    assert_eq!(show["messages"][0]["role"], "user");
    assert!(show["messages"][0]["id"]
        .as_str()
        .unwrap()
        .starts_with("msg_"));
    assert_eq!(show["archives"][0]["archive"], "archive_001");
    assert_eq!(show["archives"][0]["done"], true);

    // OpenViking's metadata and `.done`: counts, and the first and last message archived.
    let sdir = ws.session_dir("a");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(sdir.join(".meta.json")).unwrap()).unwrap();
    assert_eq!(meta["session_id"], "a", "{meta}");
    assert_eq!(meta["created_by_user_id"], "default", "{meta}");
    assert_eq!(meta["message_count"], 1, "{meta}");
    assert_eq!(meta["total_message_count"], 3, "{meta}");
    assert_eq!(meta["commit_count"], 1, "{meta}");
    assert!(meta["last_commit_at"].as_str().is_some(), "{meta}");
    let archived = ws.archives("a")[&1].clone();
    let id = |l: &str| serde_json::from_str::<Value>(l).unwrap()["id"].clone();
    let done: Value =
        serde_json::from_slice(&std::fs::read(sdir.join("history/archive_001/.done")).unwrap())
            .unwrap();
    assert_eq!(done["starting_message_id"], id(&archived[0]), "{done}");
    assert_eq!(done["ending_message_id"], id(&archived[1]), "{done}");

    let text = ws.ok(&["session", "show", "a"]);
    assert!(text.contains("user: three"), "{text}");
    assert!(text.contains("archive_001 done"), "{text}");
}

#[test]
fn a_pending_commit_that_no_longer_matches_is_refused_and_nothing_moves() {
    let ws = Ws::new();
    ws.ok(&["session", "add", "s", "user", "kept"]);
    let dir = ws.session_dir("s");
    // A pending commit claiming bytes the live file does not start with (someone rewrote the
    // file by hand after a crash).
    let mut meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".meta.json")).unwrap()).unwrap();
    meta["pending_commit"] = serde_json::json!({
        "archive": 1, "state": "preparing", "prefix_len": 5,
        "prefix_sha256": "00", "started_at": "2026-11-29T00:00:00.000Z"
    });
    std::fs::write(dir.join(".meta.json"), meta.to_string()).unwrap();
    let before = std::fs::read(dir.join("messages.jsonl")).unwrap();

    for args in [
        vec!["session", "commit", "s"],
        vec!["session", "add", "s", "user", "more"],
        vec!["session", "recover"],
    ] {
        let out = ws.cmd().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("left untouched"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(dir.join("messages.jsonl")).unwrap(), before);
    assert!(!dir.join("history").exists());
}

#[test]
fn commit_keep_leaves_the_most_recent_messages_live() {
    let ws = Ws::new();
    for t in ["one", "two", "three"] {
        ws.ok(&["session", "add", "k", "user", t]);
    }
    let out = ws.ok(&["session", "commit", "k", "--keep", "2", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["messages"], 1, "{v}");
    let archived: Vec<String> = ws.archives("k")[&1]
        .iter()
        .map(|l| session::content_of(l))
        .collect();
    assert_eq!(archived, ["one"]);
    let live: Vec<String> = ws
        .live("k")
        .iter()
        .map(|l| session::content_of(l))
        .collect();
    assert_eq!(live, ["two", "three"]);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(ws.session_dir("k").join(".meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["keep_recent_count"], 2, "{meta}");
    assert_eq!(meta["message_count"], 2, "{meta}");
    // Everything already within the window: nothing to archive.
    let out = ws.ok(&["session", "commit", "k", "--keep", "5"]);
    assert!(out.contains("nothing to commit"), "{out}");
    assert_eq!(ws.archives("k").len(), 1);
}
