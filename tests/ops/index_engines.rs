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

backends!(a_record_is_scored_by_its_best_passage);

/// A record has a vector per passage of its source: a dense search scores it by its best
/// passage and names that passage and its lines; the top k are k different records however
/// many passages each has; new vectors replace all the old ones (fewer passages free their
/// places) and a delete frees every one (the store's own check stays clean throughout).
fn a_record_is_scored_by_its_best_passage(backend: Backend) {
    use vikingfs::index::PassageVector;
    let t = IndexTest::new(backend);
    let ix = Index::open_in(t.store(), DIM, "m").unwrap();
    let axis = |i: usize| -> Vec<f32> { (0..DIM).map(|d| f32::from(d == i)).collect() };
    let rec = |uri: &str| Record {
        uri: p(uri),
        level: Level::Content,
        text: format!("text of {uri}"),
        vector: None,
        snippet: String::new(),
        source_version: "v1".into(),
        partial: false,
    };
    let names: Vec<String> = (0..12).map(|i| format!("resources/f{i:02}.rs")).collect();
    ix.upsert_many(&names.iter().map(|n| rec(n)).collect::<Vec<_>>())
        .unwrap();
    // Each file has 8 passages; file i's passage j points along axis (i + j) % DIM, a little
    // towards axis 0 so every passage of every file is a candidate for a query along 0.
    for (i, n) in names.iter().enumerate() {
        let parts: Vec<PassageVector> = (0..8)
            .map(|j| {
                let mut v = axis((i + j) % DIM);
                v[0] += 0.1 * (i as f32 + 1.0) / 12.0;
                PassageVector {
                    lines: [10 * j as u32 + 1, 10 * j as u32 + 9],
                    vector: v,
                }
            })
            .collect();
        assert!(ix.set_vectors(&p(n), Level::Content, "v1", &parts).unwrap());
    }
    assert!(
        ix.verify().unwrap().is_empty(),
        "{:?}",
        ix.verify().unwrap()
    );
    // Along axis 5: file i's passage 5 - i, for i ≤ 5 (file 5's first passage, file 0's sixth);
    // a passage after the opening one counts `opening_margin` less, so file 5 comes first.
    let margin = vikingfs::index::passages::opening_margin("f.rs");
    let hits = ix.search(&axis(5), 6, None).unwrap();
    let uris: Vec<&str> = hits.iter().map(|h| h.uri.as_str()).collect();
    assert_eq!(hits.len(), 6, "{uris:?}");
    let mut distinct = uris.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 6, "k different records: {uris:?}");
    for h in &hits {
        let i: usize = h.uri.as_str()[11..13].parse().unwrap();
        assert!(i <= 5, "{uris:?}");
        let j = 5 - i;
        assert_eq!(h.evidence.passage, Some(j as u32), "{}", h.uri);
        assert_eq!(
            h.evidence.lines,
            Some([10 * j as u32 + 1, 10 * j as u32 + 9]),
            "{}",
            h.uri
        );
        let want = if j == 0 { 1.0 } else { 1.0 - margin };
        assert!((h.score - want).abs() < 0.01, "{} {}", h.uri, h.score);
    }
    assert_eq!(hits[0].uri.as_str(), names[5], "{uris:?}");
    // Fewer passages replace the eight: the old ones no longer match.
    let one = [PassageVector {
        lines: [1, 3],
        vector: axis(20),
    }];
    assert!(ix
        .set_vectors(&p(&names[0]), Level::Content, "v1", &one)
        .unwrap());
    assert!(
        ix.verify().unwrap().is_empty(),
        "{:?}",
        ix.verify().unwrap()
    );
    let hits = ix.search(&axis(5), 6, None).unwrap();
    let mut near: Vec<&str> = hits
        .iter()
        .filter(|h| h.score > 0.5)
        .map(|h| h.uri.as_str())
        .collect();
    near.sort();
    assert_eq!(
        near,
        names[1..6].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let top = &ix.search(&axis(20), 1, None).unwrap()[0];
    assert_eq!(
        (top.uri.as_str(), top.evidence.lines),
        (names[0].as_str(), Some([1, 3]))
    );
    // Another version's vectors are refused; a delete frees every place.
    assert!(!ix
        .set_vectors(&p(&names[1]), Level::Content, "v0", &one)
        .unwrap());
    assert_eq!(ix.delete_prefix(&p("resources")).unwrap(), 12);
    assert!(
        ix.verify().unwrap().is_empty(),
        "{:?}",
        ix.verify().unwrap()
    );
    assert!(ix.search(&axis(5), 6, None).unwrap().is_empty());
}

