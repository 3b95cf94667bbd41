//! The session, task and observer routes over plain HTTP against a real `vikingfs serve`:
//! a session's life (create, messages, context, commit as a task that completes with phase
//! 2, its archive, delete), that a key only ever reaches its own user's sessions, the
//! errors, a held lock answering `409 path_busy`, and the observers' shapes.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api_search::{error, keyed, post, result, wait, ALICE, BOB};
use crate::support::serve::Served;

fn get(s: &Served, path: &str, headers: &[&str]) -> (u16, Value) {
    s.call("GET", path, headers, None)
}

/// Poll task `id` until it ends; its record.
pub fn task_end(s: &Served, headers: &[&str], id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = result(get(s, &format!("/api/v1/tasks/{id}"), headers));
        if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap()) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "task never ended: {t}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_session_lives_commits_through_a_task_and_goes() {
    let s = Served::new();
    let created = result(post(&s, "/api/v1/sessions", &[], json!({})));
    let auto = created["session_id"].as_str().unwrap().to_string();
    assert_eq!(
        auto.len(),
        "20261202-150035-f4f348e73dcf433e".len(),
        "{created}"
    );
    assert_eq!(
        created["uri"],
        format!("viking://user/default/sessions/{auto}")
    );
    let c = result(post(
        &s,
        "/api/v1/sessions",
        &[],
        json!({"session_id": "s1"}),
    ));
    assert_eq!(
        c,
        json!({"session_id": "s1", "uri": "viking://user/default/sessions/s1",
               "user": {"account_id": "default", "user_id": "default"},
               "auto_commit_policy": null,
               "memory_extraction_config": {"events": {"tags": []}}})
    );
    assert_eq!(
        error(
            post(&s, "/api/v1/sessions", &[], json!({"session_id": "s1"})),
            409
        ),
        "ALREADY_EXISTS"
    );
    // The figures OpenViking 0.5.2 answered for the same messages.
    let m = result(post(
        &s,
        "/api/v1/sessions/s1/messages",
        &[],
        json!({"role": "user", "content": "I prefer dark mode in editors"}),
    ));
    assert_eq!(
        m,
        json!({"session_id": "s1", "message_count": 1, "pending_tokens": 8})
    );
    let m = result(post(
        &s,
        "/api/v1/sessions/s1/messages",
        &[],
        json!({"role": "assistant", "parts": [{"type": "text", "text": "Noted."}]}),
    ));
    assert_eq!(m["pending_tokens"], 10, "{m}");
    let b = result(post(
        &s,
        "/api/v1/sessions/s1/messages/batch",
        &[],
        json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
    ));
    assert_eq!(
        b,
        json!({"session_id": "s1", "message_count": 4, "added": 2, "pending_tokens": 12})
    );
    let info = result(get(&s, "/api/v1/sessions/s1", &[]));
    assert_eq!(
        (
            info["message_count"].as_u64(),
            info["commit_count"].as_u64(),
            info["pending_tokens"].as_u64(),
            info["total_message_count"].as_u64()
        ),
        (Some(4), Some(0), Some(12), Some(4)),
        "{info}"
    );
    assert_eq!(info["created_by_user_id"], "default");
    assert!(info.get("pending_commit").is_none(), "{info}");
    let list = result(get(&s, "/api/v1/sessions", &[]));
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [auto.as_str(), "s1"], "{list}");
    assert_eq!(list[1]["is_dir"], true);

    let ctx = result(get(
        &s,
        "/api/v1/sessions/s1/context?token_budget=4000",
        &[],
    ));
    let msgs = ctx["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4, "{ctx}");
    assert_eq!(
        msgs[1]["parts"],
        json!([{"type": "text", "text": "Noted."}])
    );
    assert!(msgs[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(ctx["estimatedTokens"], 12);
    let small = result(get(&s, "/api/v1/sessions/s1/context?token_budget=2", &[]));
    assert_eq!(
        small["messages"].as_array().unwrap().len(),
        2,
        "the newest that fit: {small}"
    );
    assert_eq!(small["messages"][1]["parts"][0]["text"], "b");

    let commit = result(post(
        &s,
        "/api/v1/sessions/s1/commit",
        &[],
        json!({"keep_recent_count": 0}),
    ));
    assert_eq!(
        (commit["status"].as_str(), commit["archived"].as_bool()),
        (Some("accepted"), Some(true)),
        "{commit}"
    );
    assert_eq!(
        commit["archive_uri"],
        "viking://user/default/sessions/s1/history/archive_001"
    );
    let task_id = commit["task_id"].as_str().unwrap();
    let t = task_end(&s, &[], task_id);
    assert_eq!(
        (
            t["status"].as_str(),
            t["stage"].as_str(),
            t["task_type"].as_str(),
            t["resource_id"].as_str()
        ),
        (
            Some("completed"),
            Some("completed"),
            Some("session_commit"),
            Some("s1")
        ),
        "{t}"
    );
    assert!(t["processing_seconds"].as_f64().is_some(), "{t}");
    assert!(t["created_at_iso"].as_str().unwrap().ends_with("+00:00"));
    assert!(
        s.ws.join("viking/default/user/default/sessions/s1/history/archive_001/.done")
            .exists(),
        "the task ended with phase 2's .done"
    );
    let tasks = result(get(
        &s,
        "/api/v1/tasks?task_type=session_commit&limit=5",
        &[],
    ));
    assert_eq!(tasks[0]["task_id"], task_id, "{tasks}");

    let after = result(get(&s, "/api/v1/sessions/s1", &[]));
    assert_eq!(
        (
            after["message_count"].as_u64(),
            after["commit_count"].as_u64()
        ),
        (Some(0), Some(1)),
        "{after}"
    );
    assert!(!after["last_commit_at"].as_str().unwrap().is_empty());
    let ctx = result(get(&s, "/api/v1/sessions/s1/context", &[]));
    assert_eq!(ctx["messages"], json!([]), "{ctx}");
    assert!(
        ctx["latest_archive_overview"]
            .as_str()
            .unwrap()
            .contains("dark mode"),
        "{ctx}"
    );
    assert_eq!(ctx["stats"]["totalArchives"], 1);
    let arch = result(get(&s, "/api/v1/sessions/s1/archives/archive_001", &[]));
    assert_eq!(arch["archive_id"], "archive_001");
    assert_eq!(arch["messages"].as_array().unwrap().len(), 4, "{arch}");
    assert!(!arch["overview"].as_str().unwrap().is_empty());
    assert_eq!(
        error(
            get(&s, "/api/v1/sessions/s1/archives/archive_002", &[]),
            404
        ),
        "NOT_FOUND"
    );
    let nothing = result(post(&s, "/api/v1/sessions/s1/commit", &[], json!({})));
    assert_eq!(
        (
            nothing["status"].as_str(),
            nothing["archived"].as_bool(),
            nothing["task_id"].is_null()
        ),
        (Some("skipped"), Some(false), true),
        "{nothing}"
    );

    assert_eq!(
        result(s.call("DELETE", "/api/v1/sessions/s1", &[], None)),
        json!({"session_id": "s1"})
    );
    assert!(!s
        .ws
        .join("viking/default/user/default/sessions/s1")
        .exists());
    assert_eq!(error(get(&s, "/api/v1/sessions/s1", &[]), 404), "NOT_FOUND");
    assert_eq!(
        error(s.call("DELETE", "/api/v1/sessions/s1", &[], None), 404),
        "NOT_FOUND"
    );
    // A first message creates the session, as in OpenViking; so does auto_create.
    result(post(
        &s,
        "/api/v1/sessions/fresh/messages",
        &[],
        json!({"role": "user", "content": "hi"}),
    ));
    let auto_created = result(get(&s, "/api/v1/sessions/other?auto_create=true", &[]));
    assert_eq!(auto_created["message_count"], 0, "{auto_created}");
}

#[test]
fn a_key_only_reaches_its_own_users_sessions() {
    let s = keyed();
    result(post(
        &s,
        "/api/v1/sessions",
        &[ALICE],
        json!({"session_id": "s1"}),
    ));
    result(post(
        &s,
        "/api/v1/sessions/s1/messages",
        &[ALICE],
        json!({"role": "user", "content": "alice's secret plan"}),
    ));
    let commit = result(post(&s, "/api/v1/sessions/s1/commit", &[ALICE], json!({})));
    let alice_task = commit["task_id"].as_str().unwrap().to_string();
    // Bob's s1 is his own: alice's is neither visible nor touched.
    assert_eq!(
        error(get(&s, "/api/v1/sessions/s1", &[BOB]), 404),
        "NOT_FOUND"
    );
    assert_eq!(
        result(get(&s, "/api/v1/sessions", &[BOB])),
        json!([]),
        "bob has no sessions"
    );
    let mine = result(post(
        &s,
        "/api/v1/sessions",
        &[BOB],
        json!({"session_id": "s1"}),
    ));
    assert_eq!(mine["uri"], "viking://user/bob/sessions/s1");
    let ctx = result(get(&s, "/api/v1/sessions/s1/context", &[BOB]));
    assert_eq!(ctx["messages"], json!([]), "{ctx}");
    assert_eq!(ctx["stats"]["totalArchives"], 0);
    assert_eq!(
        error(get(&s, &format!("/api/v1/tasks/{alice_task}"), &[BOB]), 404),
        "NOT_FOUND"
    );
    let bob_tasks = result(get(&s, "/api/v1/tasks", &[BOB]));
    assert_eq!(bob_tasks, json!([]));
    // A user header naming alice is refused for bob's key; ids cannot climb out.
    assert_eq!(
        error(
            get(
                &s,
                "/api/v1/sessions/s1",
                &[BOB, "X-OpenViking-User: alice"]
            ),
            403
        ),
        "PERMISSION_DENIED"
    );
    for bad in ["..", "a%2Fb", "%2E%2E"] {
        let code = error(get(&s, &format!("/api/v1/sessions/{bad}"), &[BOB]), 400);
        assert_eq!(code, "INVALID_ARGUMENT", "{bad}");
    }
    let t = crate::api_sessions::task_end(&s, &[ALICE], &alice_task);
    assert_eq!(t["status"], "completed", "{t}");
    assert!(s
        .ws
        .join("viking/default/user/alice/sessions/s1/history/archive_001/.done")
        .exists());
    assert!(!s
        .ws
        .join("viking/default/user/bob/sessions/s1/history")
        .exists());
}

#[test]
fn bad_session_and_task_requests_are_refused() {
    let s = Served::new();
    result(post(
        &s,
        "/api/v1/sessions",
        &[],
        json!({"session_id": "s1"}),
    ));
    for body in [
        json!({"role": "user"}),
        json!({"content": "no role"}),
        json!({"role": "", "content": "x"}),
        json!({"role": "user", "parts": [{"type": "video", "url": "x"}]}),
        json!({"role": "user", "parts": [{"type": "text"}]}),
        json!({"role": "user", "parts": [{"type": "context", "uri": "viking://resources/../../etc"}]}),
        json!({"role": "user", "content": "x", "message_kind": "gossip"}),
    ] {
        let (code, v) = post(&s, "/api/v1/sessions/s1/messages", &[], body.clone());
        assert_eq!(code, 400, "{body}: {v}");
    }
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    assert_eq!(
        error(
            post(
                &s,
                "/api/v1/sessions/s1/messages/batch",
                &[],
                json!({"messages": many})
            ),
            400
        ),
        "INVALID_ARGUMENT"
    );
    // A bad message refuses the batch whole.
    error(
        post(
            &s,
            "/api/v1/sessions/s1/messages/batch",
            &[],
            json!({"messages": [{"role": "user", "content": "ok"}, {"role": "user"}]}),
        ),
        400,
    );
    assert_eq!(
        result(get(&s, "/api/v1/sessions/s1", &[]))["message_count"],
        0
    );
    for body in [
        json!({"keep_recent_count": -1}),
        json!({"reset_context": true, "keep_recent_count": 2}),
        json!({"keep_recent_turn_count": 2}),
        json!({"retention_mode": "forever"}),
        json!({"bogus": true}),
    ] {
        let (code, v) = post(&s, "/api/v1/sessions/s1/commit", &[], body.clone());
        assert_eq!(code, 400, "{body}: {v}");
    }
    assert_eq!(
        error(
            post(&s, "/api/v1/sessions/nope/commit", &[], json!({})),
            404
        ),
        "NOT_FOUND"
    );
    assert_eq!(
        error(
            get(&s, "/api/v1/sessions/s1/context?token_budget=-1", &[]),
            400
        ),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error(get(&s, "/api/v1/sessions/nope/context", &[]), 404),
        "NOT_FOUND"
    );
    assert_eq!(
        error(get(&s, "/api/v1/sessions/s1/archives/garbage", &[]), 404),
        "NOT_FOUND"
    );
    assert_eq!(
        error(get(&s, "/api/v1/tasks/no-such-task", &[]), 404),
        "NOT_FOUND"
    );
    assert_eq!(
        error(get(&s, "/api/v1/tasks?limit=0", &[]), 400),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error(get(&s, "/api/v1/tasks?limit=201", &[]), 400),
        "INVALID_ARGUMENT"
    );
    // Root may not cancel (OpenViking's rule); nothing else is found to cancel.
    assert_eq!(
        error(post(&s, "/api/v1/tasks/x/cancel", &[], json!({})), 403),
        "PERMISSION_DENIED"
    );
    let (code, v) = s.json(
        "PATCH",
        "/api/v1/sessions/s1/config",
        &[],
        &json!({"memory_extraction_config": {"events": {"tags": ["a=b"]}}}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (501, Some("UNIMPLEMENTED")),
        "{v}"
    );
    let page = result(get(&s, "/api/v1/tasks?pagination=cursor&limit=1", &[]));
    assert_eq!(
        page,
        json!({"items": [], "has_more": false, "next_cursor": null})
    );
}

/// `vikingfs lock --tree URI -- sleep N` in the background, once it holds the lock.
fn hold(s: &Served, uri: &str, secs: u32) -> Child {
    use std::os::unix::process::CommandExt;
    let marker = s.dir.path().join("held");
    let child = crate::support::vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args(["lock", "--tree", uri, "--", "sh", "-c"])
        .arg(format!("touch {}; sleep {secs}", marker.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so the sleep under it is ended with it.
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the lock was never taken");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn a_held_session_lock_answers_409_path_busy() {
    let s = Served::new();
    result(post(
        &s,
        "/api/v1/sessions",
        &[],
        json!({"session_id": "s1"}),
    ));
    result(post(
        &s,
        "/api/v1/sessions/s1/messages",
        &[],
        json!({"role": "user", "content": "hello"}),
    ));
    // Held past the session lock's 30 s wait.
    let mut held = hold(&s, "viking://user/default/sessions/s1", 45);
    let started = Instant::now();
    let (code, v) = post(&s, "/api/v1/sessions/s1/commit", &[], json!({}));
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (409, Some("CONFLICT")),
        "{v}"
    );
    let d = &v["error"]["details"];
    assert_eq!(
        (d["conflict_type"].as_str(), d["retryable"].as_bool()),
        (Some("path_busy"), Some(true)),
        "{v}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(25),
        "it waited for the lock first"
    );
    crate::support::signal(-(held.id() as i32), libc::SIGKILL);
    let _ = held.wait();
    // Once free, the same commit goes through.
    let ok = result(post(&s, "/api/v1/sessions/s1/commit", &[], json!({})));
    assert_eq!(ok["archived"], true, "{ok}");
}

#[test]
fn observers_show_the_queue_the_index_and_the_models() {
    let s = Served::new();
    crate::api_search::put(&s, "resources/a.md", "observed text\n");
    wait(&s, &[]);
    let q = result(get(&s, "/api/v1/observer/queue", &[]));
    assert_eq!(
        (
            q["name"].as_str(),
            q["is_healthy"].as_bool(),
            q["has_errors"].as_bool()
        ),
        (Some("queue"), Some(true), Some(false)),
        "{q}"
    );
    let table = q["status"].as_str().unwrap();
    assert!(
        table.contains("| Pending | In Progress | Processed |"),
        "{table}"
    );
    assert!(table.contains("TOTAL"), "{table}");
    let qj = result(get(&s, "/api/v1/observer/queue?format=json", &[]));
    let rows = qj["status"].as_array().unwrap();
    let embedding = rows.iter().find(|r| r["queue"] == "embedding").unwrap();
    assert!(embedding["processed"].as_u64().unwrap() >= 1, "{qj}");
    let v = result(get(&s, "/api/v1/observer/vikingdb", &[]));
    assert!(
        v["status"].as_str().unwrap().contains("Backend: local"),
        "{v}"
    );
    let vj = result(get(&s, "/api/v1/observer/vikingdb?format=json", &[]));
    assert!(vj["status"]["record_count"].as_u64().unwrap() >= 1, "{vj}");
    let m = result(get(&s, "/api/v1/observer/models", &[]));
    assert!(
        m["status"]
            .as_str()
            .unwrap()
            .contains("Embedding dimension: 0"),
        "{m}"
    );
    let sys = result(get(&s, "/api/v1/observer/system", &[]));
    assert_eq!(sys["is_healthy"], true, "{sys}");
    assert_eq!(sys["errors"], json!([]));
    for c in ["queue", "vikingdb", "models"] {
        assert_eq!(sys["components"][c]["name"], c, "{sys}");
    }
    assert_eq!(
        error(get(&s, "/api/v1/observer/queue?format=xml", &[]), 400),
        "INVALID_ARGUMENT"
    );
}

/// A session's archive files are read as every file for a remote caller: a symlink made in
/// one's own session (through a mount, by a local user) to the host's or another user's file
/// hands over nothing through the archive and context routes.
#[test]
fn links_in_a_sessions_archive_are_not_followed() {
    let s = Served::new();
    let add = |text: &str| {
        result(post(
            &s,
            "/api/v1/sessions/s1/messages",
            &[],
            json!({"role": "user", "content": text}),
        ))
    };
    add("I prefer dark mode");
    add("and green tea");
    let commit = result(post(
        &s,
        "/api/v1/sessions/s1/commit",
        &[],
        json!({"keep_recent_count": 0}),
    ));
    let t = task_end(&s, &[], commit["task_id"].as_str().unwrap());
    assert_eq!(t["status"], "completed", "{t}");
    let outside = s.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.md"), "host secret overview").unwrap();
    let line = json!({"role": "user", "content": "host secret message"}).to_string();
    std::fs::write(outside.join("secret.jsonl"), format!("{line}\n")).unwrap();
    let arch =
        s.ws.join("viking/default/user/default/sessions/s1/history/archive_001");
    for (name, to) in [
        (".overview.md", "secret.md"),
        (".abstract.md", "secret.md"),
        ("messages.jsonl", "secret.jsonl"),
    ] {
        std::fs::remove_file(arch.join(name)).unwrap();
        std::os::unix::fs::symlink(outside.join(to), arch.join(name)).unwrap();
    }
    for path in [
        "/api/v1/sessions/s1/archives/archive_001",
        "/api/v1/sessions/s1/context",
    ] {
        let (code, v) = get(&s, path, &[]);
        assert_eq!(code, 200, "{path}: {v}");
        assert!(!v.to_string().contains("host secret"), "{path}: {v}");
    }
}

/// Every file and link under `dir` with its content (a link: its target), sorted: what a
/// write through a followed link would change.
fn tree_of(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.strip_prefix(dir).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_symlink() {
                let to = std::fs::read_link(&p).unwrap().display().to_string();
                out.push((name, format!("-> {to}")));
            } else if m.is_dir() {
                out.push((name, "/".into()));
                todo.push(p);
            } else {
                out.push((name, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A link made through the mount where a session's directory or file should be (as it lies
/// on the backing directory: `history` to a directory outside the workspace standing in for
/// `/etc`, `messages.jsonl` to a file outside, `.meta.json` into bob's tree, the whole
/// `sessions/` outside) is never followed by alice's session routes or MCP `remember`: no
/// answer holds the bytes it points at, nothing is written outside or into bob's tree, and
/// the routes that need the file answer 400 naming the link.
#[test]
fn links_where_a_sessions_files_should_be_lead_nowhere() {
    let s = keyed();
    let add = |who: &str, sid: &str, text: &str| {
        post(
            &s,
            &format!("/api/v1/sessions/{sid}/messages"),
            &[who],
            json!({"role": "user", "content": text}),
        )
    };
    for sid in ["hist", "live", "meta"] {
        result(add(ALICE, sid, "alice's own line"));
    }
    result(add(BOB, "b1", "bob secret message"));
    let ns = s.ws.join("viking/default/user");
    let (alice, bob) = (ns.join("alice/sessions"), ns.join("bob/sessions"));
    // Bob's metadata, with a field OpenViking would hand back as it is.
    let bob_meta = bob.join("b1/.meta.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&bob_meta).unwrap()).unwrap();
    m["note"] = json!("bob secret meta");
    std::fs::write(&bob_meta, serde_json::to_vec(&m).unwrap()).unwrap();

    // "/etc": outside the workspace, with a finished archive and a conversation in it.
    let etc = s.dir.path().join("etc");
    let line = |t: &str| format!("{}\n", json!({"role": "user", "content": t}));
    std::fs::create_dir_all(etc.join("archive_001")).unwrap();
    std::fs::write(etc.join("archive_001/.done"), "{\"archive\":1}\n").unwrap();
    std::fs::write(etc.join("archive_001/.overview.md"), "host secret overview").unwrap();
    std::fs::write(etc.join("archive_001/.abstract.md"), "host secret abstract").unwrap();
    std::fs::write(
        etc.join("archive_001/messages.jsonl"),
        line("host secret archived"),
    )
    .unwrap();
    std::fs::write(etc.join("passwd.jsonl"), line("host secret live")).unwrap();
    std::os::unix::fs::symlink(&etc, alice.join("hist/history")).unwrap();
    std::fs::remove_file(alice.join("live/messages.jsonl")).unwrap();
    std::os::unix::fs::symlink(etc.join("passwd.jsonl"), alice.join("live/messages.jsonl"))
        .unwrap();
    std::fs::remove_file(alice.join("meta/.meta.json")).unwrap();
    std::os::unix::fs::symlink(&bob_meta, alice.join("meta/.meta.json")).unwrap();
    let (etc_before, bob_before) = (tree_of(&etc), std::fs::read(&bob_meta).unwrap());

    let leaks = |v: &Value| {
        let t = v.to_string();
        t.contains("host secret") || t.contains("bob secret")
    };
    let link_refused = |(code, v): (u16, Value), what: &str| {
        assert_eq!(code, 400, "{what}: {v}");
        assert_eq!(v["error"]["code"], "INVALID_ARGUMENT", "{what}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("symbolic link"), "{what}: {msg}");
        assert!(!leaks(&v), "{what}: {v}");
    };
    for sid in ["hist", "live", "meta"] {
        let base = format!("/api/v1/sessions/{sid}");
        // Reads: the linked bytes never come back (a read that needs the link fails).
        for path in [
            base.clone(),
            format!("{base}/context"),
            format!("{base}/archives/archive_001"),
        ] {
            let (code, v) = get(&s, &path, &[ALICE]);
            assert!([200, 400, 404].contains(&code), "{path}: {code} {v}");
            assert!(!leaks(&v), "{path}: {v}");
        }
        // A commit needs every file the link stands for: refused, nothing archived anywhere.
        link_refused(
            post(&s, &format!("{base}/commit"), &[ALICE], json!({})),
            &format!("{sid} commit"),
        );
    }
    link_refused(get(&s, "/api/v1/sessions/live", &[ALICE]), "live get");
    link_refused(get(&s, "/api/v1/sessions/meta", &[ALICE]), "meta get");
    link_refused(
        get(&s, "/api/v1/sessions/hist/context", &[ALICE]),
        "hist context",
    );
    link_refused(add(ALICE, "live", "into the host file"), "live add");
    link_refused(add(ALICE, "meta", "into bob's metadata"), "meta add");
    let (_, v) = get(&s, "/api/v1/sessions", &[ALICE]);
    assert!(!leaks(&v), "{v}");

    // MCP's remember makes a new session under alice's `sessions/`: a link there leads
    // nowhere either.
    std::fs::rename(&alice, ns.join("alice/sessions.aside")).unwrap();
    std::os::unix::fs::symlink(&etc, &alice).unwrap();
    let (is_error, text) = crate::api_fs::mcp_call(
        &s,
        &[ALICE],
        "remember",
        json!({"messages": [{"role": "user", "content": "remember me"}]}),
    );
    assert!(is_error, "{text}");
    assert!(text.contains("symbolic link"), "{text}");

    assert_eq!(
        tree_of(&etc),
        etc_before,
        "nothing written outside the workspace"
    );
    assert_eq!(
        std::fs::read(&bob_meta).unwrap(),
        bob_before,
        "nothing written into bob's tree"
    );
    // The links stay links: nothing of what they point at was copied into alice's tree.
    let aside = ns.join("alice/sessions.aside");
    for (link, to) in [
        ("hist/history", etc.clone()),
        ("live/messages.jsonl", etc.join("passwd.jsonl")),
        ("meta/.meta.json", bob_meta.clone()),
    ] {
        assert_eq!(std::fs::read_link(aside.join(link)).unwrap(), to, "{link}");
    }
}
