//! Undo after an agent's changes through the API and MCP (issue 43, finding 8): every request
//! and every tool call is a command of its own, named by its caller, so `vikingfs undo` of a
//! directory an agent wrote twice and then removed gives back what it removed — the second
//! version — not the first (all requests once shared the daemon's pid, one "command").

use serde_json::{json, Value};

use crate::support::serve::{clients, python, Served};

/// A daemon with a root key and a user key for bob; bob's key header.
fn served_with_bob() -> (Served, String) {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let bob = s.user_key("bob", vikingfs::server::auth::Role::User);
    (s, format!("X-API-Key: {bob}"))
}

/// `vikingfs undo URI` (through the daemon's socket) succeeds; then what `file` holds.
fn undo_then_read(s: &Served, uri: &str, file: &str) -> String {
    let out = s.cli(&["undo", uri]);
    assert!(
        out.status.success(),
        "undo {uri}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(s.ws.join("viking/default").join(file))
        .unwrap_or_else(|e| panic!("{file} after undo: {e}"))
}

/// The history entries under `uri`, newest first.
fn history(s: &Served, uri: &str) -> Vec<Value> {
    let out = s.cli(&["history", uri, "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn undo_after_http_writes_and_a_delete_gives_back_the_newest_version() {
    let (s, bob) = served_with_bob();
    let bob = [bob.as_str()];
    let note = "viking://user/bob/notes/note.md";
    for content in ["one", "two"] {
        let b = json!({ "uri": note, "content": content, "mode": "replace" });
        let (code, v) = s.json("POST", "/api/v1/content/write", &bob, &b);
        assert_eq!(code, 200, "write {content}: {v}");
    }
    let (code, v) = s.call(
        "DELETE",
        "/api/v1/fs?uri=viking%3A%2F%2Fuser%2Fbob%2Fnotes&recursive=true",
        &bob,
        None,
    );
    assert_eq!(code, 200, "rm: {v}");
    assert!(!s.ws.join("viking/default/user/bob/notes").exists());
    let h = history(&s, "viking://user/bob/notes");
    let shown = String::from_utf8_lossy(&s.cli(&["history", "viking://user/bob/notes"]).stdout)
        .into_owned();
    assert_eq!(
        undo_then_read(&s, "viking://user/bob/notes", "user/bob/notes/note.md"),
        "two"
    );
    // Each request is named by its caller, with its key, not the daemon's pid.
    assert!(h.len() >= 2, "{h:?}");
    for e in &h {
        let cmd = e["cmd"].as_str().unwrap_or_default();
        assert!(
            e["pid"].is_null() && cmd.starts_with("api: user bob (user), key "),
            "{e}"
        );
    }
    let cmds: std::collections::HashSet<_> = h.iter().map(|e| e["cmd"].to_string()).collect();
    assert_eq!(cmds.len(), h.len(), "one name per request: {h:?}");
    assert!(shown.contains("(api: user bob (user), key "), "{shown}");
}

#[test]
fn undo_after_mcp_tool_calls_and_a_forget_gives_back_the_newest_version() {
    let Some(clients) = clients() else { return };
    let (s, bob) = served_with_bob();
    let note = "viking://user/bob/agent/note.md";
    let url = format!("{}/mcp", s.url());
    let out = python(
        &clients,
        "mcp_undo.py",
        &["--http", &url, "--header", &bob, "--note", note],
    );
    assert!(
        out.status.success(),
        "mcp_undo.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!s.ws.join("viking/default/user/bob/agent").exists());
    // Streamable HTTP is stateless here: the client is named by its User-Agent.
    let h = history(&s, "viking://user/bob/agent");
    assert_eq!(
        undo_then_read(&s, "viking://user/bob/agent", "user/bob/agent/note.md"),
        "two"
    );
    assert!(h.len() >= 2, "{h:?}");
    for e in &h {
        let cmd = e["cmd"].as_str().unwrap_or_default();
        assert!(
            e["pid"].is_null()
                && cmd.starts_with("mcp: user-agent python-httpx/")
                && cmd.contains("; user bob (user), key "),
            "{e}"
        );
    }

    // `vikingfs mcp` on stdio, through the daemon's socket: the session knows the client's
    // name from its initialize call.
    let note = "viking://resources/agent/note.md";
    let ws = s.ws.to_str().unwrap();
    let home = s.home.to_str().unwrap();
    let out = python(
        &clients,
        "mcp_undo.py",
        &["--stdio", crate::support::BIN, ws, home, "--note", note],
    );
    assert!(
        out.status.success(),
        "mcp_undo.py --stdio: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let h = history(&s, "viking://resources/agent");
    assert_eq!(
        undo_then_read(&s, "viking://resources/agent", "resources/agent/note.md"),
        "two"
    );
    assert!(h.len() >= 2, "{h:?}");
    for e in &h {
        let cmd = e["cmd"].as_str().unwrap_or_default();
        assert!(
            e["pid"].is_null() && cmd.starts_with("mcp: client undo-test-agent, tool "),
            "{e}"
        );
    }
}
