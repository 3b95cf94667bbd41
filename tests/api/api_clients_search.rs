//! Search and sessions through the real clients: OpenViking's Python SDK (`sdk_search.py`)
//! and OpenViking 0.5.2's `ov` command against `vikingfs serve`. Skipped, saying why, only
//! when `scripts/fetch-clients.sh` has not fetched them (CI fetches them).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::serve::{clients, python, Served};

fn corpus(s: &Served) {
    use crate::api_search::put;
    put(
        s,
        "resources/docs/alpha.md",
        "# Alpha guide\n\nThe alpha service handles authentication tokens and login flows.\n",
    );
    put(
        s,
        "resources/docs/sub/beta.md",
        "# Beta notes\n\nBeta covers vector embeddings and cosine similarity.\n",
    );
    put(
        s,
        "user/default/memories/preferences/editor.md",
        "The user rotates authentication tokens weekly and prefers dark mode.\n",
    );
}

fn explain(out: &Output) -> String {
    format!(
        "{:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn openvikings_sdk_finds_searches_and_runs_a_session() {
    let Some(clients) = clients() else { return };
    let s = Served::new();
    corpus(&s);
    let out = python(&clients, "sdk_search.py", &[&s.url()]);
    assert!(
        out.status.success(),
        "sdk_search.py: {}\n{}",
        explain(&out),
        s.log()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

/// `ov` set up as a new user would: a config naming the server, the language chosen.
struct Ov<'a> {
    bin: std::path::PathBuf,
    home: std::path::PathBuf,
    conf: std::path::PathBuf,
    s: &'a Served,
}

impl<'a> Ov<'a> {
    fn new(clients: &Path, s: &'a Served) -> Ov<'a> {
        let home = s.dir.path().join("ov-home");
        std::fs::create_dir_all(home.join(".openviking")).unwrap();
        std::fs::write(
            home.join(".openviking/ovcli.settings.conf"),
            r#"{"language": "en"}"#,
        )
        .unwrap();
        let conf = s.dir.path().join("ovcli.conf");
        std::fs::write(
            &conf,
            format!(r#"{{"url": "{}", "echo_command": false}}"#, s.url()),
        )
        .unwrap();
        Ov {
            bin: clients.join("bin/ov"),
            home,
            conf,
            s,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .env("HOME", &self.home)
            .env("OPENVIKING_CLI_CONFIG_FILE", &self.conf)
            .args(args)
            .output()
            .unwrap()
    }

    /// `ov -o json ARGS`: its `result`, checking it succeeded.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["-o", "json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(
            out.status.success(),
            "ov {args:?}: {}\n{}",
            explain(&out),
            self.s.log()
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("ov {args:?}: not JSON ({e}): {}", explain(&out)));
        assert_eq!(v["ok"], true, "ov {args:?}: {v}");
        v["result"].clone()
    }
}

#[test]
fn openvikings_ov_finds_and_runs_a_session() {
    let Some(clients) = clients() else { return };
    let s = Served::new();
    corpus(&s);
    crate::api_search::wait(&s, &[]);
    let ov = Ov::new(&clients, &s);

    let r = ov.json(&["find", "authentication tokens"]);
    let files: Vec<&str> = r["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["uri"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"viking://resources/docs/alpha.md"), "{r}");
    assert_eq!(
        r["memories"][0]["uri"], "viking://user/default/memories/preferences/editor.md",
        "{r}"
    );
    let plain = ov.run(&["find", "authentication tokens"]);
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(plain.status.success(), "{}", explain(&plain));
    assert!(text.contains("viking://resources/docs/alpha.md"), "{text}");
    let g = ov.json(&["grep", "alpha", "--uri", "viking://resources"]);
    assert_eq!(g["count"], 1, "{g}");

    let created = ov.json(&["session", "new"]);
    let sid = created["session_id"].as_str().unwrap().to_string();
    let m = ov.json(&[
        "session",
        "add-message",
        &sid,
        "--role",
        "user",
        "--content",
        "I like green tea",
    ]);
    assert_eq!(
        (m["message_count"].as_u64(), m["pending_tokens"].as_u64()),
        (Some(1), Some(4)),
        "{m}"
    );
    let batch = r#"[{"role":"assistant","content":"ok"},{"role":"user","content":"bye"}]"#;
    let b = ov.json(&["session", "add-messages", &sid, batch]);
    assert_eq!(b["message_count"], 3, "{b}");
    let info = ov.json(&["session", "get", &sid]);
    assert_eq!(info["pending_tokens"], 6, "{info}");
    let ctx = ov.json(&["session", "get-session-context", &sid]);
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 3, "{ctx}");
    let list = ov.json(&["session", "list"]);
    assert_eq!(list[0]["session_id"], sid.as_str(), "{list}");

    let c = ov.json(&["session", "commit", &sid]);
    assert_eq!(c["archived"], true, "{c}");
    let task = c["task_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = ov.json(&["task", "status", &task]);
        if t["status"] == "completed" {
            break;
        }
        assert_ne!(t["status"], "failed", "{t}");
        assert!(Instant::now() < deadline, "the commit never completed: {t}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let archive = ov.json(&["session", "get-session-archive", &sid, "archive_001"]);
    assert_eq!(
        archive["messages"].as_array().unwrap().len(),
        3,
        "{archive}"
    );
    let after = ov.json(&["session", "get", &sid]);
    assert_eq!(after["commit_count"], 1, "{after}");
    ov.json(&["session", "delete", &sid]);
    let gone = ov.run(&["-o", "json", "session", "get", &sid]);
    assert!(
        !gone.status.success(),
        "a deleted session: {}",
        explain(&gone)
    );
    assert!(explain(&gone).contains("NOT_FOUND"), "{}", explain(&gone));

    let q = ov.run(&["observer", "queue"]);
    assert!(q.status.success(), "{}", explain(&q));
    assert!(
        String::from_utf8_lossy(&q.stdout).contains("(healthy)"),
        "{}",
        explain(&q)
    );
}
