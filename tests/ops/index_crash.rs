//! A process killed in the middle of an index write leaves the previous state whole: prefix
//! deletes and renames are one transaction. Needs `--features failpoints`.
#![cfg(feature = "failpoints")]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use vikingfs::index::{Index, Level, Record};
use vikingfs::uri::VPath;

const DIM: usize = 8;
const ENV: &str = "VIKINGFS_INDEX_CRASH_CHILD";

fn open(db: &Path) -> Index {
    Index::open(db, DIM, "crash-model").unwrap()
}

fn p(s: &str) -> VPath {
    VPath::from_rel(s).unwrap()
}

fn uris(ix: &Index) -> BTreeSet<String> {
    ix.all_uris()
        .unwrap()
        .into_iter()
        .map(|(u, l)| format!("{}#{l}", u.as_str()))
        .collect()
}

/// Not a test on its own: the body of the child process.
#[test]
fn child() {
    let Ok(spec) = std::env::var(ENV) else { return };
    let (op, db) = spec.split_once(':').unwrap();
    let ix = open(Path::new(db));
    match op {
        "rename" => drop(ix.rename_prefix(&p("resources/src"), &p("agent/dst"))),
        "delete" => drop(ix.delete_prefix(&p("resources/src"))),
        _ => drop(ix.upsert(&record("resources/src/new.md", 99))),
    }
}

fn record(uri: &str, i: usize) -> Record {
    let mut vector = vec![0.1; DIM];
    vector[i % DIM] = 1.0 + i as f32;
    Record {
        uri: p(uri),
        level: Level::Content,
        text: format!("record {uri}"),
        vector: Some(vector),
        snippet: String::new(),
        source_version: format!("v{i}"),
        partial: false,
    }
}

fn crash(op: &str, point: &str, db: &Path) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "index_crash::child", "--nocapture"])
        .env(ENV, format!("{op}:{}", db.display()))
        .env("VIKINGFS_CRASH_AT", point)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{op} survived {point}");
    assert!(
        stderr.contains(&format!("crash point {point} reached")),
        "{stderr}"
    );
}

#[test]
fn a_crash_mid_write_leaves_the_old_state_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("index.db");
    let ix = open(&db);
    let recs: Vec<Record> = (0..600)
        .map(|i| record(&format!("resources/src/d{}/f{i}.md", i % 7), i))
        .chain([record("resources/srcx.md", 1000)])
        .collect();
    ix.upsert_many(&recs).unwrap();
    let before = uris(&ix);
    drop(ix);

    for (op, point) in [
        ("rename", "index.rename.between_passes"),
        ("rename", "index.write.before_commit"),
        ("delete", "index.write.before_commit"),
        ("upsert", "index.write.before_commit"),
    ] {
        crash(op, point, &db);
        let ix = open(&db);
        assert_eq!(uris(&ix), before, "{op} at {point} left a partial state");
        assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
        let hit = &ix.search(&record("", 5).vector.unwrap(), 1, None).unwrap()[0];
        assert_eq!(hit.uri.as_str(), "resources/src/d5/f5.md");
    }
    // Without a crash the same operations complete.
    let ix = open(&db);
    assert_eq!(
        ix.rename_prefix(&p("resources/src"), &p("agent/dst"))
            .unwrap(),
        600
    );
    assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
    assert_eq!(ix.count().unwrap(), 601);
}
