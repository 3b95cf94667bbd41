//! Several real processes writing and searching one index at once, on a SQLite file and on a
//! PostgreSQL server: writes serialise (on the server, writers of the same records queue
//! rather than deadlock), readers never fail or see a torn state, and the store's own
//! invariants hold after (packed chunks on SQLite; postings and counts on the server).
//!
//! The test binary re-executes itself (`--exact child`) with `VIKINGFS_INDEX_CHILD` set to
//! become a writer or reader child; the variable names the index too (a file or a DSN), so
//! each child is handed its test's backend explicitly.

use crate::support::backend::{backends, Backend};

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vikingfs::index::{Index, Level, Record, Store};
use vikingfs::uri::VPath;

const DIM: usize = 32;
const WRITERS: usize = 4;
const PER_WRITER: usize = 150;
const ENV: &str = "VIKINGFS_INDEX_CHILD";

/// Records every writer writes too (the last write of each wins).
const SHARED: usize = 10;

/// The index at `db`: a file's path, or a server's DSN (`host=…`).
fn open(db: &str) -> Index {
    let store = if db.starts_with("host=") {
        Store::Server(std::sync::Arc::new(vikingfs::pg::Pg::connect(db).unwrap()))
    } else {
        Store::File(Path::new(db))
    };
    Index::open_in(store, DIM, "procs-model").unwrap()
}

fn vector(w: usize, i: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64((w * 100_000 + i) as u64);
    (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn first_uri(w: usize, i: usize) -> String {
    if i >= 100 {
        format!("resources/w{w}/sub/f{i}")
    } else {
        format!("resources/w{w}/f{i}")
    }
}

/// Where each writer's record `i` ends up: every 5th deleted, `sub/` renamed to `agent/w{w}`.
fn final_uri(w: usize, i: usize) -> Option<String> {
    if i % 5 == 4 {
        return None;
    }
    Some(if i >= 100 {
        format!("agent/w{w}/f{i}")
    } else {
        first_uri(w, i)
    })
}

fn writer(db: &str, w: usize) {
    let ix = open(db);
    for i in 0..PER_WRITER {
        if i % 15 == 0 {
            // A batch of the shared records, in another order in each writer.
            let batch: Vec<Record> = (0..SHARED)
                .map(|k| (k + w * 3) % SHARED)
                .map(|k| Record {
                    uri: VPath::from_rel(&format!("resources/shared/s{k}")).unwrap(),
                    level: Level::Content,
                    text: format!("shared {k} by w{w}"),
                    vector: Some(vector(99, k)),
                    snippet: format!("w{w} shared"),
                    source_version: format!("{w}.{i}"),
                    partial: false,
                })
                .collect();
            ix.upsert_many(&batch).unwrap();
        }
        ix.upsert(&Record {
            uri: VPath::from_rel(&first_uri(w, i)).unwrap(),
            level: Level::Content,
            text: format!("w{w} i{i}"),
            vector: Some(vector(w, i)),
            snippet: format!("w{w} i{i}"),
            source_version: format!("{w}.{i}"),
            partial: false,
        })
        .unwrap();
        if i % 5 == 4 {
            assert_eq!(
                ix.delete(&VPath::from_rel(&first_uri(w, i)).unwrap())
                    .unwrap(),
                1
            );
        }
    }
    let from = VPath::from_rel(&format!("resources/w{w}/sub")).unwrap();
    let to = VPath::from_rel(&format!("agent/w{w}")).unwrap();
    assert_eq!(ix.rename_prefix(&from, &to).unwrap(), 40);
}

fn reader(db: &str) {
    let ix = open(db);
    let mut rng = StdRng::seed_from_u64(99);
    for _ in 0..200 {
        let q: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect();
        let hits = ix.search(&q, 10, None).unwrap();
        assert!(hits.windows(2).all(|h| h[0].score >= h[1].score));
        // A record is only ever seen with the vector and snippet of its own writer.
        for h in hits.iter().filter(|h| !h.uri.as_str().contains("shared")) {
            let w = h.snippet[1..2].parse::<usize>().unwrap();
            assert!(h.uri.as_str().contains(&format!("w{w}")), "{h:?}");
        }
    }
}

/// Not a test on its own: the body of the child processes.
#[test]
fn child() {
    let Ok(spec) = std::env::var(ENV) else { return };
    let (role, db) = spec.split_once(':').unwrap();
    match role.strip_prefix("writer") {
        Some(w) => writer(db, w.parse().unwrap()),
        None => reader(db),
    }
}

fn spawn(role: &str, db: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "index_procs::child", "--nocapture"])
        .env(ENV, format!("{role}:{db}"))
        .spawn()
        .unwrap()
}

backends!(concurrent_writer_and_reader_processes_keep_the_index_consistent);

fn concurrent_writer_and_reader_processes_keep_the_index_consistent(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = backend.start();
    let file = dir.path().join("index.db");
    let db = server
        .dsn()
        .unwrap_or_else(|| file.to_str().unwrap().to_string());
    writers_and_readers(&db);
}

fn writers_and_readers(db: &str) {
    drop(open(db));
    let mut children: Vec<Child> = (0..WRITERS)
        .map(|w| spawn(&format!("writer{w}"), db))
        .collect();
    children.push(spawn("reader", db));
    children.push(spawn("reader", db));
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a child process failed");
    }

    let ix = open(db);
    let mut want: BTreeSet<String> = (0..WRITERS)
        .flat_map(|w| (0..PER_WRITER).filter_map(move |i| final_uri(w, i)))
        .collect();
    want.extend((0..SHARED).map(|k| format!("resources/shared/s{k}")));
    let got: BTreeSet<String> = ix
        .all_uris()
        .unwrap()
        .into_iter()
        .map(|(u, _)| u.as_str().to_string())
        .collect();
    assert_eq!(got, want);
    assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
    // Every surviving record is found by its own vector, under its final name.
    for w in 0..WRITERS {
        for i in (0..PER_WRITER).step_by(7) {
            let Some(uri) = final_uri(w, i) else { continue };
            let hit = &ix.search(&vector(w, i), 1, None).unwrap()[0];
            assert_eq!(hit.uri.as_str(), uri);
            assert_eq!(hit.source_version, format!("{w}.{i}"));
        }
    }
}
