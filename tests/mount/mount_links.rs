//! Symbolic links made through the mount never lead a remote caller out of what it may read:
//! alice's grep and glob (over HTTP and through MCP) neither read nor list what a link in her
//! own tree points at, be it the host's `/etc` or bob's tree.

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::support::daemon::Mount;
use crate::support::serve::http;

/// `POST path` with a JSON body as the caller `key`: the status and the answer.
fn post(addr: SocketAddr, key: &str, path: &str, body: &Value) -> (u16, Value) {
    let auth = format!("X-API-Key: {key}");
    let b = serde_json::to_vec(body).unwrap();
    let (code, bytes) = http(
        addr,
        "POST",
        path,
        &[
            &auth,
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
        ],
        Some(&b),
    );
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// An MCP `tools/call` at `/mcp`: the tool's text.
fn mcp(addr: SocketAddr, key: &str, tool: &str, args: Value) -> String {
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": tool, "arguments": args}});
    let (code, v) = post(addr, key, "/mcp", &req);
    assert_eq!(code, 200, "{v}");
    v["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool result: {v}"))
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What no answer to alice may hold: the host's `/etc/passwd` (its first line starts
/// `root:x`) or bob's secret.
const CONTENT: [&str; 2] = ["root:x", "garage PIN 4711"];

/// Nor a name only `/etc` or bob's tree has.
const NAMES: [&str; 3] = ["passwd", "hostname", "bob-only.md"];

fn assert_clean(what: &str, text: &str) {
    for leak in CONTENT.iter().chain(&NAMES) {
        assert!(!text.contains(leak), "{what} leaks {leak:?}: {text}");
    }
}

#[test]
fn grep_and_glob_follow_no_link_out_of_the_callers_tree() {
    let (m, addr) = Mount::with_api(r#"{"server": {"root_api_key": "root-secret"}}"#, &[]);
    let key = |user: &str| {
        let out = m.cli(&["key", "add", "--user", user]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let alice = key("alice");
    key("bob");
    let (a, b) = (m.mp.join("user/alice"), m.mp.join("user/bob"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(b.join("bob-only.md"), "bob's garage PIN 4711\n").unwrap();
    std::fs::write(a.join("note.md"), "alice's own line\n").unwrap();
    // Made through the mount, as a local user would: out to the host, and into bob's tree
    // (relative, and by the backing path).
    let links: [(&str, String); 6] = [
        ("etc", "/etc".into()),
        ("pw.md", "/etc/passwd".into()),
        ("bobdir", "../bob".into()),
        ("bob.md", "../bob/bob-only.md".into()),
        (
            "bobabs",
            m.ws.join("viking/default/user/bob").display().to_string(),
        ),
        ("sub", ".".into()),
    ];
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, a.join(name)).unwrap();
    }
    // Followed, each of these hands over the host's or bob's bytes or names.
    assert!(std::fs::read_to_string(a.join("bob.md"))
        .unwrap()
        .contains("4711"));

    let grep = |uri: &str, pattern: &str| {
        post(
            addr,
            &alice,
            "/api/v1/search/grep",
            &json!({"uri": uri, "pattern": pattern}),
        )
    };
    let glob = |uri: &str| {
        post(
            addr,
            &alice,
            "/api/v1/search/glob",
            &json!({"uri": uri, "pattern": "**"}),
        )
    };
    // Her own file is found, so the walks below do reach the links.
    let (code, v) = grep("viking://user/alice", "own line");
    assert_eq!((code, &v["result"]["count"]), (200, &json!(1)), "{v}");
    for uri in [
        "viking://user/alice",
        "viking://user/alice/etc",
        "viking://user/alice/pw.md",
        "viking://user/alice/bobdir",
        "viking://user/alice/bob.md",
        "viking://user/alice/bobabs",
        "viking://user/alice/sub",
    ] {
        let (code, v) = grep(uri, "x:0:0|PIN");
        assert!(code == 200 || code == 404, "grep {uri}: {code} {v}");
        assert_clean(&format!("grep {uri}"), &v.to_string());
        if code == 200 {
            assert_eq!(v["result"]["count"], 0, "grep {uri}: {v}");
        }
        let (code, v) = glob(uri);
        assert!(code == 200 || code == 404, "glob {uri}: {code} {v}");
        assert_clean(&format!("glob {uri}"), &v.to_string());
    }
    // Below a link on the way: nothing there for her.
    for uri in [
        "viking://user/alice/etc/passwd",
        "viking://user/alice/bobdir/bob-only.md",
        "viking://user/alice/sub/bob.md",
    ] {
        let (code, v) = grep(uri, "x:0:0|PIN");
        assert_eq!(code, 404, "grep {uri}: {v}");
        for leak in CONTENT {
            assert!(
                !v.to_string().contains(leak),
                "grep {uri} leaks {leak:?}: {v}"
            );
        }
    }
    // glob lists a link as the name it is, never what it points at.
    let (_, v) = glob("viking://user/alice");
    let names: Vec<&str> = v["result"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"viking://user/alice/etc"), "{v}");
    assert!(names.len() <= links.len() + 1, "{v}");

    // MCP's grep and glob are the same routes, for the same caller.
    for uri in [
        "viking://user/alice",
        "viking://user/alice/etc",
        "viking://user/alice/bobdir",
    ] {
        let t = mcp(
            addr,
            &alice,
            "grep",
            json!({"uri": uri, "pattern": ["x:0:0", "PIN"]}),
        );
        assert_clean(&format!("MCP grep {uri}"), &t);
        let t = mcp(addr, &alice, "glob", json!({"uri": uri, "pattern": "**"}));
        assert_clean(&format!("MCP glob {uri}"), &t);
    }
    let t = mcp(
        addr,
        &alice,
        "grep",
        json!({"uri": "viking://user/alice", "pattern": "own line"}),
    );
    assert!(t.contains("alice's own line"), "{t}");
}

/// `GET path` as the caller `key`: the status and the answer.
fn get(addr: SocketAddr, key: &str, path: &str) -> (u16, Value) {
    let auth = format!("X-API-Key: {key}");
    let (code, bytes) = http(addr, "GET", path, &[&auth], None);
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A link made through the mount where one of alice's session files should be (`history` to a
/// directory outside the workspace standing in for `/etc`, `messages.jsonl` to a file there)
/// is never followed by the session routes nor the CLI's session commands: the commit and
/// the append that would write through it are refused naming the link, no answer holds what
/// it points at, and nothing is written outside.
#[test]
fn a_sessions_files_follow_no_link_out_of_the_workspace() {
    let (m, addr) = Mount::with_api(r#"{"server": {"root_api_key": "root-secret"}}"#, &[]);
    let out = m.cli(&["key", "add", "--user", "alice"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let alice = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let add = |sid: &str, text: &str| {
        post(
            addr,
            &alice,
            &format!("/api/v1/sessions/{sid}/messages"),
            &json!({"role": "user", "content": text}),
        )
    };
    for sid in ["s1", "s2"] {
        let (code, v) = add(sid, "alice's own line");
        assert_eq!(code, 200, "{v}");
    }
    let etc = m.dir.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let secret = format!(
        "{}\n",
        json!({"role": "user", "content": "root:x:0:0 host"})
    );
    std::fs::write(etc.join("passwd"), &secret).unwrap();
    let sessions = m.mp.join("user/alice/sessions");
    std::os::unix::fs::symlink(&etc, sessions.join("s1/history")).unwrap();
    std::fs::remove_file(sessions.join("s2/messages.jsonl")).unwrap();
    std::os::unix::fs::symlink(etc.join("passwd"), sessions.join("s2/messages.jsonl")).unwrap();
    // Followed, the link hands over the host's file.
    assert!(std::fs::read_to_string(sessions.join("s2/messages.jsonl"))
        .unwrap()
        .contains("root:x"));

    let refused = |(code, v): (u16, Value), what: &str| {
        assert_eq!(code, 400, "{what}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("symbolic link")),
            "{what}: {v}"
        );
        assert_clean(what, &v.to_string());
    };
    refused(
        post(addr, &alice, "/api/v1/sessions/s1/commit", &json!({})),
        "commit s1",
    );
    refused(
        post(addr, &alice, "/api/v1/sessions/s2/commit", &json!({})),
        "commit s2",
    );
    refused(add("s2", "into the host file"), "add s2");
    refused(get(addr, &alice, "/api/v1/sessions/s2"), "get s2");
    refused(
        get(addr, &alice, "/api/v1/sessions/s1/context"),
        "context s1",
    );
    for path in ["/api/v1/sessions/s2/context", "/api/v1/sessions/s1"] {
        let (code, v) = get(addr, &alice, path);
        assert!([200, 400].contains(&code), "{path}: {code} {v}");
        assert_clean(path, &v.to_string());
    }
    // The CLI's session commands (through the daemon, as root) refuse it in one line too.
    for args in [
        ["session", "commit", "viking://user/alice/sessions/s1"],
        ["session", "show", "viking://user/alice/sessions/s2"],
    ] {
        let out = m.cli(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert_clean(&format!("{args:?}"), &String::from_utf8_lossy(&out.stdout));
    }
    let names: Vec<_> = std::fs::read_dir(&etc)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["passwd"], "nothing written outside the workspace");
    assert_eq!(std::fs::read_to_string(etc.join("passwd")).unwrap(), secret);
}

/// Tags set over the API (`fs/attrs/set_tags`) are the extended attribute
/// `user.openviking.tags` of the file, which the mount shows (getxattr through the mount);
/// one set through the mount (setxattr) is what the API's `fs/attrs` answers.
#[test]
fn tags_are_extended_attributes_seen_through_the_mount() {
    let (m, addr) = Mount::with_api(r#"{"server": {"root_api_key": "root-secret"}}"#, &[]);
    let f = m.mp.join("resources/tagged.md");
    std::fs::write(&f, "tagged text\n").unwrap();
    let (code, v) = post(
        addr,
        "root-secret",
        "/api/v1/fs/attrs/set_tags",
        &json!({"uri": "viking://resources/tagged.md", "tags": ["Team=Search", "env=prod"]}),
    );
    assert_eq!(code, 200, "{v}");
    let through_mount = |name: &str| {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import os,sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], sys.argv[2]))",
            ])
            .arg(&f)
            .arg(name)
            .output()
            .unwrap();
        assert!(out.status.success(), "getxattr: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        through_mount("user.openviking.tags"),
        "team=search\nenv=prod"
    );
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], 'user.openviking.tags', b'owner=alice')",
        ])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "setxattr: {out:?}");
    let (code, bytes) = http(
        addr,
        "GET",
        "/api/v1/fs/attrs?uri=viking://resources/tagged.md",
        &["X-API-Key: root-secret"],
        None,
    );
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["result"]["attrs"]["tags"], json!(["owner=alice"]), "{v}");
    assert_eq!(v["result"]["context_type"], "resource", "{v}");
}
