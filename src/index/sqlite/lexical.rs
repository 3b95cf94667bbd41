//! Lexical search: BM25 over the `lex` FTS5 table, terms made by [`crate::index::text`];
//! and the document frequencies of words (how many files use each), for weighting summary
//! keywords.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::params;

use super::{under_params, SqliteEngine, UNDER_SQL};
use crate::index::analyze::Analyzer;
use crate::index::engine::NAME_WEIGHT;
use crate::index::{text, Evidence, Hit, IndexError, Level};
use crate::uri::VPath;

impl SqliteEngine {
    /// The `k` records that best match the OR of `terms` by BM25 (score: the BM25 value,
    /// larger is better), only at or below `under` when given.
    pub(super) fn search_lexical(
        &self,
        terms: &[String],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        let Some(expr) = text::match_expr_of(terms) else {
            return Ok(Vec::new());
        };
        let conn = self.reader()?;
        let filter = match under {
            Some(p) if !p.is_root() => format!("AND {UNDER_SQL}"),
            _ => String::new(),
        };
        // bm25() is smaller for better matches (its values are negative).
        let sql = format!(
            "SELECT r.uri, r.level, r.version, r.snippet, bm25(lex, {NAME_WEIGHT}, 1.0) AS s
               FROM lex JOIN records r ON r.id = lex.rowid
              WHERE lex MATCH ?4 {filter}
              ORDER BY s LIMIT ?5"
        );
        let [p1, p2, p3] = match under {
            Some(p) if !p.is_root() => under_params(p),
            _ => Default::default(),
        };
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![p1, p2, p3, expr, k as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, f64>(4)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut hits = Vec::new();
        for (rank, row) in rows.enumerate() {
            let (uri, level, version, snippet, s) = row.map_err(|e| self.sql(e))?;
            let bm25 = (-s) as f32;
            hits.push(Hit {
                uri: self.vpath(&uri)?,
                level: self.level(level)?,
                score: bm25,
                snippet,
                source_version: version,
                evidence: Evidence {
                    lexical_rank: Some(rank + 1),
                    bm25: Some(bm25),
                    ..Evidence::default()
                },
            });
        }
        Ok(hits)
    }

    /// See [`crate::index::Index::doc_freq`], from FTS5's own vocabulary: `lex`'s count of
    /// rows holding each index term, less `lex_sum`'s (the summaries'), for all the words in
    /// one query. A subtree excluded is counted apart, by a search for each term restricted
    /// to the subtree's record ids ([`SqliteEngine::count_among`]), and taken off; when it
    /// holds more than half the files, the files outside it are counted so instead. So a
    /// summary reads its words' postings among the smaller side of its subtree, not every
    /// posting of every word with a record lookup each.
    pub(super) fn doc_freq(
        &self,
        terms: &[&str],
        excluding: Option<&VPath>,
    ) -> Result<(u64, Vec<u64>), IndexError> {
        let words = {
            let mut a = self.analyzer.lock();
            match &mut *a {
                Some(a) => a.word_terms(terms),
                None => Analyzer::new().and_then(|new| a.insert(new).word_terms(terms)),
            }
        }
        .map_err(|source| IndexError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        // Each token with a term that searches for it.
        let wanted: BTreeMap<&str, &str> = words
            .iter()
            .flatten()
            .map(|(term, token)| (token.as_str(), term.as_str()))
            .collect();
        let list =
            serde_json::to_string(&wanted.keys().collect::<Vec<_>>()).expect("strings serialise");
        let conn = self.reader()?;
        // One snapshot for the totals and the subtree.
        let tx = conn.unchecked_transaction().map_err(|e| self.sql(e))?;
        let files: i64 = tx
            .query_row(
                "SELECT (SELECT count(*) FROM records) - (SELECT count(*) FROM lex_sum_docsize)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))?;
        let mut count: HashMap<String, i64> = HashMap::with_capacity(wanted.len());
        for (vocab, sign) in [("lex_terms", 1), ("lex_sum_terms", -1)] {
            // The list outside, the vocabulary looked up by term inside (not scanned).
            let mut q = tx
                .prepare_cached(&format!(
                    "SELECT v.term, v.doc FROM json_each(?1) AS w
                      CROSS JOIN temp.{vocab} AS v WHERE v.term = w.value"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = q
                .query_map([&list], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })
                .map_err(|e| self.sql(e))?;
            for row in rows {
                let (term, n) = row.map_err(|e| self.sql(e))?;
                *count.entry(term).or_default() += sign * n;
            }
        }
        let mut docs = files;
        if let Some(dir) = excluding {
            let ids = |cond: &str| -> Result<Vec<i64>, IndexError> {
                let mut q = tx
                    .prepare_cached(&format!(
                        "SELECT id FROM records WHERE {cond} AND level = {}",
                        Level::Content as i64
                    ))
                    .map_err(|e| self.sql(e))?;
                let rows = q
                    .query_map(under_params(dir), |r| r.get(0))
                    .map_err(|e| self.sql(e))?;
                rows.collect::<rusqlite::Result<Vec<i64>>>()
                    .map_err(|e| self.sql(e))
            };
            let inside = ids(UNDER_SQL)?;
            docs = files - inside.len() as i64;
            if inside.len() as i64 * 2 <= files {
                for (token, n) in self.count_among(&tx, &wanted, inside)? {
                    *count.entry(token).or_default() -= n;
                }
            } else {
                let outside = ids(&format!("NOT ({UNDER_SQL})"))?;
                count = self.count_among(&tx, &wanted, outside)?;
            }
        }
        // A word counts the files holding its rarest index term (exact for a word of one
        // term, the most; `LockGuard` holds three).
        let out = words
            .iter()
            .map(|w| {
                w.iter()
                    .map(|(_, t)| count.get(t).copied().unwrap_or(0).max(0) as u64)
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        Ok((docs.max(0) as u64, out))
    }

    /// How many of the records `ids` hold each token of `wanted` (with the term searched for
    /// to find it): an FTS5 search per token, restricted to a few runs of ids (rowid ranges,
    /// which FTS5 seeks to), each row found counted when it is one of `ids`.
    fn count_among(
        &self,
        tx: &rusqlite::Transaction<'_>,
        wanted: &BTreeMap<&str, &str>,
        mut ids: Vec<i64>,
    ) -> Result<HashMap<String, i64>, IndexError> {
        let mut out = HashMap::with_capacity(wanted.len());
        if ids.is_empty() {
            return Ok(out);
        }
        ids.sort_unstable();
        let runs = runs_of(&ids, MAX_RUNS);
        let ids: HashSet<i64> = ids.into_iter().collect();
        let mut q = tx
            .prepare_cached("SELECT rowid FROM lex WHERE lex MATCH ?1 AND rowid BETWEEN ?2 AND ?3")
            .map_err(|e| self.sql(e))?;
        for (&token, &term) in wanted {
            // A term of a document is letters and digits: nothing to escape.
            let expr = format!("\"{term}\"");
            let mut n = 0;
            for &(lo, hi) in &runs {
                let mut rows = q.query(params![expr, lo, hi]).map_err(|e| self.sql(e))?;
                while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
                    if ids.contains(&r.get::<_, i64>(0).map_err(|e| self.sql(e))?) {
                        n += 1;
                    }
                }
            }
            out.insert(token.to_string(), n);
        }
        Ok(out)
    }
}

/// At most this many rowid ranges a subtree's records are searched in.
const MAX_RUNS: usize = 16;

/// Sorted `ids` as at most `max` ranges covering them all, cut at the widest gaps.
fn runs_of(ids: &[i64], max: usize) -> Vec<(i64, i64)> {
    let mut gaps: Vec<(i64, usize)> = ids
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] - w[0] > 1)
        .map(|(i, w)| (w[1] - w[0], i))
        .collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    gaps.truncate(max.saturating_sub(1));
    let mut cuts: Vec<usize> = gaps.into_iter().map(|(_, i)| i).collect();
    cuts.sort_unstable();
    let mut runs = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for c in cuts {
        runs.push((ids[start], ids[c]));
        start = c + 1;
    }
    runs.push((ids[start], ids[ids.len() - 1]));
    runs
}

#[cfg(test)]
mod tests {
    use crate::index::{Index, Level, Record};
    use crate::uri::VPath;

    fn rec(uri: &str, level: Level, text: &str) -> Record {
        Record {
            uri: VPath::from_rel(uri).unwrap(),
            level,
            text: text.to_string(),
            vector: None,
            snippet: String::new(),
            source_version: "v1".into(),
            partial: false,
        }
    }

    /// A search and a summary's document frequencies answer while another thread holds the
    /// index's write connection in an open write transaction (a long batch of records): they
    /// read on connections of their own, and see the last commit, not the batch.
    #[test]
    fn reads_answer_while_a_write_transaction_is_open() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.db");
        let ix = Index::open_lexical(&path).unwrap();
        ix.upsert(&rec("resources/a.md", Level::Content, "marigold ledger"))
            .unwrap();
        drop(ix);
        let eng = std::sync::Arc::new(super::SqliteEngine::open(&path).unwrap());
        let (held, wait_held) = mpsc::channel();
        let (release, wait_release) = mpsc::channel::<()>();
        let writer = {
            let eng = eng.clone();
            std::thread::spawn(move || {
                let mut conn = eng.conn.lock();
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                tx.execute(
                    "INSERT INTO records(uri, level, version, snippet) \
                     VALUES ('resources/b.md', 2, 'v', '')",
                    [],
                )
                .unwrap();
                held.send(()).unwrap();
                // Held until the reads are done (or 10 s, were they to wait for it).
                let _ = wait_release.recv_timeout(Duration::from_secs(10));
                tx.commit().unwrap();
            })
        };
        wait_held.recv().unwrap();
        let start = Instant::now();
        let hits = eng
            .search_lexical(&["marigold".to_string()], 10, None)
            .unwrap();
        let (docs, df) = eng.doc_freq(&["ledger"], None).unwrap();
        let took = start.elapsed();
        release.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(
            (docs, df),
            (1, vec![1]),
            "the last commit, not the open batch"
        );
        assert!(
            took < Duration::from_secs(5),
            "the reads waited for the write: {took:?}"
        );
    }

    #[test]
    fn runs_cut_at_the_widest_gaps() {
        assert_eq!(super::runs_of(&[5], 4), [(5, 5)]);
        assert_eq!(
            super::runs_of(&[1, 2, 3, 50, 51, 90], 16),
            [(1, 3), (50, 51), (90, 90)]
        );
        assert_eq!(
            super::runs_of(&[1, 2, 3, 50, 51, 90], 2),
            [(1, 3), (50, 90)]
        );
        assert_eq!(super::runs_of(&[1, 2, 3, 50, 51, 90], 1), [(1, 90)]);
    }

    #[test]
    fn doc_freq_counts_files_outside_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Index::open_lexical(&dir.path().join("i.db")).unwrap();
        ix.upsert_many(&[
            rec(
                "resources/a/one.md",
                Level::Content,
                "The lock is held. Locks expire.",
            ),
            rec(
                "resources/a/two.md",
                Level::Content,
                "Locking a LockGuard twice.",
            ),
            rec(
                "resources/b/three.md",
                Level::Content,
                "A queue of jobs, no lock.",
            ),
            rec(
                "resources/b/four.md",
                Level::Content,
                "Jobs retry. 全文检索",
            ),
            rec("resources/b/queue.md", Level::Content, "Nothing else here."),
            // Summaries are not files: never counted.
            rec("resources/a", Level::Abstract, "lock lock queue jobs"),
            rec("resources/a", Level::Overview, "lock queue"),
        ])
        .unwrap();
        let terms = [
            "locks",
            "jobs",
            "LockGuard",
            "queue",
            "检索",
            "absent",
            "...",
        ];
        let (docs, df) = ix.doc_freq(&terms, None).unwrap();
        assert_eq!(docs, 5);
        // "locks" is stemmed like the index: lock, locks and locking all count; the name of
        // queue.md counts as a word of its file.
        assert_eq!(df, [3, 2, 1, 2, 1, 0, 0]);
        let a = VPath::from_rel("resources/a").unwrap();
        let (docs, df) = ix.doc_freq(&terms, Some(&a)).unwrap();
        assert_eq!(docs, 3);
        assert_eq!(df, [1, 2, 0, 2, 1, 0, 0]);
        let (docs, df) = ix.doc_freq(&terms, Some(&VPath::root())).unwrap();
        assert_eq!((docs, df), (0, vec![0; terms.len()]));
        // `resources/a` is a component: `resources/ab` is outside it.
        ix.upsert(&rec("resources/ab/x.md", Level::Content, "lock"))
            .unwrap();
        let (docs, df) = ix.doc_freq(&["lock"], Some(&a)).unwrap();
        assert_eq!((docs, df), (4, vec![2]));

        // A subtree holding most files: the files outside it are the ones counted.
        ix.upsert(&rec("agent/m.md", Level::Content, "lock jobs, LockGuard"))
            .unwrap();
        let res = VPath::from_rel("resources").unwrap();
        let (docs, df) = ix.doc_freq(&terms, Some(&res)).unwrap();
        assert_eq!((docs, df), (1, vec![1, 1, 1, 0, 0, 0, 0]));
        let (docs, df) = ix.doc_freq(&terms, None).unwrap();
        assert_eq!((docs, df), (7, vec![5, 3, 2, 2, 1, 0, 0]));

        // Summaries rewritten, renamed and deleted never count, and leave the index whole;
        // a file deleted or rewritten no longer counts for what it held.
        for i in 0..5 {
            ix.upsert(&rec(
                "resources/b",
                Level::Abstract,
                &format!("jobs queue lock {i}"),
            ))
            .unwrap();
        }
        // The renamed directory's summaries are made again under its new name.
        let c = VPath::from_rel("resources/c").unwrap();
        ix.rename_prefix(&a, &c).unwrap();
        assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
        let (docs, df) = ix.doc_freq(&terms, None).unwrap();
        assert_eq!((docs, df), (7, vec![5, 3, 2, 2, 1, 0, 0]));
        ix.delete_prefixes(&[&c]).unwrap();
        ix.delete(&VPath::from_rel("resources/b/three.md").unwrap())
            .unwrap();
        ix.upsert(&rec("agent/m.md", Level::Content, "nothing"))
            .unwrap();
        let (docs, df) = ix.doc_freq(&terms, None).unwrap();
        assert_eq!((docs, df), (4, vec![1, 1, 0, 1, 1, 0, 0]));
        assert_eq!(ix.verify().unwrap(), Vec::<String>::new());

        // An index made before `lex_sum` gets it when opened, from its summaries' terms.
        drop(ix);
        let c = rusqlite::Connection::open(dir.path().join("i.db")).unwrap();
        c.execute_batch("DROP TABLE lex_sum").unwrap();
        drop(c);
        let ix = Index::open_lexical(&dir.path().join("i.db")).unwrap();
        assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
        let (docs, df) = ix.doc_freq(&terms, None).unwrap();
        assert_eq!((docs, df), (4, vec![1, 1, 0, 1, 1, 0, 0]));
    }
}
