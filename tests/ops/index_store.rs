//! The derived index as a library: upsert and versions, deletes and renames by component-wise
//! prefix, model checks, and search results that match a brute-force scan.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vikingfs::index::{
    Index, IndexError, Level, Mode, Record, SearchRequest, Verdict, CHUNK_SLOTS,
};
use vikingfs::uri::VPath;

const DIM: usize = 16;

fn p(s: &str) -> VPath {
    VPath::from_rel(s).unwrap()
}

fn rec(uri: &str, level: Level, vector: Vec<f32>, version: &str) -> Record {
    Record {
        uri: p(uri),
        level,
        text: format!("text of {uri}"),
        vector: Some(vector),
        snippet: format!("snippet of {uri}"),
        source_version: version.into(),
        partial: false,
    }
}

/// A vector pointing mostly along axis `i`.
fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.01; DIM];
    v[i % DIM] = 1.0;
    v
}

fn open(dir: &tempfile::TempDir) -> Index {
    Index::open(&dir.path().join("index.db"), DIM, "test-model").unwrap()
}

fn uris(index: &Index) -> Vec<String> {
    index
        .all_uris()
        .unwrap()
        .into_iter()
        .map(|(u, l)| format!("{}#{}", u.as_str(), l))
        .collect()
}

#[test]
fn upsert_replaces_and_versions_are_per_level() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    let a = p("resources/a.md");
    assert_eq!(ix.version_of(&a, Level::Content).unwrap(), None);
    ix.upsert(&rec("resources/a.md", Level::Content, axis(0), "v1"))
        .unwrap();
    ix.upsert(&rec("resources/a.md", Level::Content, axis(1), "v2"))
        .unwrap();
    ix.upsert(&rec("resources", Level::Abstract, axis(2), "d1"))
        .unwrap();
    assert_eq!(ix.count().unwrap(), 2);
    assert_eq!(
        ix.version_of(&a, Level::Content).unwrap().as_deref(),
        Some("v2")
    );
    assert_eq!(ix.version_of(&a, Level::Overview).unwrap(), None);
    // The replaced vector is the one searched.
    let hits = ix.search(&axis(1), 1, None).unwrap();
    assert_eq!(hits[0].uri, a);
    assert!((hits[0].score - 1.0).abs() < 1e-4, "{}", hits[0].score);
    assert_eq!(hits[0].source_version, "v2");
    assert_eq!(hits[0].snippet, "snippet of resources/a.md");
    // Survives reopening.
    drop(ix);
    let ix = open(&dir);
    assert_eq!(ix.count().unwrap(), 2);
    assert_eq!(
        ix.search(&axis(2), 1, None).unwrap()[0].level,
        Level::Abstract
    );
}

#[test]
fn delete_removes_every_level_of_one_uri_only() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    for (u, l) in [
        ("resources/d", Level::Abstract),
        ("resources/d", Level::Overview),
        ("resources/d/x.md", Level::Content),
    ] {
        ix.upsert(&rec(u, l, axis(3), "v")).unwrap();
    }
    assert_eq!(ix.delete(&p("resources/d")).unwrap(), 2);
    assert_eq!(uris(&ix), ["resources/d/x.md#content"]);
    assert_eq!(ix.delete(&p("resources/d")).unwrap(), 0);
}

#[test]
fn prefixes_are_component_wise() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    let all = [
        "resources/a/b",
        "resources/a/b/c.md",
        "resources/a/b/d/e.md",
        "resources/a/bc",
        "resources/a/bc/f.md",
        "resources/a/b-c.md",
        "resources/a/b.md",
    ];
    for (i, u) in all.iter().enumerate() {
        ix.upsert(&rec(u, Level::Content, axis(i), "v")).unwrap();
    }
    assert_eq!(ix.delete_prefix(&p("resources/a/b")).unwrap(), 3);
    assert_eq!(
        uris(&ix),
        [
            "resources/a/b-c.md#content",
            "resources/a/b.md#content",
            "resources/a/bc#content",
            "resources/a/bc/f.md#content"
        ]
    );
    // Deleted records are gone from search too.
    let hits = ix.search(&axis(1), 10, None).unwrap();
    assert!(
        hits.iter().all(|h| !h.uri.starts_with(&p("resources/a/b"))),
        "{hits:?}"
    );
}

