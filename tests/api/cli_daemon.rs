//! The `vikingfs` command through a live daemon (`vikingfs serve`'s Unix socket in the
//! workspace): the same output and exit statuses as without one, the daemon's configuration in
//! force (its model searches; the command's own never touches the vectors), a busy lock 75,
//! the command's routes absent from TCP, and a dead daemon's socket taken for no daemon.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Output;

use serde_json::{json, Value};

use crate::support::serve::Served;
use crate::support::{model_dir, token};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a run printed and how it ended.
fn seen(o: &Output) -> (Option<i32>, String, String) {
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

fn socket(s: &Served) -> PathBuf {
    s.ws.join(".vikingfs/daemon.sock")
}

/// `args` run with the daemon's socket out of the way: the command finds no daemon and works
/// on its own, on the same files and stores at the same moment.
fn without_daemon(s: &Served, args: &[&str]) -> Output {
    let hidden = s.ws.join(".vikingfs/daemon.sock.hidden");
    std::fs::rename(socket(s), &hidden).unwrap();
    let out = s.cli(args);
    std::fs::rename(&hidden, socket(s)).unwrap();
    out
}

/// Write the command's own configuration file (the daemon's is another file).
fn cli_config(s: &Served, config: Value) {
    let dir = s.home.join(".vikingfs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

fn ok(s: &Served, args: &[&str]) -> String {
    let out = s.cli(args);
    assert!(
        out.status.success(),
        "vikingfs {args:?}: {:?}\n{}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A directory of three notes added through the daemon and derived by its pool.
fn add_notes(s: &Served) {
    let src = s.dir.path().join("notes");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for (rel, tag) in [
        ("a.md", "alpha"),
        ("b.md", "bravo"),
        ("sub/c.md", "charlie"),
    ] {
        std::fs::write(
            src.join(rel),
            format!(
                "# {tag}\n\nNotes about {tag}: {} and penguins on the ice.\n",
                token(tag)
            ),
        )
        .unwrap();
    }
    let out = ok(
        s,
        &[
            "add-resource",
            src.to_str().unwrap(),
            "--to",
            "viking://resources/notes",
            "--wait",
            "--timeout",
            "120",
        ],
    );
    assert_eq!(out.trim(), "viking://resources/notes");
}

#[test]
fn a_command_through_the_daemon_prints_what_it_prints_without_one() {
    let s = Served::new();
    add_notes(&s);
    ok(&s, &["session", "add", "chat-1", "user", "hello penguins"]);
    ok(&s, &["session", "add", "chat-1", "assistant", "hello"]);
    // The live messages are indexed too: let the daemon's pool settle before comparing.
    ok(&s, &["wait", "--timeout", "60"]);
    let queries = s.dir.path().join("queries.txt");
    std::fs::write(
        &queries,
        format!("penguins\n{}\nnothing-like-it\n", token("bravo")),
    )
    .unwrap();
    let q = queries.to_str().unwrap();
    let alpha = token("alpha");
    let cases: Vec<Vec<&str>> = vec![
        vec!["find", "penguins"],
        vec!["find", "penguins", "--json", "--limit", "3"],
        vec!["find", &alpha, "--under", "viking://resources/notes/sub"],
        vec!["find", "--queries", q, "--json"],
        vec!["find", "--queries", q],
        vec!["find", "zzzzqqqq"],
        vec!["find", "x", "--under", "viking://nowhere"],
        vec!["find", "penguins", "--mode", "semantic"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["fsck"],
        vec!["fsck", "--json"],
        vec!["session", "list"],
        vec!["session", "list", "--json"],
        vec!["session", "show", "chat-1"],
        vec!["session", "show", "chat-1", "--json"],
        vec!["session", "show", "no-such"],
        vec!["rm", "viking://resources/notes"],
        vec!["rm", "viking://nowhere/x"],
        vec![
            "mv",
            "viking://resources/notes/none.md",
            "viking://resources/x.md",
        ],
        vec!["wait", "--timeout", "30"],
    ];
    for args in &cases {
        let through = s.cli(args);
        let alone = without_daemon(&s, args);
        let (c1, o1, e1) = seen(&through);
        let (c2, o2, e2) = seen(&alone);
        assert_eq!((c1, &o1), (c2, &o2), "{args:?}: stdout differs");
        // The semantic refusal names whose configuration to change; every other error is
        // the same line.
        if args.last() != Some(&"semantic") {
            assert_eq!(e1, e2, "{args:?}: stderr differs");
        }
    }
    // A second add of a name that is taken says so through the daemon as without it.
    let src = s.dir.path().join("notes");
    let out = s.cli(&["add-resource", src.to_str().unwrap()]);
    let (code, target, err) = seen(&out);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(target.trim(), "viking://resources/notes_1");
    assert!(
        err.contains(
            "'viking://resources/notes' already exists. Creating 'viking://resources/notes_1'. \
             Tip: Use --to <path> to specify exact target."
        ),
        "{err}"
    );
    // The daemon answered: its pid is in the report it read, and the command's said so too.
    let v: Value = serde_json::from_str(&ok(&s, &["status", "--json"])).unwrap();
    assert_eq!(v["daemons"][0]["pid"], s.child.id());
    // Its hits are the ones the files hold, whoever searched.
    let found = ok(&s, &["find", &alpha, "--json"]);
    let hits: Value = serde_json::from_str(&found).unwrap();
    assert_eq!(hits[0]["uri"], "viking://resources/notes/a.md", "{hits}");
}

#[test]
fn mutations_through_the_daemon_are_its_locked_operations() {
    let s = Served::new();
    add_notes(&s);
    let data = s.ws.join("viking/default/resources/notes");
    ok(
        &s,
        &[
            "mv",
            "viking://resources/notes/a.md",
            "viking://resources/notes/sub",
        ],
    );
    assert!(data.join("sub/a.md").is_file() && !data.join("a.md").exists());
    let mut c = crate::support::vikingfs(&s.home);
    c.args(["--workspace", s.ws.to_str().unwrap(), "write"])
        .arg("viking://resources/notes/new file.md")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("fresh {}\n", token("fresh")).as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(data.join("new file.md")).unwrap(),
        format!("fresh {}\n", token("fresh"))
    );
    ok(&s, &["rm", "viking://resources/notes/b.md"]);
    assert!(!data.join("b.md").exists());
    ok(&s, &["wait", "--timeout", "60"]);
    let found = ok(&s, &["find", &token("fresh"), "--json"]);
    assert!(found.contains("new file.md"), "{found}");
    let out = s.cli(&["find", &token("bravo")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let rep = ok(&s, &["reindex", "--json"]);
    let rep: Value = serde_json::from_str(&rep).unwrap();
    assert_eq!(rep["files"], 3, "{rep}");
    let out = ok(
        &s,
        &["session", "add", "s", "user", "remember the penguins"],
    );
    assert_eq!(out, "");
    let out = ok(&s, &["session", "commit", "s", "--wait", "--timeout", "60"]);
    assert!(out.contains("archived 1 message(s)"), "{out}");
    assert!(out.contains("memories:"), "{out}");
    // --wait was for the commit's own work; the summaries it queued come with the rest.
    ok(&s, &["wait", "--timeout", "60"]);
    let fsck = s.cli(&["fsck", "--json"]);
    crate::support::assert_fsck_clean(&fsck);
}

/// The daemon's configuration is in force: `rm` from a shell whose configuration names no
/// model keeps every vector the daemon's model made (it used to re-derive them all), and
/// says whose model is used.
#[test]
fn rm_through_the_daemon_keeps_the_vectors_whatever_the_command_configures() {
    let s = Served::with_config(
        json!({"embedding": {"dense": {"provider": "local", "model": model_dir()}}}),
    );
    add_notes(&s);
    let index = || vikingfs::index::Index::open_lexical(&s.ws.join(".vikingfs/index.db")).unwrap();
    let model = index().stored_model().unwrap();
    assert!(model.starts_with("bert:"), "{model}");
    assert!(index().missing_vectors().unwrap().is_empty());

    cli_config(
        &s,
        json!({"embedding": {"dense": {"provider": "local", "model": ""}}}),
    );
    let out = s.cli(&["rm", "viking://resources/notes/a.md"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("note:")
            && err.contains("all-MiniLM-L6-v2")
            && err.contains("none (lexical only)"),
        "{err}"
    );
    assert!(!s.ws.join("viking/default/resources/notes/a.md").exists());
    assert_eq!(index().stored_model().unwrap(), model);
    let missing = index().missing_vectors().unwrap();
    assert!(missing.is_empty(), "vectors dropped: {missing:?}");
    ok(&s, &["wait", "--timeout", "60"]);
    assert!(index().missing_vectors().unwrap().is_empty());
    assert_eq!(index().stored_model().unwrap(), model);
}

/// `find` through the daemon searches with the daemon's model, though the command's own
/// configuration names none: semantic and hybrid answers, with cosine evidence.
#[test]
fn find_through_the_daemon_uses_its_model() {
    let s = Served::with_config(
        json!({"embedding": {"dense": {"provider": "local", "model": model_dir()}}}),
    );
    add_notes(&s);
    // Words none of the notes has: only the vectors can answer.
    let out = s.cli(&[
        "find",
        "flightless birds in antarctica",
        "--mode",
        "semantic",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!hits.as_array().unwrap().is_empty(), "{hits}");
    assert!(hits[0]["evidence"]["cosine"].is_number(), "{hits}");
    let out = s.cli(&["find", "penguins", "--json"]);
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["evidence"]["semantic_rank"].is_number()
                && h["evidence"]["lexical_rank"].is_number()),
        "hybrid without the model's half: {hits}"
    );
    // On its own, the command has no model to search with.
    let alone = without_daemon(&s, &["find", "flightless birds", "--mode", "semantic"]);
    assert_eq!(alone.status.code(), Some(1));
    assert!(
        text(&alone.stderr).contains("needs a model"),
        "{}",
        text(&alone.stderr)
    );
    // status says how the daemon's model computes (int8 where the CPU has AVX-512 VNNI,
    // `vikingfs.index.model_precision`'s "auto"); a command alone cannot know.
    let v: Value = serde_json::from_str(&ok(&s, &["status", "--json"])).unwrap();
    let want = if std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        "int8"
    } else {
        "f32"
    };
    assert_eq!(v["index"]["model_precision"], want, "{v}");
    assert!(
        ok(&s, &["status"]).contains(&format!("(run in {want})")),
        "the text names it too"
    );
    let alone = without_daemon(&s, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&alone.stdout).unwrap();
    assert!(v["index"]["model_precision"].is_null(), "{v}");
}

/// A lock held elsewhere: the daemon's rm is busy, the command exits 75 as it would alone.
#[test]
fn a_busy_lock_through_the_daemon_exits_75() {
    let s = Served::new();
    add_notes(&s);
    let uri = "viking://resources/notes/a.md";
    let holder = Holder(
        crate::support::vikingfs(&s.home)
            .args([
                "--workspace",
                s.ws.to_str().unwrap(),
                "lock",
                uri,
                "--",
                "sleep",
                "30",
            ])
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ok(&s, &["locks"]).contains("notes/a.md") {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock was not taken"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for args in [
        vec!["rm", uri],
        vec!["mv", uri, "viking://resources/moved.md"],
    ] {
        let out = s.cli(&args);
        assert_eq!(
            out.status.code(),
            Some(75),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!("vikingfs: {}: ", args.join(" "))),
            "{err}"
        );
        assert!(err.contains("busy"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert!(s.ws.join("viking/default/resources/notes/a.md").exists());
    drop(holder);
    ok(&s, &["rm", uri]);
}

/// The lock's holder (`vikingfs lock` and its `sleep`, a process group), killed when the
/// test ends however it ends.
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        crate::support::signal(-(self.0.id() as i32), libc::SIGKILL);
        let _ = self.0.wait();
    }
}

/// The command's routes are the socket's only: over TCP they do not exist, and nothing runs.
#[test]
fn the_commands_routes_are_not_served_over_tcp() {
    let s = Served::new();
    add_notes(&s);
    for (method, path, body) in [
        (
            "POST",
            "/vikingfs/v1/rm",
            Some(r#"{"uri": "viking://resources/notes/a.md"}"#),
        ),
        ("GET", "/vikingfs/v1/status", None),
        ("GET", "/vikingfs/v1/hello", None),
        (
            "POST",
            "/vikingfs/v1/find",
            Some(r#"{"queries": ["penguins"], "mode": "lexical", "limit": 5}"#),
        ),
    ] {
        let (code, v) = s.call(method, path, &[], body.map(str::as_bytes));
        assert_eq!(code, 404, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "NOT_FOUND", "{v}");
    }
    assert!(s.ws.join("viking/default/resources/notes/a.md").exists());
}

/// A daemon killed outright leaves its socket: nobody accepts on it, so the command works
/// on its own.
#[test]
fn a_dead_daemons_socket_is_no_daemon() {
    let mut s = Served::new();
    add_notes(&s);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(socket(&s).exists(), "the socket went with the daemon");
    let out = s.cli(&["find", &token("alpha"), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("notes/a.md"));
    let out = s.cli(&["status"]);
    assert!(
        text(&out.stdout).contains("daemons: none"),
        "{}",
        text(&out.stdout)
    );
    ok(&s, &["rm", "viking://resources/notes/a.md"]);
}

/// `status` in text names where the daemon serves the API (the address an agent, `ov` or
/// curl needs) and the index's size in human units, not raw bytes.
#[test]
fn status_names_the_api_address_and_human_sizes() {
    let s = Served::new();
    add_notes(&s);
    let text = ok(&s, &["status"]);
    let daemon = text
        .lines()
        .find(|l| l.trim_start().starts_with("pid "))
        .unwrap_or_else(|| panic!("no daemon line: {text}"));
    assert!(
        daemon.contains(&format!("api http://{}", s.addr)),
        "{daemon}\n{text}"
    );
    let index = text
        .lines()
        .find(|l| l.starts_with("index: "))
        .unwrap_or_else(|| panic!("no index line: {text}"));
    assert!(
        !index.contains(" bytes") && (index.ends_with(" KiB") || index.ends_with(" MiB")),
        "{index}"
    );
}
