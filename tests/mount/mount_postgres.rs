//! A mount on each backend (`storage.backend`): files copied in are indexed, into the
//! backend's records, by jobs drained from the backend's rows, `status` and `wait` count
//! those rows, rm keeps `find` truthful; on PostgreSQL, no SQLite file is written beside the
//! server's. A bad DSN is refused in one line with nothing written, and a second workspace on
//! one database in one line.

use crate::support::backend::{backends, Backend, Db};
use crate::support::daemon::*;
use crate::support::pg::PgServer;
use crate::support::vikingfs;

fn config(dsn: &str) -> String {
    serde_json::json!({ "storage": { "backend": "postgres", "postgres": { "dsn": dsn } } })
        .to_string()
}

/// `SELECT COUNT(*) FROM table WHERE filter` on the store's own database: the server's
/// tables (`vq_jobs`, `vi_records`), or the workspace's SQLite files (`queue.db`'s `jobs`,
/// `index.db`'s `records`).
fn count(db: &Db, m: &Mount, table: &str, filter: &str) -> i64 {
    let (file, sqlite_table, pg_table) = match table {
        "jobs" => ("queue.db", "jobs", "vq_jobs"),
        "records" => ("index.db", "records", "vi_records"),
        other => panic!("no table {other}"),
    };
    match db.server() {
        Some(server) => server
            .client()
            .query_one(
                &format!("SELECT COUNT(*) FROM {pg_table} WHERE {filter}"),
                &[],
            )
            .unwrap()
            .get(0),
        None => rusqlite::Connection::open(m.ws.join(".vikingfs").join(file))
            .unwrap()
            .query_row(
                &format!("SELECT COUNT(*) FROM {sqlite_table} WHERE {filter}"),
                [],
                |r| r.get(0),
            )
            .unwrap(),
    }
}

backends!(a_mount_indexes_what_is_copied_in_and_forgets_what_is_removed);

fn a_mount_indexes_what_is_copied_in_and_forgets_what_is_removed(backend: Backend) {
    let db = backend.start();
    let m = match db.dsn() {
        Some(dsn) => Mount::with_config(&config(&dsn)),
        None => Mount::new(),
    };
    let res = m.res();
    ok(
        &res,
        "mkdir notes && for i in $(seq 1 30); do echo \"note $i about heliotrope gardens\" > notes/n$i.md; done
         echo 'the quartzite ledger' > notes/ledger.md",
    );
    m.check_index_agrees();
    // The jobs ran from the backend's rows: none left there, and some were there.
    assert_eq!(count(&db, &m, "jobs", "state < 2"), 0);
    let files = count(
        &db,
        &m,
        "records",
        "uri LIKE 'resources/notes/%' AND level = 2",
    );
    assert_eq!(files, 31, "the backend holds the records");
    if backend == Backend::Postgres {
        for file in ["queue.db", "ops.db", "index.db"] {
            assert!(
                !m.ws.join(".vikingfs").join(file).exists(),
                "no SQLite {file} beside the server's"
            );
        }
    }
    let out = m.cli(&["find", "quartzite ledger"]).output().unwrap();
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(found.contains("notes/ledger.md"), "{found}");
    // Remove through the mount: find forgets it once the jobs ran.
    ok(&res, "rm notes/ledger.md");
    m.check_index_agrees();
    let out = m.cli(&["find", "quartzite ledger"]).output().unwrap();
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(!found.contains("ledger.md"), "{found}");
    let gone = count(&db, &m, "records", "uri = 'resources/notes/ledger.md'");
    assert_eq!(gone, 0);
    m.assert_no_dead_jobs();
    let out = m.cli(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["queues"]["embedding"].is_object(), "{v}");
    if backend == Backend::Postgres {
        let at = v["index"]["at"].as_str().unwrap_or_default();
        assert!(
            at.contains("dbname=vikingfs"),
            "status names the server: {v}"
        );
    }
    let records = count(&db, &m, "records", "true");
    assert_eq!(
        v["index"]["records"], records,
        "status counts the backend's records: {v}"
    );
}

#[test]
fn a_bad_dsn_is_one_line_and_creates_no_workspace() {
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::create_dir_all(home.path().join(".vikingfs")).unwrap();
    std::fs::write(
        home.path().join(".vikingfs/config.json"),
        config(&format!(
            "host=127.0.0.1 port={port} dbname=v user=v connect_timeout=2"
        )),
    )
    .unwrap();
    let ws = home.path().join("ws");
    // A command that would create the workspace (one that only reads never does).
    let out = vikingfs(home.path())
        .arg("--workspace")
        .arg(&ws)
        .args(["write", "viking://resources/a.md", "--from", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "PostgreSQL host=127.0.0.1 port={port} dbname=v user=v"
        )),
        "{err}"
    );
    assert!(!ws.exists(), "nothing written before the backend answered");
}

#[test]
fn a_second_workspace_on_the_same_database_is_refused_in_one_line() {
    let server = PgServer::start();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".vikingfs")).unwrap();
    std::fs::write(
        home.path().join(".vikingfs/config.json"),
        config(&server.dsn()),
    )
    .unwrap();
    let run = |ws: &str, args: &[&str]| {
        vikingfs(home.path())
            .arg("--workspace")
            .arg(home.path().join(ws))
            .args(args)
            .output()
            .unwrap()
    };
    // Made by a command that writes (one that only reads creates no workspace).
    let write = ["write", "viking://resources/a.md", "--from", "/dev/null"];
    let first = run("one", &write);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // The same workspace again (another host of it): fine.
    assert!(run("one", &["status", "--json"]).status.success());
    let other = run("two", &write);
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("holds the stores of another workspace"),
        "{err}"
    );
}