#[test]
fn rename_prefix_moves_the_subtree_and_replaces_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    for (i, (u, l)) in [
        ("resources/a", Level::Overview),
        ("resources/a/x.md", Level::Content),
        ("resources/a/s/y.md", Level::Content),
        ("resources/ab/z.md", Level::Content),
        ("agent/t/x.md", Level::Content),
    ]
    .into_iter()
    .enumerate()
    {
        ix.upsert(&rec(u, l, axis(i), &format!("v{i}"))).unwrap();
    }
    assert_eq!(
        ix.rename_prefix(&p("resources/a"), &p("agent/t")).unwrap(),
        3
    );
    assert_eq!(
        uris(&ix),
        [
            "agent/t#overview",
            "agent/t/s/y.md#content",
            "agent/t/x.md#content",
            "resources/ab/z.md#content"
        ]
    );
    // The moved record kept its vector and version; the replaced one (v4) is gone.
    let x = p("agent/t/x.md");
    assert_eq!(
        ix.version_of(&x, Level::Content).unwrap().as_deref(),
        Some("v1")
    );
    assert_eq!(ix.search(&axis(1), 1, None).unwrap()[0].uri, x);
    assert!(ix
        .search(&axis(4), 5, None)
        .unwrap()
        .iter()
        .all(|h| h.source_version != "v4"));
    // Into its own subtree is refused, onto itself is nothing.
    assert!(matches!(
        ix.rename_prefix(&p("agent/t"), &p("agent/t/s/deeper")),
        Err(IndexError::RenameIntoSelf { .. })
    ));
    assert_eq!(ix.rename_prefix(&p("agent/t"), &p("agent/t")).unwrap(), 0);
    // Moving onto an ancestor's name works however the old and new names interleave; only
    // colliding names are replaced.
    ix.upsert(&rec("agent/t/s/x.md", Level::Content, axis(5), "v5"))
        .unwrap();
    assert_eq!(ix.rename_prefix(&p("agent/t/s"), &p("agent/t")).unwrap(), 2);
    assert_eq!(
        uris(&ix),
        [
            "agent/t#overview",
            "agent/t/x.md#content",
            "agent/t/y.md#content",
            "resources/ab/z.md#content"
        ]
    );
    assert_eq!(
        ix.version_of(&x, Level::Content).unwrap().as_deref(),
        Some("v5")
    );
}

#[test]
fn delete_if_version_spares_a_rebuilt_record() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    let a = p("user/default/memories/m.md");
    ix.upsert(&rec(a.as_str(), Level::Content, axis(0), "old"))
        .unwrap();
    ix.upsert(&rec(a.as_str(), Level::Content, axis(0), "new"))
        .unwrap();
    assert!(!ix.delete_if_version(&a, Level::Content, "old").unwrap());
    assert_eq!(ix.count().unwrap(), 1);
    assert!(!ix.delete_if_version(&a, Level::Abstract, "new").unwrap());
    assert!(ix.delete_if_version(&a, Level::Content, "new").unwrap());
    assert_eq!(ix.count().unwrap(), 0);
}

#[test]
fn another_model_or_dimension_is_refused_or_reset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.db");
    let ix = Index::open(&path, DIM, "model-a").unwrap();
    ix.upsert(&rec("resources/a.md", Level::Content, axis(0), "v"))
        .unwrap();
    drop(ix);
    for (dim, model) in [(DIM, "model-b"), (DIM * 2, "model-a")] {
        match Index::open(&path, dim, model) {
            Err(e @ IndexError::ModelMismatch { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("model-a") && msg.contains("rebuilt"), "{msg}");
            }
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("opened an index built by another model"),
        }
    }
    // Nothing was lost by the refusals.
    assert_eq!(
        Index::open(&path, DIM, "model-a").unwrap().count().unwrap(),
        1
    );
    // The daemon's open drops the other model's vectors only: the record and its terms stay
    // (searchable at once), its vector is made again by the new model.
    let (ix, reset) = Index::open_or_reset(&path, 8, "model-b").unwrap();
    assert!(reset);
    assert_eq!(ix.opened(), vikingfs::index::Opened::VectorsDropped);
    assert_eq!(ix.count().unwrap(), 1);
    let st = ix.stats().unwrap();
    assert_eq!((st.records, st.lexical, st.vectors), (1, 1, 0));
    assert_eq!(
        ix.missing_vectors().unwrap(),
        vec![(p("resources/a.md"), Level::Content)]
    );
    assert_eq!(ix.search_lexical("text", 5, None).unwrap().len(), 1);
    assert!(ix.verify().unwrap().is_empty());
    assert!(matches!(
        ix.upsert(&rec("resources/a.md", Level::Content, axis(0), "v")),
        Err(IndexError::Dimension {
            expected: 8,
            got: DIM
        })
    ));
    assert!(ix.search(&[0.0; 3], 1, None).is_err());
}

#[test]
fn another_format_version_is_refused_or_reset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.db");
    let ix = Index::open(&path, DIM, "m").unwrap();
    ix.upsert(&rec("resources/a.md", Level::Content, axis(0), "v"))
        .unwrap();
    drop(ix);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema'", [])
        .unwrap();
    drop(conn);
    match Index::open(&path, DIM, "m") {
        Err(e @ IndexError::Schema { .. }) => assert!(e.to_string().contains("rebuilt"), "{e}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("opened an index of another format"),
    }
    let (ix, reset) = Index::open_or_reset(&path, DIM, "m").unwrap();
    assert!(reset);
    assert_eq!(ix.count().unwrap(), 0);
    ix.upsert(&rec("resources/a.md", Level::Content, axis(0), "v"))
        .unwrap();
    drop(ix);
    assert_eq!(Index::open(&path, DIM, "m").unwrap().count().unwrap(), 1);
}

