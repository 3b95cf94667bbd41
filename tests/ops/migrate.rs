//! `vikingfs migrate`: the stores' rows moved between SQLite and a real PostgreSQL server in
//! both directions (engines: leased jobs pending again, dead ones kept, key versions along;
//! intents and lifecycles), and whole workspaces moved there and back through the CLI —
//! `find` and `status` answer the same after each move, nothing lost, nothing doubled; the
//! refusals are one line; a crash before the switch leaves the old backend whole and the
//! next migrate starts over (crash point `migrate.copied`, outside the crash matrix: its
//! operation is the migration itself).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use vikingfs::journal::postgres::PgJournal;
use vikingfs::journal::sqlite::SqliteJournal;
use vikingfs::journal::{self, Intent, Journal, JournalRows};
use vikingfs::pg::Pg;
use vikingfs::queue::engine::{Engine, Failure, JobRow, QueueRows};
use vikingfs::queue::postgres::PgEngine;
use vikingfs::queue::sqlite::SqliteEngine;
use vikingfs::queue::NewJob;

use crate::support::ops::Env;
use crate::support::pg::PgServer;
use crate::support::token;

const LONG: Duration = Duration::from_secs(600);

fn job(key: Option<&str>, n: i64) -> NewJob {
    NewJob::new("semantic", key.map(str::to_string), json!({ "n": n }))
}

/// A queue with every kind of row: a key enqueued three times (version 3, one pending row),
/// an unkeyed job, a leased job whose key moved on (dropped by the move), a leased one still
/// current (pending after the move), a dead one.
fn fill(q: &dyn Engine) {
    q.enqueue(
        &[job(Some("a"), 1), job(Some("a"), 2), job(Some("a"), 3)],
        LONG,
    )
    .unwrap();
    q.enqueue(&[job(None, 4)], LONG).unwrap();
    q.enqueue(&[job(Some("b"), 5)], LONG).unwrap();
    q.enqueue(&[job(Some("c"), 6)], LONG).unwrap();
    q.enqueue(&[job(Some("d"), 7)], LONG).unwrap();
    // Claim in line order: a, the unkeyed one, b, c, d; hand a and the unkeyed one back.
    let mut claimed = Vec::new();
    for _ in 0..5 {
        claimed.push(q.claim("semantic", "w", LONG, 5).unwrap().unwrap());
    }
    q.release(&claimed[0]).unwrap();
    q.release(&claimed[1]).unwrap();
    // b enqueued again while leased: the lease's version is stale.
    q.enqueue(&[job(Some("b"), 8)], Duration::ZERO).unwrap();
    q.fail(&claimed[4], Failure::Dead { message: "boom" })
        .unwrap();
}

/// The rows without their instants (each engine has its own clock), sorted.
fn shape(rows: &QueueRows) -> (Vec<JobRow>, Vec<(String, String, i64)>) {
    let mut jobs: Vec<JobRow> = rows
        .jobs
        .iter()
        .map(|j| JobRow {
            due_in_ms: 0,
            age_ms: 0,
            updated_ms: 0,
            ..j.clone()
        })
        .collect();
    jobs.sort_by(|a, b| (&a.key, a.version).cmp(&(&b.key, b.version)));
    let keys = rows
        .keys
        .iter()
        .map(|k| (k.queue.clone(), k.key.clone(), k.version))
        .collect();
    (jobs, keys)
}

fn moved(from: &dyn Engine, to: &dyn Engine) -> QueueRows {
    let rows = from.export().unwrap();
    to.import(&[], &rows.keys).unwrap();
    to.import(&rows.jobs, &[]).unwrap();
    let got = to.export().unwrap();
    assert_eq!(shape(&got), shape(&rows));
    got
}

