//! The index on both backends, side by side: the same records written to a SQLite file and to
//! a real PostgreSQL server answer alike — BM25 scores rank for rank, the same dense top-k,
//! the same document frequencies, names, counts after renames and deletes — and on either
//! backend the index is one for every handle (every process; on the server, every host),
//! with its own checks at open.

use crate::support::backend::{backends, Backend, Db};
use crate::support::pg::PgServer;

use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vikingfs::index::{Index, IndexError, Level, Opened, Record, Store};
use vikingfs::pg::Pg;
use vikingfs::uri::VPath;

const DIM: usize = 24;

fn p(s: &str) -> VPath {
    VPath::from_rel(s).unwrap()
}

/// Real text nobody here wrote: the paragraphs of the licences Debian ships, one record
/// each, with a seeded vector; plus identifiers and CJK, which the terms treat specially.
fn corpus() -> Vec<Record> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut out = Vec::new();
    let dir = std::path::Path::new("/usr/share/common-licenses");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("/usr/share/common-licenses (base-files)")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.contains('.') || n.contains('-'))
        .collect();
    names.sort();
    for name in names.iter().take(8) {
        let Ok(text) = std::fs::read_to_string(dir.join(name)) else {
            continue;
        };
        for (i, para) in text.split("\n\n").filter(|p| p.len() > 80).enumerate() {
            out.push(Record {
                uri: p(&format!("resources/licences/{name}/p{i:03}.txt")),
                level: Level::Content,
                text: para.to_string(),
                vector: Some((0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect()),
                snippet: para.chars().take(40).collect(),
                source_version: format!("v{i}"),
                partial: false,
            });
        }
    }
    for (i, t) in [
        "fn acquire_for(LockGuard) -> parseHTTPRequest",
        "全文检索 日本語とEnglish",
        "the lock guard and the locking of locks",
    ]
    .iter()
    .enumerate()
    {
        out.push(Record {
            uri: p(&format!("resources/code/LockGuard{i}.rs")),
            level: if i == 2 {
                Level::Overview
            } else {
                Level::Content
            },
            text: t.to_string(),
            vector: None,
            snippet: String::new(),
            source_version: "c".into(),
            partial: i == 1,
        });
    }
    assert!(out.len() > 200, "a corpus of {} records", out.len());
    out
}

fn on_server(server: &PgServer) -> Index {
    let pg = Arc::new(Pg::connect(&server.dsn()).unwrap());
    Index::open_in(Store::Server(pg), DIM, "m").unwrap()
}

/// Queries from the corpus's own words (every 97th), pairs of them, and special cases.
fn queries(recs: &[Record]) -> Vec<String> {
    let words: Vec<&str> = recs
        .iter()
        .flat_map(|r| r.text.split_whitespace())
        .filter(|w| w.len() > 3)
        .collect();
    let mut q: Vec<String> = words.iter().step_by(97).map(|w| w.to_string()).collect();
    q.extend(
        words
            .chunks(211)
            .map(|c| format!("{} {}", c[0], c[c.len() / 2])),
    );
    q.extend(
        [
            "LockGuard",
            "locks",
            "中",
            "检索",
            "warranty merchantability fitness",
            "the",
            "zyxwvut-qqqxq",
        ]
        .map(String::from),
    );
    q
}

fn assert_ranked_alike(what: &str, a: &[vikingfs::index::Hit], b: &[vikingfs::index::Hit]) {
    assert_eq!(a.len(), b.len(), "{what}: number of hits");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let close = (x.score - y.score).abs() <= 1e-4 * x.score.abs().max(1.0);
        assert!(close, "{what}: rank {i} scores {} vs {}", x.score, y.score);
    }
    // Where the scores are not tied, the same records in the same order.
    let mut i = 0;
    while i < a.len() {
        let mut j = i + 1;
        while j < a.len() && (a[j].score - a[i].score).abs() <= 1e-4 * a[i].score.abs().max(1.0) {
            j += 1;
        }
        let mut xs: Vec<_> = a[i..j].iter().map(|h| (&h.uri, h.level)).collect();
        let mut ys: Vec<_> = b[i..j].iter().map(|h| (&h.uri, h.level)).collect();
        if j < a.len() || j - i == 1 {
            xs.sort();
            ys.sort();
            assert_eq!(xs, ys, "{what}: ranks {i}..{j}");
        }
        i = j;
    }
}

