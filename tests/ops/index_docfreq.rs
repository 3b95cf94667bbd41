//! A measurement, not a check (`#[ignore]`d): the document frequencies a directory's summary
//! weighs its keywords by, for every directory of a tree of real text, by the old way (a
//! `MATCH` per candidate word joined to the records, as before `fts5vocab`) and by
//! `Index::doc_freq`, on one index in one run.
//!
//! `VIKINGFS_BENCH_TEXT` (default /usr/include), `VIKINGFS_BENCH_FILES` (default 8000):
//! `cargo nextest run --features failpoints --test ops --run-ignored only -E
//! 'test(doc_freq_throughput)' --no-capture`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use vikingfs::index::{text, Index, Level, Record};
use vikingfs::semantic::summary::{Child, DirInput};
use vikingfs::uri::VPath;

/// What `summary_input` reads of each child.
const HEAD: usize = 8 * 1024;
/// What a record of a file holds at most here.
const TEXT: usize = 256 * 1024;

fn files(root: &Path, max: usize) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() && out.len() < max {
                let Ok(b) = std::fs::read(e.path()) else {
                    continue;
                };
                let b = &b[..b.len().min(TEXT)];
                let Ok(t) = std::str::from_utf8(b) else {
                    continue;
                };
                let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
                if rel
                    .to_str()
                    .is_some_and(|s| VPath::from_rel(&format!("resources/tree/{s}")).is_ok())
                {
                    out.push((rel, t.to_string()));
                }
            }
        }
    }
    out
}

/// The old `doc_freq` of the SQLite engine, verbatim in its SQL: per word, a phrase `MATCH`
/// joined to the records outside the directory.
fn old_doc_freq(conn: &rusqlite::Connection, terms: &[String], dir: &VPath) -> Vec<u64> {
    let p = dir.as_str();
    let (p1, p2, p3) = (p.to_string(), format!("{p}/"), format!("{p}0"));
    let mut stmt = conn
        .prepare_cached(
            "SELECT count(*) FROM lex JOIN records r ON r.id = lex.rowid
              WHERE lex MATCH ?4 AND r.level = 2
                AND NOT (uri >= ?1 AND uri < ?3 AND (uri = ?1 OR uri >= ?2))",
        )
        .unwrap();
    let _docs: i64 = conn
        .query_row(
            "SELECT count(*) FROM records WHERE level = 2
                AND NOT (uri >= ?1 AND uri < ?3 AND (uri = ?1 OR uri >= ?2))",
            [&p1, &p2, &p3],
            |r| r.get(0),
        )
        .unwrap();
    terms
        .iter()
        .map(|t| {
            let doc = text::document(t);
            if doc.is_empty() {
                return 0;
            }
            let n: i64 = stmt
                .query_row(rusqlite::params![p1, p2, p3, format!("\"{doc}\"")], |r| {
                    r.get(0)
                })
                .unwrap();
            n as u64
        })
        .collect()
}