fn check_moved(rows: &QueueRows, q: &dyn Engine) {
    let (jobs, keys) = shape(rows);
    let by_key = |k: Option<&str>| jobs.iter().filter(|j| j.key.as_deref() == k).count();
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    assert_eq!(by_key(Some("b")), 1, "b's stale lease is dropped: {jobs:?}");
    let c = jobs.iter().find(|j| j.key.as_deref() == Some("c")).unwrap();
    assert!(
        !c.dead && c.attempts == 1,
        "a live lease is pending again: {c:?}"
    );
    let d = jobs.iter().find(|j| j.key.as_deref() == Some("d")).unwrap();
    assert!(d.dead && d.last_error.as_deref() == Some("boom") && d.attempts == 1);
    assert!(
        keys.contains(&("semantic".into(), "a".into(), 3)),
        "{keys:?}"
    );
    // Latest version wins after the move: a's next enqueue is version 4, coalesced.
    assert_eq!(q.key_version("semantic", "a").unwrap(), Some(3));
    assert_eq!(q.unfinished(None).unwrap(), 4);
    q.enqueue(&[job(Some("a"), 9)], LONG).unwrap();
    assert_eq!(q.key_version("semantic", "a").unwrap(), Some(4));
    assert_eq!(q.unfinished(None).unwrap(), 4);
    // Every pending job is claimable, in line order: a first.
    let first = q.claim("semantic", "w2", LONG, 5).unwrap().unwrap();
    assert_eq!(first.key.as_deref(), Some("a"));
    assert_eq!(first.payload, json!({"n": 9}));
    assert!(q.is_current(&first).unwrap());
    q.release(&first).unwrap();
}

#[test]
fn queue_rows_move_to_postgres_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = PgServer::start();
    let sqlite = SqliteEngine::open(&dir.path().join("queue.db"), LONG).unwrap();
    let pg = PgEngine::open(Arc::new(Pg::connect(&server.dsn()).unwrap())).unwrap();
    fill(&sqlite);
    let there = moved(&sqlite, &pg);
    check_moved(&there, &pg);

    // And back, into a fresh file.
    let back = SqliteEngine::open(&dir.path().join("back.db"), LONG).unwrap();
    let rows = moved(&pg, &back);
    assert_eq!(rows.jobs.len(), 5);
    assert_eq!(back.key_version("semantic", "a").unwrap(), Some(4));

    // Postgres filled the same way first, moved to SQLite.
    pg.clear().unwrap();
    assert!(pg.export().unwrap().is_empty());
    fill(&pg);
    let file = SqliteEngine::open(&dir.path().join("third.db"), LONG).unwrap();
    let rows = moved(&pg, &file);
    check_moved(&rows, &file);
}

fn journal_shape(r: &JournalRows) -> Value {
    json!({
        "intents": r.intents.iter().map(|i| json!([i.body, i.owner])).collect::<Vec<_>>(),
        "lifecycles": r.lifecycles.iter()
            .map(|l| json!([l.handle, l.target, l.kind, l.keys])).collect::<Vec<_>>(),
        "history": r.history.iter().map(|h| json!([h.at_ms, h.entry])).collect::<Vec<_>>(),
    })
}

#[test]
fn journal_rows_move_to_postgres_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = PgServer::start();
    let sqlite = Journal::open(&dir.path().join("ops.db")).unwrap();
    let mv = Intent::Mv {
        src: "resources/a".into(),
        dst: "resources/b".into(),
        dir: true,
    };
    sqlite.begin(&mv, "dead-owner").unwrap();
    let target = vikingfs::uri::VPath::from_rel("resources/r").unwrap();
    let add = Intent::Add {
        temp: "/tmp/x".into(),
        target: "resources/r".into(),
        handle: "h1".into(),
        file: false,
        overlay: false,
    };
    sqlite
        .begin_add(&add, "other", &target, vikingfs::lock::LockKind::Tree)
        .unwrap();
    sqlite
        .lifecycle_start(
            "h1",
            &target,
            vikingfs::lock::LockKind::Tree,
            &["k1".into(), "k2".into()],
        )
        .unwrap();
    // Two history entries, an older one first: they move with their times and order.
    let entry = |op: &str, path: &str| vikingfs::journal::Entry {
        op: op.into(),
        path: path.into(),
        new_path: None,
        born_ms: Some(5),
        kind: "file".into(),
        size: 3,
        blob: Some(format!("blob-{path}")),
        reason: None,
        mode: 0o640,
        uid: 1000,
        gid: 1000,
        pid: Some(42),
        cmd: Some("rm x".into()),
    };
    sqlite.record(&[entry("rm", "resources/x")]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    sqlite.record(&[entry("overwrite", "resources/y")]).unwrap();
    let rows = sqlite.engine().export().unwrap();
    assert_eq!((rows.intents.len(), rows.lifecycles.len()), (2, 1));
    assert_eq!(rows.history.len(), 2);
    assert!(
        rows.history[0].at_ms < rows.history[1].at_ms,
        "oldest first"
    );

    let pg = PgJournal::open(Arc::new(Pg::connect(&server.dsn()).unwrap())).unwrap();
    journal::Engine::import(&pg, &rows).unwrap();
    let there = Journal::with_engine(Box::new(pg));
    let got = there.engine().export().unwrap();
    assert_eq!(journal_shape(&got), journal_shape(&rows));
    // The front reads them as it did: an mv to finish, a lifecycle with two keys.
    assert_eq!(there.intents().unwrap()[0].1, mv);
    assert_eq!(there.lifecycle("h1").unwrap().unwrap().pending, 2);
    assert_eq!(
        there.lifecycle_of_target(&target).unwrap().as_deref(),
        Some("h1")
    );

    let back = SqliteJournal::open(&dir.path().join("back.db")).unwrap();
    journal::Engine::import(&back, &got).unwrap();
    assert_eq!(
        journal_shape(&journal::Engine::export(&back).unwrap()),
        journal_shape(&rows)
    );
    there.engine().clear().unwrap();
    assert!(there.engine().export().unwrap().is_empty());
}