/// A store of schema version 1 (vectors in `vi_records.vec`, no `vi_parts`) is taken to
/// version 2 on open: each vector becomes its record's one passage, searchable as before.
#[test]
fn a_version_1_store_on_the_server_is_upgraded_in_place() {
    let server = PgServer::start();
    let axis = |i: usize| -> Vec<f32> { (0..DIM).map(|d| f32::from(d == i)).collect() };
    let ix = on_server(&server);
    let recs: Vec<Record> = (0..3)
        .map(|i| Record {
            uri: p(&format!("resources/f{i}.md")),
            level: Level::Content,
            text: format!("text {i}"),
            vector: Some(axis(i)),
            snippet: String::new(),
            source_version: "v1".into(),
            partial: false,
        })
        .collect();
    ix.upsert_many(&recs).unwrap();
    drop(ix);
    // Back to version 1's shape: no parts table, the graph index on the records.
    let mut c = postgres::Client::connect(&server.dsn(), postgres::NoTls).unwrap();
    c.batch_execute(
        "DROP TABLE vi_parts;
         CREATE INDEX vi_records_hnsw ON vi_records USING hnsw (vec vector_ip_ops);
         UPDATE vikingfs_schema SET version = 1 WHERE store = 'index';",
    )
    .unwrap();
    let ix = on_server(&server);
    let version: i64 = c
        .query_one(
            "SELECT version FROM vikingfs_schema WHERE store = 'index'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, 2);
    let parts: i64 = c
        .query_one("SELECT count(*) FROM vi_parts", &[])
        .unwrap()
        .get(0);
    assert_eq!(parts, 3);
    // The parts have the records' vector size and the graph index the records had.
    let graphs: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'vi_parts_hnsw'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(graphs, 1);
    let top = &ix.search(&axis(1), 1, None).unwrap()[0];
    assert_eq!(top.uri.as_str(), "resources/f1.md");
    assert!(top.score > 0.99, "{}", top.score);
    assert!(
        ix.verify().unwrap().is_empty(),
        "{:?}",
        ix.verify().unwrap()
    );
}

/// Past the records an exact dense search covers, the server's graph index answers, with the
/// record's best passage and within a subtree.
#[test]
fn a_large_index_on_the_server_searches_its_graph() {
    let server = PgServer::start();
    let ix = on_server(&server);
    let mut rng = StdRng::seed_from_u64(11);
    let recs: Vec<Record> = (0..4_300)
        .map(|i| Record {
            uri: p(&format!("resources/d{}/f{i}.md", i % 2)),
            level: Level::Content,
            text: format!("text {i}"),
            vector: Some((0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect()),
            snippet: String::new(),
            source_version: "v1".into(),
            partial: false,
        })
        .collect();
    for chunk in recs.chunks(500) {
        ix.upsert_many(chunk).unwrap();
    }
    for (i, under) in [(17, None), (1_234, Some(p("resources")))] {
        let want = recs[i].vector.clone().unwrap();
        let hits = ix.search(&want, 5, under.as_ref()).unwrap();
        assert_eq!(hits.len(), 5);
        assert_eq!(hits[0].uri, recs[i].uri, "{under:?}");
        assert!(hits[0].score > 0.99, "{}", hits[0].score);
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    }
}
