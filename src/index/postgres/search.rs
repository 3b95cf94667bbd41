//! Reads of the server's index that rank: the dense top-k (HNSW, or exact in a small
//! subtree), BM25 over the postings as FTS5 computes it, and document frequencies.

use super::{under_params, under_sql, PgIndex, Tx, EXACT_MAX};
use crate::index::engine::{Result, NAME_WEIGHT};
use crate::index::{passages, text, Evidence, Hit, Level};
use crate::uri::VPath;

impl PgIndex {
    /// The `k` records nearest `unit`, each by its best passage: passages are fetched a few
    /// per wanted record, nearest first, and fetched deeper while too few records are among
    /// them.
    pub(super) fn dense(&self, unit: &[f32], k: usize, under: Option<&VPath>) -> Result<Vec<Hit>> {
        let mut fetch = k.max(1) * 4;
        loop {
            let rows = self.nearest_parts(unit, fetch, under)?;
            let exhausted = rows.len() < fetch;
            let mut seen = std::collections::HashSet::new();
            // Each record's best passage (the rows come nearest first).
            let best: Vec<&postgres::Row> = rows
                .iter()
                .filter(|r| seen.insert(r.get::<_, i64>(8)))
                .collect();
            let openings = self.openings(unit, &best)?;
            let mut hits = Vec::new();
            for r in best {
                let top = -r.get::<_, f32>(4);
                let uri: &str = r.get(0);
                let name = uri.rsplit('/').next().unwrap_or(uri);
                // A passage after the opening counts less (`passages::record_cosine`).
                let ord = r.get::<_, i32>(5) as u32;
                let later = if ord == 0 {
                    top
                } else {
                    top - passages::opening_margin(name)
                };
                let (passage, cosine, lines) = match openings.get(&r.get::<_, i64>(8)) {
                    Some(&(c, lines)) if c >= later => (0, c, lines),
                    _ => (
                        ord,
                        later,
                        [r.get::<_, i32>(6) as u32, r.get::<_, i32>(7) as u32],
                    ),
                };
                hits.push(self.hit(
                    r,
                    cosine,
                    Evidence {
                        cosine: Some(cosine),
                        passage: Some(passage),
                        lines: (lines[0] > 0).then_some(lines),
                        ..Evidence::default()
                    },
                )?);
            }
            if hits.len() >= k || exhausted {
                hits.sort_by(Hit::best_first);
                hits.truncate(k);
                return Ok(hits);
            }
            fetch *= 4;
        }
    }

    /// The cosine with `unit` of each of `records`' opening passage, and its lines, by record id.
    fn openings(
        &self,
        unit: &[f32],
        records: &[&postgres::Row],
    ) -> Result<std::collections::HashMap<i64, (f32, [u32; 2])>> {
        let ids: Vec<i64> = records.iter().map(|r| r.get(8)).collect();
        let q = pgvector::Vector::from(unit.to_vec());
        let rows = self.read(|s| {
            s.all(
                "SELECT rid, (vec <#> $1)::float4, first_line, last_line FROM vi_parts
                  WHERE ord = 0 AND rid = ANY($2)",
                &[&q, &ids],
            )
            .map_err(self.e())
        })?;
        Ok(rows
            .iter()
            .map(|r| {
                let lines = [r.get::<_, i32>(2) as u32, r.get::<_, i32>(3) as u32];
                (r.get(0), (-r.get::<_, f32>(1), lines))
            })
            .collect())
    }