// ---- whole workspaces through the CLI ----

/// A workspace with indexed files, a summary per directory, and one dead job.
fn workspace() -> (Env, Vec<String>) {
    let env = Env::new();
    let tags = ["alpha", "bravo", "sub/charlie", "sub/deep/delta"];
    let files: Vec<(String, String)> = tags
        .iter()
        .map(|t| {
            (
                format!("{t}.md"),
                format!("# {t}\n\nThis note is about {}.\n", token(t)),
            )
        })
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(p, c)| (p.as_str(), c.clone())).collect();
    let local = env.local("base", &refs);
    env.add_waited(&local, "viking://resources/base");
    let q = vikingfs::queue::Queue::open(&env.ws().join(".vikingfs/queue.db")).unwrap();
    let e = q.engine();
    e.enqueue(
        &[NewJob::new(
            "semantic",
            Some("viking://resources/gone".into()),
            json!({"uri": "viking://resources/gone"}),
        )],
        LONG,
    )
    .unwrap();
    let j = e.claim("semantic", "t", LONG, 5).unwrap().unwrap();
    e.fail(
        &j,
        Failure::Dead {
            message: "test: dead on purpose",
        },
    )
    .unwrap();
    (env, tags.iter().map(|t| token(t)).collect())
}

/// What the workspace answers: every token's results, the jobs by state, the index's size.
fn answers(env: &Env, tokens: &[String]) -> Value {
    env.drain();
    let found: Vec<_> = tokens.iter().map(|t| env.find(t, 10)).collect();
    assert!(found.iter().all(|f| !f.is_empty()), "{found:?}");
    let st: Value = serde_json::from_str(&env.ok(&["status", "--json"])).unwrap();
    let mut jobs = (0, 0, vec![]);
    for q in st["queues"].as_object().unwrap().values() {
        jobs.0 += q["pending"].as_u64().unwrap() + q["running"].as_u64().unwrap();
        jobs.1 += q["dead"].as_u64().unwrap();
        for d in q["last_dead"].as_array().into_iter().flatten() {
            jobs.2.push(json!([d["key"], d["attempts"], d["error"]]));
        }
    }
    let ix = &st["index"];
    json!({
        "found": found,
        "jobs": [jobs.0, jobs.1, jobs.2],
        "index": [ix["records"], ix["lexical"]],
    })
}

fn backend_in_config(env: &Env) -> Option<String> {
    let text = std::fs::read_to_string(env.dir.path().join(".vikingfs/config.json")).ok()?;
    let v: Value = serde_json::from_str(&text).unwrap();
    v["storage"]["backend"].as_str().map(str::to_string)
}

