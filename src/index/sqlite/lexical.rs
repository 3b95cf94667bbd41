//! Lexical search: BM25 over the `lex` FTS5 table, terms made by [`crate::index::text`];
//! and the document frequencies of words (how many files use each), for weighting summary
//! keywords.

use std::collections::HashMap;

use rusqlite::params;

use super::{under_params, SqliteEngine, UNDER_SQL};
use crate::index::analyze::{Analyzer, DocCounter};
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
    /// rows holding each index term (one query for all), less `lex_sum`'s (the summaries').
    /// A subtree excluded is counted apart by tokenizing its records' terms again
    /// ([`DocCounter`]) and taken off; when it holds more than half the files, the files
    /// outside it are counted instead. So a summary costs the postings of its candidate
    /// words, read without a join, plus the text of the smaller side of its subtree — not a
    /// MATCH and a record lookup per posting of every candidate.
    pub(super) fn doc_freq(
        &self,
        terms: &[&str],
        excluding: Option<&VPath>,
    ) -> Result<(u64, Vec<u64>), IndexError> {
        let scratch = |e| IndexError::Sqlite {
            path: ":memory:".into(),
            source: e,
        };
        let tokens = Analyzer::new()
            .and_then(|mut a| a.word_tokens(terms))
            .map_err(scratch)?;
        let mut wanted: Vec<&str> = tokens.iter().flatten().map(String::as_str).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let list = serde_json::to_string(&wanted).expect("strings serialise");
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
            let mut q = tx
                .prepare_cached(&format!(
                    "SELECT term, doc FROM temp.{vocab}
                      WHERE term IN (SELECT value FROM json_each(?1))"
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
            let [p1, p2, p3] = under_params(dir);
            let inside: i64 = tx
                .prepare_cached(&format!(
                    "SELECT count(*) FROM records WHERE {UNDER_SQL} AND level = {}",
                    Level::Content as i64
                ))
                .and_then(|mut s| s.query_row(params![p1, p2, p3], |r| r.get(0)))
                .map_err(|e| self.sql(e))?;
            docs = files - inside;
            let smaller_inside = inside * 2 <= files;
            let side = if smaller_inside {
                UNDER_SQL.to_string()
            } else {
                format!("NOT ({UNDER_SQL})")
            };
            let mut counter = DocCounter::new().map_err(scratch)?;
            let mut q = tx
                .prepare_cached(&format!(
                    "SELECT t.name, t.body FROM records JOIN lex_text t ON t.id = records.id
                      WHERE {side} AND level = {}",
                    Level::Content as i64
                ))
                .map_err(|e| self.sql(e))?;
            let mut rows = q.query(params![p1, p2, p3]).map_err(|e| self.sql(e))?;
            while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
                let name = r
                    .get_ref(0)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(|e| self.sql(e))?;
                let body = r
                    .get_ref(1)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(|e| self.sql(e))?;
                counter.add(name, body).map_err(scratch)?;
            }
            let side_counts = counter.counts(&wanted).map_err(scratch)?;
            if smaller_inside {
                for (term, n) in side_counts {
                    *count.entry(term).or_default() -= n as i64;
                }
            } else {
                count = side_counts
                    .into_iter()
                    .map(|(t, n)| (t, n as i64))
                    .collect();
            }
        }
        // A word counts the files holding its rarest index term (exact for a word of one
        // term, the most; `LockGuard` holds three).
        let out = tokens
            .iter()
            .map(|t| {
                t.iter()
                    .map(|t| count.get(t).copied().unwrap_or(0).max(0) as u64)
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        Ok((docs.max(0) as u64, out))
    }
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