#[test]
fn search_matches_brute_force_across_many_chunks_with_slot_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    let mut rng = StdRng::seed_from_u64(7);
    let n = CHUNK_SLOTS * 3 + 17;
    let recs: Vec<Record> = (0..n)
        .map(|i| {
            let v: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect();
            let dirname = i % 5;
            rec(
                &format!("resources/d{dirname}/f{i}.md"),
                Level::Content,
                v,
                "v",
            )
        })
        .collect();
    ix.upsert_many(&recs).unwrap();
    // Free slots in every chunk, then refill some: exercises the slot allocator.
    ix.delete_prefix(&p("resources/d1")).unwrap();
    let mut live: BTreeMap<String, Vec<f32>> = recs
        .iter()
        .filter(|r| !r.uri.as_str().starts_with("resources/d1/"))
        .map(|r| (r.uri.as_str().to_string(), r.vector.clone().unwrap()))
        .collect();
    for r in &recs[..40] {
        let uri = r.uri.as_str().replace("/f", "/g");
        ix.upsert(&Record {
            uri: p(&uri),
            ..r.clone()
        })
        .unwrap();
        live.insert(uri, r.vector.clone().unwrap());
    }
    // One record at a time: each delete patches its chunk in place.
    for r in &recs[100..130] {
        ix.delete(&r.uri).unwrap();
        live.remove(r.uri.as_str());
    }
    assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
    let indexed: Vec<String> = ix
        .all_uris()
        .unwrap()
        .into_iter()
        .map(|(u, _)| u.as_str().to_string())
        .collect();
    assert_eq!(indexed, live.keys().cloned().collect::<Vec<_>>());
    assert_eq!(ix.count().unwrap() as usize, live.len());
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    for _ in 0..20 {
        let q: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut want: Vec<(f32, &str)> = live
            .iter()
            .map(|(u, v)| {
                let dot: f32 = q.iter().zip(v).map(|(a, b)| a * b).sum();
                (dot / norm(&q) / norm(v), u.as_str())
            })
            .collect();
        want.sort_by(|a, b| b.0.total_cmp(&a.0));
        let got = ix.search(&q, 10, None).unwrap();
        let got_uris: Vec<&str> = got.iter().map(|h| h.uri.as_str()).collect();
        let want_uris: Vec<&str> = want[..10].iter().map(|w| w.1).collect();
        assert_eq!(got_uris, want_uris);
        for (g, w) in got.iter().zip(&want) {
            assert!((g.score - w.0).abs() < 1e-4, "{} vs {}", g.score, w.0);
        }
        // `under` restricts to a subtree, component-wise.
        let under = p("resources/d2");
        let got = ix.search(&q, 5, Some(&under)).unwrap();
        let want_under: Vec<&str> = want
            .iter()
            .filter(|w| w.1.starts_with("resources/d2/"))
            .take(5)
            .map(|w| w.1)
            .collect();
        assert_eq!(
            got.iter().map(|h| h.uri.as_str()).collect::<Vec<_>>(),
            want_under
        );
    }
}

/// `Index::find` over the vectors alone, without a floor, with `gone` as the verdict.
fn find_live(
    ix: &Index,
    q: &[f32],
    limit: usize,
    gone: impl Fn(&vikingfs::index::Hit) -> bool,
) -> vikingfs::index::Found {
    let req = SearchRequest {
        text: "",
        vector: Some(q),
        mode: Mode::Semantic,
        limit,
        under: None,
        floor: f32::MIN,
    };
    ix.find(&req, |h| {
        if gone(h) {
            Verdict::Gone
        } else {
            Verdict::Show
        }
    })
    .unwrap()
}

#[test]
fn find_drops_and_deletes_orphans_but_keeps_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let ix = open(&dir);
    // 100 records all close to axis 0, the best first.
    let recs: Vec<Record> = (0..100)
        .map(|i| {
            let mut v = axis(0);
            v[1] = i as f32 * 0.01;
            rec(&format!("resources/f{i:02}.md"), Level::Content, v, "v")
        })
        .collect();
    ix.upsert_many(&recs).unwrap();
    // The 80 best are "gone": more than the first fetch, so the search must go deeper.
    let gone = |h: &vikingfs::index::Hit| h.uri.name() < "f80.md";
    let found = find_live(&ix, &axis(0), 5, gone);
    assert_eq!(found.hits.len(), 5);
    assert!(found.hits.iter().all(|h| !gone(h)), "{:?}", found.hits);
    assert_eq!(found.hits[0].uri.as_str(), "resources/f80.md");
    assert!(found.orphans_removed >= 80 - 5, "{}", found.orphans_removed);
    // Every orphan the search met is out of the index; nothing live was touched.
    let left = ix.all_uris().unwrap();
    assert!(left
        .iter()
        .all(|(u, _)| u.name() >= "f80.md" || !found.hits.iter().any(|h| &h.uri == u)));
    assert_eq!(left.len(), 100 - found.orphans_removed);
    // A second search cleans the rest and still answers.
    let found = find_live(&ix, &axis(0), 50, gone);
    assert_eq!(found.hits.len(), 20);
    assert_eq!(ix.count().unwrap(), 20);
}