    /// The `n` passages nearest `unit` (under `under`), nearest first, with their records.
    fn nearest_parts(
        &self,
        unit: &[f32],
        n: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<postgres::Row>> {
        const COLUMNS: &str = "r.uri, r.level, r.version, r.snippet, (p.vec <#> $1)::float4,
                               p.ord, p.first_line, p.last_line, p.rid
                          FROM vi_parts p JOIN vi_records r ON r.id = p.rid";
        let q = pgvector::Vector::from(unit.to_vec());
        let n = n as i64;
        // The graph search looks at this many candidates: enough that the top n are found.
        let ef = (n * 2).clamp(100, 1000).to_string();
        let prefix = under.filter(|p| !p.is_root());
        let [a, b, c] = prefix.map(under_params).unwrap_or_default();
        // Inside the subtree, its bounds at `$at`..; anywhere without one.
        let inside = |at: usize| match prefix {
            Some(_) => under_sql(at),
            None => "true".to_string(),
        };
        type Param<'a> = &'a (dyn postgres::types::ToSql + Sync);
        let bounds: Vec<Param> = match prefix {
            Some(_) => vec![&a, &b, &c],
            None => Vec::new(),
        };
        let params: Vec<Param> = [&q as Param, &n]
            .into_iter()
            .chain(bounds.clone())
            .collect();
        self.read(|s| {
            let e = self.e();
            let small: i64 = s
                .one(
                    &format!(
                        "SELECT count(*) FROM (SELECT 1 FROM vi_records r WHERE {} LIMIT {})",
                        inside(1),
                        EXACT_MAX + 1
                    ),
                    &bounds,
                )
                .map_err(&e)?
                .get(0);
            let order = if small <= EXACT_MAX {
                // A few records: every vector among them, exactly (`+ 0` keeps the planner off
                // the graph index, which would filter after the fact and, on a small graph
                // just rewritten, can miss the nearest).
                "(p.vec <#> $1) + 0"
            } else {
                // Many: the graph, scanned on until enough results fall inside the subtree.
                s.one("SELECT set_config('hnsw.ef_search', $1, true)", &[&ef])
                    .map_err(&e)?;
                s.one(
                    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                    &[],
                )
                .map_err(&e)?;
                "p.vec <#> $1"
            };
            s.all(
                &format!(
                    "SELECT {COLUMNS} WHERE {} ORDER BY {order} LIMIT $2",
                    inside(3)
                ),
                &params,
            )
            .map_err(&e)
        })
    }

    pub(super) fn lexical(
        &self,
        terms: &[String],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>> {
        let phrases = self.query_phrases(terms)?;
        if phrases.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.read(|s| {
            let (qterms, qidx) = self.expand(s, &phrases)?;
            let filter = match under {
                Some(p) if !p.is_root() => format!("WHERE {}", under_sql(4)),
                _ => String::new(),
            };
            let [a, b, c] = match under {
                Some(p) if !p.is_root() => under_params(p),
                _ => Default::default(),
            };
            let sql = format!(
                "WITH q AS (SELECT * FROM unnest($1::text[], $2::int4[]) AS q(term, i)),
                 h AS (SELECT p.rid, q.i, sum({NAME_WEIGHT} * p.name_tf + p.body_tf)::float8 AS f,
                              min(p.len)::float8 AS dl
                         FROM q JOIN vi_postings p ON p.term = q.term GROUP BY p.rid, q.i),
                 n AS (SELECT i, count(*)::float8 AS hits FROM h GROUP BY i),
                 s AS (SELECT greatest(sum(docs), 1)::float8 AS docs,
                              greatest(sum(tokens), 1)::float8 AS tokens FROM vi_stats),
                 scored AS (
                   SELECT h.rid,
                          sum(greatest(ln((s.docs - n.hits + 0.5) / (n.hits + 0.5)), 1e-6)
                              * h.f * 2.2 / (h.f + 1.2 * (0.25 + 0.75 * h.dl * s.docs / s.tokens)))
                              AS score
                     FROM h JOIN n USING (i) CROSS JOIN s GROUP BY h.rid)
                 SELECT r.uri, r.level, r.version, r.snippet, scored.score::float4
                   FROM scored JOIN vi_records r ON r.id = scored.rid {filter}
                  ORDER BY scored.score DESC, r.id LIMIT $3"
            );
            let k = k as i64;
            if filter.is_empty() {
                s.all(&sql, &[&qterms, &qidx, &k])
            } else {
                s.all(&sql, &[&qterms, &qidx, &k, &a, &b, &c])
            }
            .map_err(self.e())
        })?;
        rows.iter()
            .enumerate()
            .map(|(rank, r)| {
                let bm25 = r.get::<_, f32>(4);
                self.hit(
                    r,
                    bm25,
                    Evidence {
                        lexical_rank: Some(rank + 1),
                        bm25: Some(bm25),
                        ..Evidence::default()
                    },
                )
            })
            .collect()
    }

    /// See [`crate::index::Index::doc_freq`]: every index term's files in one query (its
    /// postings joined to their records, counted per term), a word's count its rarest term's.
    pub(super) fn frequencies(
        &self,
        terms: &[&str],
        excluding: Option<&VPath>,
    ) -> Result<(u64, Vec<u64>)> {
        let tokens = self.analyzer.lock().word_tokens(terms).map_err(|source| {
            crate::index::IndexError::Sqlite {
                path: ":memory:".into(),
                source,
            }
        })?;
        let mut wanted: Vec<String> = tokens.iter().flatten().cloned().collect();
        wanted.sort_unstable();
        wanted.dedup();
        let [a, b, c] = match excluding {
            Some(p) => under_params(p),
            None => Default::default(),
        };
        // Outside `excluding`, with its three bounds at `$at`...
        let outside = |at: usize| match excluding {
            Some(_) => format!("AND NOT ({})", under_sql(at)),
            None => String::new(),
        };
        let content = Level::Content as i16;
        let docs_sql = format!(
            "SELECT count(*) FROM vi_records r WHERE level = {content} {}",
            outside(1)
        );
        let df_sql = format!(
            "SELECT p.term, count(*) FROM vi_postings p JOIN vi_records r ON r.id = p.rid
              WHERE p.term = ANY($1) AND r.level = {content} {}
              GROUP BY p.term",
            outside(2)
        );
        self.read(|s| {
            let e = self.e();
            let docs: i64 = match excluding {
                Some(_) => s.one(&docs_sql, &[&a, &b, &c]),
                None => s.one(&docs_sql, &[]),
            }
            .map_err(&e)?
            .get(0);
            let rows = match excluding {
                Some(_) => s.all(&df_sql, &[&wanted, &a, &b, &c]),
                None => s.all(&df_sql, &[&wanted]),
            }
            .map_err(&e)?;
            let count: std::collections::HashMap<String, i64> =
                rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let out = tokens
                .iter()
                .map(|t| {
                    t.iter()
                        .map(|t| count.get(t).copied().unwrap_or(0) as u64)
                        .min()
                        .unwrap_or(0)
                })
                .collect();
            Ok((docs as u64, out))
        })
    }
}

/// One OR'ed part of a query: the index term it searches for, and whether any term starting
/// with it matches (a lone CJK character, as FTS5's `"中"*`).
struct Phrase {
    term: String,
    prefix: bool,
}

impl PgIndex {
    /// The query's terms as index terms (stemmed and folded as the postings are).
    fn query_phrases(&self, terms: &[String]) -> Result<Vec<Phrase>> {
        let mut out: Vec<Phrase> = Vec::new();
        for t in terms {
            let prefix = text::is_lone_cjk(t);
            // A term FTS5 would read as several tokens is matched by its first.
            let Some(term) = self.tokens(t)?.into_iter().next() else {
                continue;
            };
            // Two query terms of one stem stay two phrases, each scored, as in FTS5.
            out.push(Phrase { term, prefix });
        }
        Ok(out)
    }

    /// The postings' terms each phrase matches, with the phrase's index (1-based).
    fn expand(
        &self,
        s: &mut Tx<'_, '_, '_>,
        phrases: &[Phrase],
    ) -> Result<(Vec<String>, Vec<i32>)> {
        let mut terms = Vec::new();
        let mut idx = Vec::new();
        for (i, p) in phrases.iter().enumerate() {
            if !p.prefix {
                terms.push(p.term.clone());
                idx.push(i as i32 + 1);
                continue;
            }
            let upper = format!("{}\u{10FFFF}", p.term);
            let rows = s
                .all(
                    "SELECT DISTINCT term FROM vi_postings WHERE term >= $1 AND term < $2",
                    &[&p.term, &upper],
                )
                .map_err(self.e())?;
            for r in rows {
                terms.push(r.get(0));
                idx.push(i as i32 + 1);
            }
        }
        Ok((terms, idx))
    }
}