/// stderr of a refused run: exit 1, one line.
fn refused(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

fn internal_names(env: &Env) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(env.ws().join(".vikingfs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn workspace_moves_to_postgres_and_back() {
    let server = PgServer::start();
    let dsn = server.new_database("mig");
    let (env, tokens) = workspace();
    let before = answers(&env, &tokens);
    assert_eq!(before["jobs"][1], 1, "{before}");
    assert!(before["index"][0].as_u64().unwrap() >= 4, "{before}");

    let err = refused(&env, &["migrate", "--to", "sqlite"]);
    assert!(err.contains("on sqlite already"), "{err}");
    // A daemon of the workspace (one on another host: it cannot be checked, so it counts).
    let daemons = env.ws().join(".vikingfs/daemons");
    std::fs::create_dir_all(&daemons).unwrap();
    let record = daemons.join("4242.json");
    std::fs::write(
        &record,
        json!({"pid": 4242, "start": 1, "host": "elsewhere", "mountpoint": "/mnt/v",
               "started_at": 0, "version": "0", "workers": true})
        .to_string(),
    )
    .unwrap();
    let names = internal_names(&env);
    let err = refused(&env, &["migrate", "--to", "postgres", "--dsn", &dsn]);
    assert!(err.contains("daemon") && err.contains("4242"), "{err}");
    assert_eq!(internal_names(&env), names, "a refusal changes nothing");
    assert_eq!(backend_in_config(&env), None);
    std::fs::remove_file(&record).unwrap();

    env.ok(&["migrate", "--to", "postgres", "--dsn", &dsn]);
    assert_eq!(backend_in_config(&env).as_deref(), Some("postgres"));
    let names = internal_names(&env);
    for db in ["queue.db", "ops.db", "index.db"] {
        assert!(
            !names.iter().any(|n| n == db),
            "{db} still in use: {names:?}"
        );
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(&format!("{db}.migrated-"))),
            "{db} not kept aside: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n == "migrate.incomplete"),
        "{names:?}"
    );
    let there = answers(&env, &tokens);
    assert_eq!(there, before);

    env.ok(&["migrate", "--to", "sqlite"]);
    assert_eq!(backend_in_config(&env).as_deref(), Some("sqlite"));
    let back = answers(&env, &tokens);
    assert_eq!(back, before);

    // The server's tables were left as they were: a second move there is refused, in one
    // line, unless forced.
    let err = refused(&env, &["migrate", "--to", "postgres", "--dsn", &dsn]);
    assert!(err.contains("--force") && err.contains("queue"), "{err}");
    assert_eq!(backend_in_config(&env).as_deref(), Some("sqlite"));
    env.ok(&["migrate", "--to", "postgres", "--dsn", &dsn, "--force"]);
    assert_eq!(answers(&env, &tokens), before);

    // The history moves too: what was removed on one backend is undone on the other.
    env.ok(&["rm", "viking://resources/base/alpha.md"]);
    let out = env.ok(&["migrate", "--to", "sqlite"]);
    assert!(out.contains("1 history entr(ies)"), "{out}");
    let listed = env.ok(&["history", "--json", "viking://resources/base/alpha.md"]);
    let v: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    env.ok(&["undo", "viking://resources/base/alpha.md"]);
    assert!(env
        .ws()
        .join("viking/default/resources/base/alpha.md")
        .is_file());
}

#[cfg(feature = "failpoints")]
#[test]
fn crash_before_the_switch_keeps_the_old_backend() {
    use std::os::unix::process::ExitStatusExt;
    let server = PgServer::start();
    let dsn = server.new_database("crash");
    let (env, tokens) = workspace();
    let before = answers(&env, &tokens);
    let out = env
        .cmd(&["migrate", "--to", "postgres", "--dsn", &dsn])
        .env("VIKINGFS_CRASH_AT", "migrate.copied")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains("crash point migrate.copied reached"),
        "{stderr}"
    );
    // The old backend is in force, whole; the target is marked unfinished.
    assert_eq!(backend_in_config(&env), None);
    assert!(internal_names(&env)
        .iter()
        .any(|n| n == "migrate.incomplete"));
    assert_eq!(answers(&env, &tokens), before);
    // The next migrate starts over by itself (no --force), and nothing doubles.
    env.ok(&["migrate", "--to", "postgres", "--dsn", &dsn]);
    assert_eq!(backend_in_config(&env).as_deref(), Some("postgres"));
    assert_eq!(answers(&env, &tokens), before);
}
