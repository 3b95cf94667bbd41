//! Lexical search: BM25 over the `lex` FTS5 table, terms made by [`super::text`].

use rusqlite::params;

use super::{text, under_params, Evidence, Hit, Index, IndexError, UNDER_SQL};
use crate::uri::VPath;

/// BM25 weight of a record's name against its text: a query word in a file's name says
/// more about the file than the same word in its body.
const NAME_WEIGHT: f64 = 3.0;

impl Index {
    /// The `k` records that best match `query` by BM25 (score: the BM25 value, larger is
    /// better), only at or below `under` when given. A query without terms matches nothing.
    pub fn search_lexical(
        &self,
        query: &str,
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        let Some(expr) = text::match_expr(query) else {
            return Ok(Vec::new());
        };
        if k == 0 {
            return Ok(Vec::new());
        }
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
}
