//! Lexical search: BM25 over the `lex` FTS5 table, terms made by [`crate::index::text`];
//! and the document frequencies of words (how many files use each), for weighting summary
//! keywords.

use rusqlite::params;

use super::{under_params, SqliteEngine, UNDER_SQL};
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
        let conn = self.conn.lock();
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

    /// See [`crate::index::Index::doc_freq`]: each term as a phrase of its index terms.
    pub(super) fn doc_freq(
        &self,
        terms: &[&str],
        excluding: Option<&VPath>,
    ) -> Result<(u64, Vec<u64>), IndexError> {
        let conn = self.conn.lock();
        let outside = match excluding {
            Some(_) => format!("AND NOT ({UNDER_SQL})"),
            None => String::new(),
        };
        let [p1, p2, p3] = match excluding {
            Some(p) => under_params(p),
            None => Default::default(),
        };
        let count_sql = format!(
            "SELECT count(*) FROM records WHERE level = {} {outside}",
            Level::Content as i64
        );
        let docs: i64 = match excluding {
            Some(_) => conn
                .prepare_cached(&count_sql)
                .and_then(|mut s| s.query_row(params![p1, p2, p3], |r| r.get(0))),
            None => conn
                .prepare_cached(&count_sql)
                .and_then(|mut s| s.query_row([], |r| r.get(0))),
        }
        .map_err(|e| self.sql(e))?;
        let df_sql = format!(
            "SELECT count(*) FROM lex JOIN records r ON r.id = lex.rowid
              WHERE lex MATCH ?4 AND r.level = {} {outside}",
            Level::Content as i64
        );
        let mut stmt = conn.prepare_cached(&df_sql).map_err(|e| self.sql(e))?;
        let mut out = Vec::with_capacity(terms.len());
        for t in terms {
            let doc = text::document(t);
            if doc.is_empty() {
                out.push(0);
                continue;
            }
            // The term's index terms as one phrase (`LockGuard` -> "lockguard lock guard", as
            // its documents hold it). Index terms are letters and digits: nothing to escape.
            let expr = format!("\"{doc}\"");
            let n: i64 = stmt
                .query_row(params![p1, p2, p3, expr], |r| r.get(0))
                .map_err(|e| self.sql(e))?;
            out.push(n as u64);
        }
        Ok((docs as u64, out))
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
    }
}
