//! Extraction end to end through the binary: a conversation becomes memory files laid out as
//! OpenViking lays them out, recorded in `memory_diff.json`, and findable with `vikingfs find`;
//! committing the same facts again writes nothing twice. With `vlm` configured, the chat
//! extractor (against a stub on 127.0.0.1) decides the memories instead.

use crate::support::session;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use session::Ws;

fn diff_of(ws: &Ws, sid: &str, n: u32) -> Value {
    let p = ws
        .session_dir(sid)
        .join(format!("history/archive_{n:03}/memory_diff.json"));
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn find(ws: &Ws, query: &str, under: &str) -> Vec<String> {
    let out = ws.found(&["find", query, "--json", "-n", "5", "--under", under]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| h["uri"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn local_extractor_writes_findable_memories_once() {
    let ws = Ws::new();
    for (role, text) in [
        ("user", "Hi! My name is Ana Souza."),
        ("assistant", "Nice to meet you, Ana. How can I help?"),
        ("user", "I prefer dark mode in every editor."),
        ("user", "On 2026-12-03 I have a dentist appointment."),
        (
            "assistant",
            "Noted: dark mode, and the appointment on December 3.",
        ),
    ] {
        ws.ok(&["session", "add", "chat", role, text]);
    }
    let out = ws.ok(&["session", "commit", "chat", "--wait"]);
    assert!(
        out.contains("archived 5 message(s) and 0 invalid line(s)"),
        "{out}"
    );

    let mems = ws.memories();
    let pref = mems
        .get("preferences/default/dark_mode.md")
        .unwrap_or_else(|| panic!("no preference memory in {:?}", mems.keys()));
    assert!(pref.contains("dark mode"), "{pref}");
    assert!(
        mems.get("profile.md").is_some_and(|p| p.contains("Ana")),
        "{mems:?}"
    );
    assert!(
        mems.keys().any(|k| k.starts_with("events/2026/12/03/")),
        "dated event under events/YYYY/MM/DD: {:?}",
        mems.keys()
    );

    // memory_diff.json records every file written, and the archive is done.
    let diff = diff_of(&ws, "chat", 1);
    let added: Vec<&str> = diff["adds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["rel_path"].as_str().unwrap())
        .collect();
    for k in mems.keys() {
        assert!(added.contains(&k.as_str()), "{k} missing from {diff}");
    }
    assert!(ws
        .session_dir("chat")
        .join("history/archive_001/.done")
        .is_file());
    let meta: Value =
        serde_json::from_slice(&std::fs::read(ws.session_dir("chat").join(".meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["memories_extracted"]["total"], mems.len(), "{meta}");
    assert_eq!(meta["memories_extracted"]["preferences"], 1, "{meta}");

    // Findable: the preference memory is the best hit for what it says.
    let hits = find(&ws, "dark mode", "viking://user/default");
    assert_eq!(
        hits.first().map(String::as_str),
        Some("viking://user/default/memories/preferences/default/dark_mode.md"),
        "{hits:?}"
    );
    // The archive itself is indexed too.
    let hits = find(&ws, "dentist appointment", "viking://session/chat");
    assert!(
        hits.iter()
            .any(|h| h.contains("/sessions/chat/history/archive_001")),
        "{hits:?}"
    );

    // Saying it again changes nothing: no duplicate fact, the diff says unchanged.
    ws.ok(&[
        "session",
        "add",
        "chat",
        "user",
        "I prefer dark mode in every editor.",
    ]);
    ws.ok(&["session", "commit", "chat", "--wait"]);
    let again = ws.memories();
    assert_eq!(again["preferences/default/dark_mode.md"], *pref);
    let diff = diff_of(&ws, "chat", 2);
    assert_eq!(diff["summary"]["total_adds"], 0, "{diff}");
    assert_eq!(diff["summary"]["total_updates"], 0, "{diff}");
    assert!(
        diff["summary"]["unchanged"].as_u64().unwrap() >= 1,
        "{diff}"
    );
}

#[test]
fn invalid_lines_are_archived_verbatim_and_counted() {
    let ws = Ws::new();
    ws.ok(&["session", "add", "s", "user", "first"]);
    let live = ws.session_dir("s").join("messages.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap();
    writeln!(f, "{{\"role\": \"user\"}}").unwrap(); // no content
    writeln!(f, "half a line {{").unwrap();
    drop(f);
    ws.ok(&["session", "add", "s", "user", "last"]);
    let out = ws.ok(&["session", "commit", "s", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["messages"], 2, "{v}");
    assert_eq!(v["invalid_lines"], 2, "{v}");
    let archived = ws.archives("s")[&1].clone();
    assert_eq!(archived[1], "{\"role\": \"user\"}");
    assert_eq!(archived[2], "half a line {");
    assert!(ws.live("s").is_empty());
}

/// An OpenAI-compatible stub: memory prompts get `memory_answer` (the i-th one with status
/// `statuses[i]` instead when given), summary prompts a fixed summary. Counts the memory
/// requests.
fn start_stub(memory_answer: Value, statuses: Vec<u16>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let memory_calls = Arc::new(AtomicUsize::new(0));
    let calls = memory_calls.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let calls = calls.clone();
            let answer = memory_answer.clone();
            let statuses = statuses.clone();
            std::thread::spawn(move || serve(stream, &answer, &statuses, &calls));
        }
    });
    (format!("http://{addr}/v1"), memory_calls)
}

fn serve(stream: TcpStream, memory_answer: &Value, statuses: &[u16], calls: &AtomicUsize) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut len = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    let req: Value = serde_json::from_slice(&body).unwrap();
    let system = req["messages"][0]["content"].as_str().unwrap_or_default();
    let mut status = 200;
    let content = if system.contains("memories") {
        let i = calls.fetch_add(1, Ordering::SeqCst);
        status = statuses.get(i).copied().unwrap_or(200);
        memory_answer.to_string()
    } else {
        json!({"abstract": "A directory.", "overview": "# Directory\n\nSomething."}).to_string()
    };
    let reply =
        json!({"choices": [{"message": {"role": "assistant", "content": content}}]}).to_string();
    let mut s = stream;
    let _ = write!(
        s,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

#[test]
fn chat_extractor_is_used_when_vlm_is_configured() {
    let (base, calls) = start_stub(
        json!({"memories": [
            {"category": "preferences", "topic": "editor", "fact": "Uses Helix as the main editor"},
            {"category": "entities", "entity_type": "people", "name": "Rui", "fact": "Rui is the user's manager"}
        ]}),
        vec![],
    );
    let ws = Ws::with_config(
        &json!({"vlm": {"provider": "openai", "api_base": base, "model": "stub", "api_key": "k"}})
            .to_string(),
    );
    ws.ok(&[
        "session",
        "add",
        "c",
        "user",
        "My manager Rui wants me on Helix.",
    ]);
    ws.ok(&["session", "commit", "c", "--wait"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one extraction request");
    let mems = ws.memories();
    assert!(
        mems.get("preferences/default/editor.md")
            .is_some_and(|m| m.contains("Uses Helix as the main editor")),
        "{mems:?}"
    );
    assert!(mems.contains_key("entities/people/rui.md"), "{mems:?}");
    // Not the local rules: they would not have named a preference from this sentence.
    assert_eq!(mems.len(), 2, "{mems:?}");
    let archive = ws.session_dir("c").join("history/archive_001");
    assert_eq!(
        std::fs::read_to_string(archive.join(".abstract.md")).unwrap(),
        "A directory."
    );
}

fn vlm_ws(base: &str) -> Ws {
    Ws::with_config(
        &json!({"vlm": {"provider": "openai", "api_base": base, "model": "stub", "api_key": "k"}})
            .to_string(),
    )
}

#[test]
fn a_transient_model_failure_is_retried_and_memories_are_written_once() {
    let answer = json!({"memories": [
        {"category": "preferences", "topic": "theme", "fact": "Prefers dark mode"}
    ]});
    let (base, calls) = start_stub(answer, vec![503]);
    let ws = vlm_ws(&base);
    ws.ok(&["session", "add", "t", "user", "Dark mode, always."]);
    ws.ok(&["session", "commit", "t", "--wait"]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one failed request, one retry"
    );
    let mems = ws.memories();
    assert_eq!(
        mems["preferences/default/theme.md"]
            .matches("- Prefers dark mode")
            .count(),
        1,
        "{mems:?}"
    );
    let archive = ws.session_dir("t").join("history/archive_001");
    assert!(archive.join(".done").is_file());
    assert!(!archive.join(".failed.json").exists());
}

#[test]
fn a_permanent_model_failure_is_recorded_and_nothing_is_lost() {
    let (base, calls) = start_stub(json!({"memories": []}), vec![401; 10]);
    let ws = vlm_ws(&base);
    ws.ok(&["session", "add", "p", "user", "Remember this."]);
    let out = ws
        .cmd()
        .args(["session", "commit", "p", "--wait"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("phase 2 of archive_001 failed"), "{err}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a permanent error is not retried"
    );
    let archive = ws.session_dir("p").join("history/archive_001");
    let failed: Value =
        serde_json::from_slice(&std::fs::read(archive.join(".failed.json")).unwrap()).unwrap();
    assert_eq!(failed["stage"], "memory_extraction", "{failed}");
    assert!(!archive.join(".done").exists());
    // The conversation is safe in the archive, the job is dead (not retried forever).
    assert_eq!(
        session::content_of(&ws.archives("p")[&1][0]),
        "Remember this."
    );
    let status: Value = serde_json::from_str(&ws.ok(&["status", "--json"])).unwrap();
    let text = status.to_string();
    assert!(text.contains("session_commit"), "{text}");
    let q = vikingfs::queue::Queue::open(&ws.root().join(".vikingfs/queue.db")).unwrap();
    let st = q
        .stats()
        .unwrap()
        .into_iter()
        .find(|s| s.queue == "session_commit")
        .unwrap();
    assert_eq!((st.dead, st.outstanding()), (1, 0), "{st:?}");

    // Once the model works again, a requeue finishes the archive and clears the failure.
    let (good, _) = start_stub(
        json!({"memories": [{"category": "profile", "fact": "Asked to remember something"}]}),
        vec![],
    );
    std::fs::write(
        &ws.config,
        json!({"vlm": {"provider": "openai", "api_base": good, "model": "stub", "api_key": "k"}})
            .to_string(),
    )
    .unwrap();
    let out = ws.ok(&["session", "recover", "p", "--requeue", "--wait"]);
    assert!(
        out.contains("queued phase 2 of viking://user/default/sessions/p/history/archive_001"),
        "{out}"
    );
    assert!(archive.join(".done").is_file());
    assert!(!archive.join(".failed.json").exists());
    assert!(ws.memories()["profile.md"].contains("Asked to remember something"));
    let left = q
        .stats()
        .unwrap()
        .into_iter()
        .find(|s| s.queue == "session_commit")
        .map_or((0, 0), |s| (s.dead, s.outstanding()));
    assert_eq!(
        left,
        (0, 0),
        "no dead or pending session_commit job is left"
    );
}

#[test]
fn a_commit_never_leaves_search_naming_the_live_file_for_archived_text() {
    let ws = Ws::new();
    ws.ok(&[
        "session",
        "add",
        "r",
        "user",
        "The quarterly budget review is on Friday.",
    ]);
    ws.ok(&["wait"]);
    let live = "viking://user/default/sessions/r/messages.jsonl";
    assert!(
        find(&ws, "quarterly budget review", "viking://session/r").contains(&live.to_string()),
        "the live file is indexed before the commit"
    );
    // Phase 1 only: nothing re-indexes the live file yet, and it no longer holds the text.
    ws.ok(&["session", "commit", "r"]);
    assert!(ws.live("r").is_empty());
    let hits = find(&ws, "quarterly budget review", "viking://session/r");
    assert!(!hits.contains(&live.to_string()), "{hits:?}");
}

/// A chat API that takes connections and never answers: phase 2 cannot finish.
fn start_silent() -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().take(16) {
            held.push(s);
        }
    });
    (base, h)
}

#[test]
fn commit_wait_times_out_like_wait() {
    // `session commit --wait --timeout` that runs out exits 124 as `vikingfs wait` does (it
    // was 75, the busy code), naming what is left, and the commit itself is kept.
    let (base, _h) = start_silent();
    let ws = Ws::with_config(
        &json!({"vlm": {"provider": "openai", "api_base": base, "model": "stub", "api_key": "k"}})
            .to_string(),
    );
    ws.ok(&["session", "add", "s", "user", "I prefer tabs."]);
    let t = std::time::Instant::now();
    let out = ws
        .cmd()
        .args(["session", "commit", "s", "--wait", "--timeout", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(err.contains("not finished after 2s"), "{err}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(ws.archives("s").len(), 1, "the commit is kept");
}

/// Two committed sessions of one user: `a` says her name and a preference (its own file),
/// `b` another preference (a file of its own) and where she lives (into `a`'s profile).
fn two_sessions() -> Ws {
    let ws = Ws::new();
    for (sid, text) in [
        ("a", "Hi! My name is Ana Souza."),
        ("a", "I prefer dark mode in every editor."),
        ("b", "I prefer tabs over spaces."),
        ("b", "My name is Ana Souza and I live in Lisbon."),
    ] {
        ws.ok(&["session", "add", sid, "user", text]);
    }
    for sid in ["a", "b"] {
        ws.ok(&["session", "commit", sid, "--wait"]);
    }
    ws
}

/// Every memory file names the commits its facts came from (OpenViking's MEMORY_FIELDS
/// block), and `session rollback` takes out exactly one session's facts: a file it made is
/// removed, a file it added to loses only its lines, both versions stay in the history, and
/// `find` no longer names what was taken out. A second rollback does nothing.
#[test]
fn rollback_takes_out_exactly_one_sessions_memories() {
    let ws = two_sessions();
    let before = ws.memories();
    let profile = &before["profile.md"];
    assert!(
        profile.contains("Lisbon") && profile.contains("Name: Ana"),
        "{profile}"
    );
    assert!(profile.contains("<!-- MEMORY_FIELDS"), "{profile}");
    assert!(
        profile.contains("\"session\": \"a\"") && profile.contains("\"session\": \"b\""),
        "provenance of both commits: {profile}"
    );
    // The fields block is bookkeeping: not searched.
    assert!(
        find(&ws, "sources", "viking://user/default/memories").is_empty(),
        "the MEMORY_FIELDS block is not indexed"
    );
    let tabs = before
        .keys()
        .find(|k| k.contains("tabs"))
        .cloned()
        .unwrap_or_else(|| panic!("no memory of tabs in {:?}", before.keys()));
    assert!(!find(&ws, "tabs over spaces", "viking://user/default/memories").is_empty());

    let out = ws.ok(&["session", "rollback", "b"]);
    assert!(out.contains("rolled back 1 commit(s)"), "{out}");
    let after = ws.memories();
    assert!(
        !after.contains_key(&tabs),
        "{tabs} made by b is gone: {after:?}"
    );
    let profile = &after["profile.md"];
    assert!(!profile.contains("Lisbon"), "b's line is out: {profile}");
    assert!(profile.contains("Name: Ana"), "a's line stays: {profile}");
    assert!(!profile.contains("\"session\": \"b\""), "{profile}");
    assert_eq!(
        after.get("preferences/default/dark_mode.md"),
        before.get("preferences/default/dark_mode.md"),
        "a's own file is untouched"
    );
    assert!(
        find(&ws, "tabs over spaces", "viking://user/default/memories").is_empty(),
        "search no longer names what was taken out"
    );
    // Both replaced versions are in the history, each naming who replaced it.
    let h = ws.ok(&["history", "--json", "viking://user/default/memories"]);
    let h: Value = serde_json::from_str(&h).unwrap();
    let ops: Vec<(String, String)> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap_or_default().to_string(),
                e["path"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        ops.contains(&("rm".into(), format!("user/default/memories/{tabs}"))),
        "{ops:?}"
    );
    assert!(
        ops.iter()
            .any(|(op, p)| op == "rewrite" && p.ends_with("profile.md")),
        "{ops:?}"
    );
    // Undone: the rollback's own change comes back.
    ws.ok(&["undo", &format!("viking://user/default/memories/{tabs}")]);
    assert_eq!(ws.memories().get(&tabs), before.get(&tabs));
    // Again: nothing to do.
    let again = ws.ok(&["session", "rollback", "b"]);
    assert!(again.contains("rolled back before"), "{again}");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(ws.session_dir("b").join(".meta.json")).unwrap())
            .unwrap();
    assert_eq!(
        meta["memories_extracted"]["total"], 0,
        "b's one commit rolled back: {meta}"
    );
    // A session that does not exist, an archive it does not have: one line, exit 1.
    let bad = ws
        .cmd()
        .args(["session", "rollback", "nope"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim().lines().count(),
        1
    );
    let bad = ws
        .cmd()
        .args(["session", "rollback", "a", "--archive", "9"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("has no archive 9"));
}

/// A rollback a crash cut short (`rollback.rewritten`: a file's lines out, the archive not
/// marked) is finished by running it again: each line out once, the archive marked.
#[cfg(feature = "failpoints")]
#[test]
fn a_rollback_cut_short_is_finished_by_running_it_again() {
    let ws = two_sessions();
    let out = ws
        .cmd()
        .env("VIKINGFS_CRASH_AT", "rollback.rewritten")
        .args(["session", "rollback", "b"])
        .output()
        .unwrap();
    crate::support::assert_crashed_at(&out, "rollback.rewritten", &["session", "rollback", "b"]);
    let marker = ws.session_dir("b").join("history/archive_001/.rolled_back");
    assert!(!marker.exists(), "not marked before the crash");
    let out = ws.ok(&["session", "rollback", "b"]);
    assert!(out.contains("rolled back 1 commit(s)"), "{out}");
    assert!(marker.is_file());
    let mems = ws.memories();
    let profile = &mems["profile.md"];
    assert!(
        !profile.contains("Lisbon") && profile.contains("Name: Ana"),
        "{profile}"
    );
    assert!(!mems.keys().any(|k| k.contains("tabs")), "{mems:?}");
    assert_eq!(profile.matches("Name: Ana").count(), 1, "{profile}");
}