#[test]
fn both_backends_answer_alike() {
    let server = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let lite = Index::open(&dir.path().join("index.db"), DIM, "m").unwrap();
    let pg = on_server(&server);
    let recs = corpus();
    lite.upsert_many(&recs).unwrap();
    for chunk in recs.chunks(50) {
        pg.upsert_many(chunk).unwrap();
    }
    // Written again in one batch: half with new text and no vector (a new version), half
    // unchanged with their vectors.
    let again: Vec<Record> = recs[..120]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut r = r.clone();
            if i % 2 == 0 {
                r.text.push_str(" amended heliotrope");
                r.source_version.push_str("-2");
                r.vector = None;
            }
            r
        })
        .collect();
    lite.upsert_many(&again).unwrap();
    pg.upsert_many(&again).unwrap();
    assert_eq!(lite.stats().unwrap(), pg.stats().unwrap());
    assert_eq!(lite.all_uris().unwrap(), pg.all_uris().unwrap());
    assert_eq!(
        lite.missing_vectors().unwrap(),
        pg.missing_vectors().unwrap()
    );
    assert_eq!(
        pg.search_lexical("heliotrope", 100, None).unwrap().len(),
        60
    );

    let under = p("resources/licences/GPL-3");
    for q in queries(&recs) {
        for u in [None, Some(&under)] {
            let (a, b) = (
                lite.search_lexical(&q, 10, u).unwrap(),
                pg.search_lexical(&q, 10, u).unwrap(),
            );
            assert_ranked_alike(&format!("{q:?} under {u:?}"), &a, &b);
            assert!(b.iter().all(|h| u.is_none_or(|u| h.uri.starts_with(u))));
        }
    }
    assert!(!pg.search_lexical("warranty", 10, None).unwrap().is_empty());
    assert!(pg
        .search_lexical("zyxwvut-qqqxq", 10, None)
        .unwrap()
        .is_empty());
    // A lone CJK character finds the bigrams it starts, on both.
    assert_eq!(pg.search_lexical("检", 10, None).unwrap().len(), 1);

    let terms = [
        "locks",
        "warranty",
        "License",
        "LockGuard",
        "检索",
        "absent",
        "...",
    ];
    for excl in [None, Some(&under)] {
        let (a, b) = (
            lite.doc_freq(&terms, excl).unwrap(),
            pg.doc_freq(&terms, excl).unwrap(),
        );
        assert_eq!(a, b, "document frequencies excluding {excl:?}");
    }

    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..20 {
        let q: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect();
        for u in [None, Some(&under)] {
            let (a, b) = (
                lite.search(&q, 10, u).unwrap(),
                pg.search(&q, 10, u).unwrap(),
            );
            let names =
                |h: &[vikingfs::index::Hit]| h.iter().map(|h| h.uri.clone()).collect::<Vec<_>>();
            assert_eq!(names(&a), names(&b), "dense top 10 under {u:?}");
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x.score - y.score).abs() < 1e-3,
                    "{} vs {}",
                    x.score,
                    y.score
                );
            }
        }
    }

    // The same writes keep them alike: a rename of a file (its name's terms change), of a
    // directory over an existing record, deletes by version, by prefix.
    for ix in [&lite, &pg] {
        assert_eq!(
            ix.rename_prefix(
                &p("resources/code/LockGuard0.rs"),
                &p("resources/code/queue.rs")
            )
            .unwrap(),
            1
        );
        ix.rename_prefix(
            &p("resources/licences/GPL-2"),
            &p("resources/licences/GPL-3"),
        )
        .unwrap();
        assert!(ix
            .delete_if_version(
                &p("resources/licences/Apache-2.0/p001.txt"),
                Level::Content,
                "v1"
            )
            .unwrap());
        assert!(!ix
            .delete_if_version(
                &p("resources/licences/Apache-2.0/p002.txt"),
                Level::Content,
                "v1"
            )
            .unwrap());
        ix.delete_prefix(&p("resources/licences/BSD")).unwrap();
        assert!(ix
            .set_vector(
                &p("resources/code/queue.rs"),
                Level::Content,
                "c",
                &[0.5; DIM]
            )
            .unwrap());
        assert!(!ix
            .set_vector(
                &p("resources/code/queue.rs"),
                Level::Content,
                "old",
                &[0.5; DIM]
            )
            .unwrap());
    }
    assert_eq!(lite.all_uris().unwrap(), pg.all_uris().unwrap());
    assert_eq!(lite.stats().unwrap(), pg.stats().unwrap());
    assert_eq!(
        lite.missing_vectors().unwrap(),
        pg.missing_vectors().unwrap()
    );
    for q in ["queue", "LockGuard", "parse request", "warranty"] {
        assert_ranked_alike(
            &format!("{q:?} after the writes"),
            &lite.search_lexical(q, 10, None).unwrap(),
            &pg.search_lexical(q, 10, None).unwrap(),
        );
    }
    assert_eq!(
        pg.search_lexical("queue", 1, None).unwrap()[0].uri,
        p("resources/code/queue.rs"),
        "the new name is searchable"
    );
    assert!(pg.verify().unwrap().is_empty(), "{:?}", pg.verify());
    assert!(lite.verify().unwrap().is_empty());
}