#[test]
#[ignore]
fn doc_freq_throughput_on_real_text() {
    let root = PathBuf::from(
        std::env::var("VIKINGFS_BENCH_TEXT").unwrap_or_else(|_| "/usr/include".into()),
    );
    let max: usize = std::env::var("VIKINGFS_BENCH_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8000);
    let files = files(&root, max);
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("index.db");
    let ix = Index::open_lexical(&db).unwrap();
    let base = VPath::from_rel("resources/tree").unwrap();
    let uri = |rel: &Path| base.join_rel(rel.to_str().unwrap()).unwrap();
    let t = Instant::now();
    for batch in files.chunks(500) {
        let recs: Vec<Record> = batch
            .iter()
            .map(|(rel, text)| Record {
                uri: uri(rel),
                level: Level::Content,
                text: text.clone(),
                vector: None,
                snippet: String::new(),
                source_version: "v".into(),
                partial: false,
            })
            .collect();
        ix.upsert_many(&recs).unwrap();
    }
    eprintln!(
        "{} files of {} indexed in {:.1?}",
        files.len(),
        root.display(),
        t.elapsed()
    );
    // Each directory's children as its summary reads them, and its candidate words.
    let mut dirs: BTreeMap<VPath, Vec<Child>> = BTreeMap::new();
    for (rel, text) in &files {
        let mut p = uri(rel);
        let mut child = Child::file(p.name(), &text[..text.floor_char_boundary(HEAD)]);
        while let Some(parent) = p.parent() {
            if !parent.starts_with(&base) {
                break;
            }
            let first = !dirs.contains_key(&parent);
            dirs.entry(parent.clone()).or_default().push(child);
            if !first {
                break;
            }
            child = Child::dir(parent.name(), "");
            p = parent;
        }
    }
    let inputs: Vec<(VPath, Vec<String>)> = dirs
        .into_iter()
        .map(|(d, children)| {
            let input = DirInput {
                uri: d.uri(),
                children,
                weights: None,
            };
            (d, input.keyword_candidates())
        })
        .collect();
    // Each directory has its summaries, as a workspace summarised once has.
    let sums: Vec<Record> = inputs
        .iter()
        .flat_map(|(d, c)| {
            [Level::Abstract, Level::Overview].map(|level| Record {
                uri: d.clone(),
                level,
                text: c.join(" "),
                vector: None,
                snippet: String::new(),
                source_version: "v".into(),
                partial: false,
            })
        })
        .collect();
    ix.upsert_many(&sums).unwrap();
    let words: usize = inputs.iter().map(|(_, c)| c.len()).sum();
    eprintln!("{} directories, {words} candidate words", inputs.len());

    let conn = rusqlite::Connection::open(&db).unwrap();
    let t = Instant::now();
    let old: Vec<Vec<u64>> = inputs
        .iter()
        .map(|(d, c)| old_doc_freq(&conn, c, d))
        .collect();
    let old_t = t.elapsed();
    let t = Instant::now();
    let new: Vec<Vec<u64>> = inputs
        .iter()
        .map(|(d, c)| {
            let c: Vec<&str> = c.iter().map(String::as_str).collect();
            ix.doc_freq(&c, Some(d)).unwrap().1
        })
        .collect();
    let new_t = t.elapsed();
    let t = Instant::now();
    for (_, c) in &inputs {
        let c: Vec<&str> = c.iter().map(String::as_str).collect();
        ix.doc_freq(&c, None).unwrap();
    }
    eprintln!(
        "new, the whole workspace's counts alone: {:.2?}",
        t.elapsed()
    );
    conn.execute_batch("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, lex, 'row')")
        .unwrap();
    let t = Instant::now();
    for (_, c) in &inputs {
        let lower: Vec<String> = c.iter().map(|w| w.to_lowercase()).collect();
        let list = serde_json::to_string(&lower).unwrap();
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM (SELECT v.term, v.doc FROM json_each(?1) j
                  CROSS JOIN temp.v v WHERE v.term = j.value)",
                [list],
                |r| r.get(0),
            )
            .unwrap();
        assert!(n >= 0);
    }
    eprintln!("  of which the vocabulary's query: {:.2?}", t.elapsed());
    let same = old
        .iter()
        .flatten()
        .zip(new.iter().flatten())
        .filter(|(a, b)| a == b)
        .count();
    let per_s = |d: std::time::Duration| inputs.len() as f64 / d.as_secs_f64();
    eprintln!(
        "old (MATCH per word): {old_t:.2?}, {:.1} directories/s\n\
         new (fts5vocab):      {new_t:.2?}, {:.1} directories/s ({:.1}x)\n\
         the same count for {same} of {words} words",
        per_s(old_t),
        per_s(new_t),
        old_t.as_secs_f64() / new_t.as_secs_f64()
    );
}