/// One test's index database on a backend; [`IndexTest::store`] is another handle on it
/// each time.
struct IndexTest {
    db: Db,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl IndexTest {
    fn new(backend: Backend) -> IndexTest {
        let dir = tempfile::tempdir().unwrap();
        IndexTest {
            db: backend.start(),
            file: dir.path().join("index.db"),
            _dir: dir,
        }
    }

    fn store(&self) -> Store<'_> {
        match self.db.dsn() {
            None => Store::File(&self.file),
            Some(dsn) => Store::Server(Arc::new(Pg::connect(&dsn).unwrap())),
        }
    }
}

backends!(the_index_is_one_for_every_handle_and_checks_its_model);

fn the_index_is_one_for_every_handle_and_checks_its_model(backend: Backend) {
    let t = IndexTest::new(backend);
    let a = Index::open_in(t.store(), DIM, "m").unwrap();
    let b = Index::open_in(t.store(), DIM, "m").unwrap();
    assert_eq!(a.opened(), Opened::Created);
    assert_eq!(b.opened(), Opened::Current);
    let r = Record {
        uri: p("resources/x.md"),
        level: Level::Content,
        text: "shared between hosts".into(),
        vector: Some(vec![1.0; DIM]),
        snippet: "s".into(),
        source_version: "v1".into(),
        partial: false,
    };
    a.upsert(&r).unwrap();
    assert_eq!(b.search_lexical("hosts", 5, None).unwrap()[0].uri, r.uri);
    assert_eq!(b.search(&[1.0; DIM], 5, None).unwrap().len(), 1);
    assert_eq!(b.delete(&r.uri).unwrap(), 1);
    assert_eq!(a.count().unwrap(), 0);
    a.upsert(&r).unwrap();

    // Another model: refused to a reader, its vectors dropped for the daemon.
    match Index::open_in(t.store(), 8, "other") {
        Err(e @ IndexError::ModelMismatch { .. }) => {
            assert!(e.to_string().contains("rebuilt"), "{e}")
        }
        other => panic!("expected a model mismatch, got {:?}", other.map(|_| ())),
    }
    let (c, dropped) = Index::open_or_reset_in(t.store(), 8, "other").unwrap();
    assert!(dropped);
    assert_eq!(c.opened(), Opened::VectorsDropped);
    assert_eq!(c.count().unwrap(), 1, "records stay");
    assert_eq!(c.missing_vectors().unwrap().len(), 1);
    assert!(c
        .set_vector(&r.uri, Level::Content, "v1", &[0.3; 8])
        .unwrap());
    assert_eq!(c.search(&[0.3; 8], 5, None).unwrap()[0].uri, r.uri);
    // A lexical reader takes what is there.
    let lex = Index::open_lexical_in(t.store()).unwrap();
    assert_eq!(lex.search_lexical("shared", 5, None).unwrap().len(), 1);
    assert!(c.verify().unwrap().is_empty());
}
