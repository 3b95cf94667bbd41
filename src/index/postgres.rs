//! The index on the PostgreSQL server of `storage.backend = "postgres"`, shared by every host
//! mounting the workspace: records with their vectors (pgvector, an HNSW index for cosine),
//! postings for BM25, and the counts BM25 weighs them by, each write one transaction.
//!
//! Lexical search ranks as the SQLite index's FTS5 table does, by the same formula over the
//! same terms: [`super::analyze`] makes the postings with FTS5's own tokenizer, and the query
//! computes FTS5's `bm25()` (k1 = 1.2, b = 0.75, the name weighted [`NAME_WEIGHT`], a term's
//! IDF from the records holding it among all records, a record's length in tokens against
//! the average) in SQL. Two answers on the two backends then differ only where their ties
//! break, and where a quoted query term is several tokens (FTS5 matches them as a phrase,
//! this backend by the first token).
//!
//! Tables (all `vi_`): `vi_meta`; `vi_records` (uri in byte order, as on SQLite); `vi_postings`
//! (term, record, occurrences in name and text, the record's length); `vi_stats`, the
//! number of records and tokens as sums over a few rows, each writer adding to the row of its
//! connection so that writers on several hosts do not queue behind one row.
//!
//! Invariants: a record's postings are exactly its analysed name and text; `vi_stats` sums to
//! the records' count and lengths; a vector is unit length and of the meta's dimension (the
//! column's type says it once a model claimed the index).

use std::sync::Arc;

use parking_lot::Mutex;
use postgres::types::ToSql;
use postgres::Transaction;

use super::analyze::{Analyzer, Postings};
use super::engine::{Engine, Meta, Reinit, Result, Which, NAME_WEIGHT};
use super::sqlite::under_params;
use super::{text, Evidence, Hit, IndexError, IndexStats, Level, Record};
use crate::pg::{Pg, Session};
use crate::uri::VPath;

const SCHEMA_VERSION: i64 = 1;

/// Rows of `vi_stats`.
const STAT_SHARDS: i32 = 8;

const SCHEMA: &str = r#"
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE vi_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE vi_records (
    id      bigserial PRIMARY KEY,
    uri     text COLLATE "C" NOT NULL,
    level   smallint NOT NULL,
    version text NOT NULL,
    snippet text NOT NULL,
    partial boolean NOT NULL DEFAULT false,
    name_len integer NOT NULL DEFAULT 0,
    len     integer NOT NULL DEFAULT 0,
    vec     vector,
    UNIQUE (uri, level)
);
CREATE INDEX vi_records_novec ON vi_records (id) WHERE vec IS NULL;
CREATE TABLE vi_postings (
    term    text COLLATE "C" NOT NULL,
    rid     bigint NOT NULL REFERENCES vi_records (id) ON DELETE CASCADE,
    name_tf integer NOT NULL,
    body_tf integer NOT NULL,
    len     integer NOT NULL,
    PRIMARY KEY (term, rid)
);
CREATE INDEX vi_postings_rid ON vi_postings (rid);
CREATE TABLE vi_stats (shard integer PRIMARY KEY, docs bigint NOT NULL, tokens bigint NOT NULL);
INSERT INTO vi_stats SELECT g, 0, 0 FROM generate_series(0, 7) g;
"#;

/// Keeps two hosts from re-initialising the index at once.
const INIT_LOCK: i64 = 7424892;

/// "`prefix` itself or below it" on `r.uri`, with the three [`under_params`] bound at `$a`,
/// `$a+1`, `$a+2` (see [`super::sqlite::UNDER_SQL`]).
fn under_sql(a: usize) -> String {
    let (b, c) = (a + 1, a + 2);
    format!("r.uri >= ${a} AND r.uri < ${c} AND (r.uri = ${a} OR r.uri >= ${b})")
}

/// Records under a prefix up to which a dense search is exact (no HNSW).
const EXACT_MAX: i64 = 4096;

pub struct PgIndex {
    pg: Arc<Pg>,
    dim: usize,
    analyzer: Mutex<Analyzer>,
}

/// One transaction's statements, and what it adds to the counts: written to `vi_stats` once,
/// as its last statement, so that a transaction never waits for a record's lock while it
/// holds a row of `vi_stats` (which would let two writers deadlock).
struct Tx<'s, 'c, 'p> {
    s: Session<'c, 'p, Transaction<'s>>,
    docs: i64,
    tokens: i64,
}

impl<'s, 'c, 'p> std::ops::Deref for Tx<'s, 'c, 'p> {
    type Target = Session<'c, 'p, Transaction<'s>>;
    fn deref(&self) -> &Self::Target {
        &self.s
    }
}

impl std::ops::DerefMut for Tx<'_, '_, '_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.s
    }
}

/// A client error as the index's.
fn server(pg: &Pg) -> impl Fn(postgres::Error) -> IndexError + '_ {
    move |e| IndexError::Server(pg.err(e))
}

impl PgIndex {
    /// The index's tables on `pg`, created when missing. A server without pgvector is
    /// [`IndexError::NoVectorExtension`].
    pub fn open(pg: Arc<Pg>) -> Result<PgIndex> {
        let available = pg.read(|s| {
            s.opt(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'",
                &[],
            )
        })?;
        if available.is_none() {
            return Err(IndexError::NoVectorExtension {
                at: pg.location().to_string(),
            });
        }
        pg.migrate("index", SCHEMA_VERSION, SCHEMA)?;
        let analyzer = Analyzer::new().map_err(|source| IndexError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        Ok(PgIndex {
            pg,
            dim: 0,
            analyzer: Mutex::new(analyzer),
        })
    }

    fn e(&self) -> impl Fn(postgres::Error) -> IndexError + '_ {
        server(&self.pg)
    }

    /// Run `f` in one transaction; an error rolls it all back.
    fn write<T>(&self, f: impl FnOnce(&mut Tx<'_, '_, '_>) -> Result<T>) -> Result<T> {
        let mut pc = self.pg.get()?;
        let (client, prep) = pc.parts();
        let mut tx = client.transaction().map_err(self.e())?;
        let mut w = Tx {
            s: Session::new(&mut tx, prep),
            docs: 0,
            tokens: 0,
        };
        let out = f(&mut w)?;
        if w.docs != 0 || w.tokens != 0 {
            let (docs, tokens) = (w.docs, w.tokens);
            w.exec(
                &format!(
                    "UPDATE vi_stats SET docs = docs + $1, tokens = tokens + $2
                      WHERE shard = pg_backend_pid() % {STAT_SHARDS}"
                ),
                &[&docs, &tokens],
            )
            .map_err(self.e())?;
        }
        crate::crash_point!("index.write.before_commit");
        tx.commit().map_err(self.e())?;
        Ok(out)
    }

    /// Run `f` on one snapshot (a read-only repeatable-read transaction).
    fn read<T>(&self, f: impl FnOnce(&mut Tx<'_, '_, '_>) -> Result<T>) -> Result<T> {
        let mut pc = self.pg.get()?;
        let (client, prep) = pc.parts();
        let mut tx = client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(self.e())?;
        let out = f(&mut Tx {
            s: Session::new(&mut tx, prep),
            docs: 0,
            tokens: 0,
        })?;
        tx.commit().map_err(self.e())?;
        Ok(out)
    }

    fn vpath(&self, s: &str) -> Result<VPath> {
        VPath::from_rel(s).map_err(|source| IndexError::CorruptUri {
            at: self.pg.location().to_string(),
            source,
        })
    }

    fn level(&self, v: i16) -> Result<Level> {
        Level::from_i64(v as i64).ok_or_else(|| IndexError::Corrupt {
            at: self.pg.location().to_string(),
            msg: format!("record level {v}"),
        })
    }

    fn postings(&self, docs: &[(&str, &str)]) -> Result<Vec<Postings>> {
        self.analyzer
            .lock()
            .postings(docs)
            .map_err(|source| IndexError::Sqlite {
                path: ":memory:".into(),
                source,
            })
    }

    fn tokens(&self, text: &str) -> Result<Vec<String>> {
        self.analyzer
            .lock()
            .tokens(text)
            .map_err(|source| IndexError::Sqlite {
                path: ":memory:".into(),
                source,
            })
    }

    /// Make the vector column hold vectors of `dim` (0: any, no HNSW index), dropping the
    /// vectors it held.
    fn shape_vectors(&self, s: &mut Tx<'_, '_, '_>, dim: usize) -> Result<()> {
        let e = self.e();
        s.exec("DROP INDEX IF EXISTS vi_records_hnsw", &[])
            .map_err(&e)?;
        s.exec(
            "UPDATE vi_records SET vec = NULL WHERE vec IS NOT NULL",
            &[],
        )
        .map_err(&e)?;
        let ty = if dim > 0 {
            format!("vector({dim})")
        } else {
            "vector".into()
        };
        s.exec(
            &format!("ALTER TABLE vi_records ALTER COLUMN vec TYPE {ty}"),
            &[],
        )
        .map_err(&e)?;
        if dim > 0 {
            // Unit vectors: the inner product orders as the cosine does, and costs less.
            s.exec(
                "CREATE INDEX vi_records_hnsw ON vi_records USING hnsw (vec vector_ip_ops)",
                &[],
            )
            .map_err(&e)?;
        }
        Ok(())
    }

    fn put_meta(&self, s: &mut Tx<'_, '_, '_>, pairs: &[(&str, &str)]) -> Result<()> {
        for (k, v) in pairs {
            s.exec(
                "INSERT INTO vi_meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[k, v],
            )
            .map_err(self.e())?;
        }
        Ok(())
    }

    /// Count `docs` records and `tokens` tokens more (or fewer) at the transaction's end.
    fn count_in(&self, s: &mut Tx<'_, '_, '_>, docs: i64, tokens: i64) -> Result<()> {
        s.docs += docs;
        s.tokens += tokens;
        Ok(())
    }

    fn upsert(&self, s: &mut Tx<'_, '_, '_>, rec: &Record, p: &Postings) -> Result<()> {
        let e = self.e();
        let level = rec.level as i16;
        let vec = rec
            .vector
            .as_ref()
            .map(|v| pgvector::Vector::from(super::sqlite::quant::normalised(v)));
        let (id, old_len) = loop {
            let existing = s
                .opt(
                    "SELECT id, version, len FROM vi_records WHERE uri = $1 AND level = $2
                     FOR UPDATE",
                    &[&rec.uri.as_str(), &level],
                )
                .map_err(&e)?;
            if let Some(row) = existing {
                let (id, version, len): (i64, String, i32) = (row.get(0), row.get(1), row.get(2));
                // A new version without a vector: the old vector described other text.
                let clear = version != rec.source_version && vec.is_none();
                s.exec(
                    "UPDATE vi_records SET version = $2, snippet = $3, partial = $4,
                            name_len = $5, len = $6,
                            vec = CASE WHEN $7::vector IS NOT NULL THEN $7::vector
                                       WHEN $8 THEN NULL ELSE vec END
                      WHERE id = $1",
                    &[
                        &id,
                        &rec.source_version,
                        &rec.snippet,
                        &rec.partial,
                        &p.name_len,
                        &p.len,
                        &vec,
                        &clear,
                    ],
                )
                .map_err(&e)?;
                s.exec("DELETE FROM vi_postings WHERE rid = $1", &[&id])
                    .map_err(&e)?;
                break (id, Some(len));
            }
            let inserted = s
                .opt(
                    "INSERT INTO vi_records (uri, level, version, snippet, partial, name_len, len, vec)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (uri, level) DO NOTHING RETURNING id",
                    &[
                        &rec.uri.as_str(),
                        &level,
                        &rec.source_version,
                        &rec.snippet,
                        &rec.partial,
                        &p.name_len,
                        &p.len,
                        &vec,
                    ],
                )
                .map_err(&e)?;
            // None: another host inserted it meanwhile; update that row instead.
            if let Some(row) = inserted {
                break (row.get(0), None);
            }
        };
        self.put_postings(s, id, p)?;
        match old_len {
            Some(old) => self.count_in(s, 0, (p.len - old) as i64),
            None => self.count_in(s, 1, p.len as i64),
        }
    }

    fn put_postings(&self, s: &mut Tx<'_, '_, '_>, id: i64, p: &Postings) -> Result<()> {
        if p.terms.is_empty() {
            return Ok(());
        }
        let terms: Vec<&str> = p.terms.iter().map(|t| t.0.as_str()).collect();
        let name: Vec<i32> = p.terms.iter().map(|t| t.1).collect();
        let body: Vec<i32> = p.terms.iter().map(|t| t.2).collect();
        s.exec(
            "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
             SELECT t, $1, n, b, $2 FROM unnest($3::text[], $4::int4[], $5::int4[]) AS u(t, n, b)",
            &[&id, &p.len, &terms, &name, &body],
        )
        .map_err(self.e())?;
        Ok(())
    }

    /// Delete the records `where_` selects (binding `params`); returns how many.
    fn remove(
        &self,
        s: &mut Tx<'_, '_, '_>,
        where_: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<usize> {
        let row = s
            .one(
                &format!(
                    "WITH d AS (DELETE FROM vi_records r WHERE {where_} RETURNING len)
                     SELECT count(*), COALESCE(sum(len), 0)::bigint FROM d"
                ),
                params,
            )
            .map_err(self.e())?;
        let (n, tokens): (i64, i64) = (row.get(0), row.get(1));
        self.count_in(s, -n, -tokens)?;
        Ok(n as usize)
    }

    fn hit(&self, row: &postgres::Row, score: f32, evidence: Evidence) -> Result<Hit> {
        Ok(Hit {
            uri: self.vpath(row.get(0))?,
            level: self.level(row.get(1))?,
            score,
            snippet: row.get(3),
            source_version: row.get(2),
            evidence,
        })
    }
}

impl Engine for PgIndex {
    fn location(&self) -> String {
        self.pg.location().to_string()
    }

    fn read_meta(&self) -> Result<Option<Meta>> {
        let rows = self
            .pg
            .read(|s| s.all("SELECT key, value FROM vi_meta", &[]))?;
        let get = |k: &str| {
            rows.iter()
                .find(|r| r.get::<_, &str>(0) == k)
                .map(|r| r.get::<_, String>(1))
        };
        Ok(match (get("schema"), get("model"), get("dim")) {
            (Some(schema), Some(model), Some(d)) => Some(Meta {
                schema,
                model,
                dim: d.parse().unwrap_or(0),
            }),
            _ => None,
        })
    }

    fn reinit(
        &self,
        wanted: &Meta,
        decide: &dyn Fn(Option<&Meta>) -> Result<Reinit>,
    ) -> Result<Reinit> {
        self.write(|s| {
            s.exec("SELECT pg_advisory_xact_lock($1)", &[&INIT_LOCK])
                .map_err(self.e())?;
            // Re-read under the lock: another host may have initialised it.
            let rows = s
                .all("SELECT key, value FROM vi_meta", &[])
                .map_err(self.e())?;
            let get = |k: &str| {
                rows.iter()
                    .find(|r| r.get::<_, &str>(0) == k)
                    .map(|r| r.get::<_, String>(1))
            };
            let stored = match (get("schema"), get("model"), get("dim")) {
                (Some(schema), Some(model), Some(d)) => Some(Meta {
                    schema,
                    model,
                    dim: d.parse().unwrap_or(0),
                }),
                _ => None,
            };
            let what = decide(stored.as_ref())?;
            match what {
                Reinit::Keep => return Ok(what),
                Reinit::DropVectors => self.shape_vectors(s, wanted.dim)?,
                Reinit::Recreate => {
                    let e = self.e();
                    s.exec("TRUNCATE vi_postings, vi_records", &[])
                        .map_err(&e)?;
                    s.exec("UPDATE vi_stats SET docs = 0, tokens = 0", &[])
                        .map_err(&e)?;
                    s.exec("DELETE FROM vi_meta", &[]).map_err(&e)?;
                    self.shape_vectors(s, wanted.dim)?;
                }
            }
            let dim = wanted.dim.to_string();
            self.put_meta(
                s,
                &[
                    ("schema", &wanted.schema),
                    ("model", &wanted.model),
                    ("dim", &dim),
                ],
            )?;
            Ok(what)
        })
    }

    fn claim(&mut self, model: &str, dim: usize) -> Result<()> {
        self.write(|s| {
            s.exec("SELECT pg_advisory_xact_lock($1)", &[&INIT_LOCK])
                .map_err(self.e())?;
            let stored: Option<String> = s
                .opt("SELECT value FROM vi_meta WHERE key = 'model'", &[])
                .map_err(self.e())?
                .map(|r| r.get(0));
            if stored.as_deref() == Some(model) {
                return Ok(()); // Another host claimed it for the same model.
            }
            self.shape_vectors(s, dim)?;
            self.put_meta(s, &[("model", model), ("dim", &dim.to_string())])
        })
    }

    fn set_dim(&mut self, dim: usize) {
        self.dim = dim;
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .pg
            .read(|s| s.opt("SELECT value FROM vi_meta WHERE key = $1", &[&key]))?
            .map(|r| r.get(0)))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.write(|s| self.put_meta(s, &[(key, value)]))
    }

    fn version_of(&self, uri: &VPath, level: Level) -> Result<Option<String>> {
        Ok(self
            .pg
            .read(|s| {
                s.opt(
                    "SELECT version FROM vi_records WHERE uri = $1 AND level = $2",
                    &[&uri.as_str(), &(level as i16)],
                )
            })?
            .map(|r| r.get(0)))
    }

    fn restamp(&self, uri: &VPath, level: Level, from: &str, to: &str) -> Result<bool> {
        let n = self.pg.read(|s| {
            s.exec(
                "UPDATE vi_records SET version = $4 WHERE uri = $1 AND level = $2 AND version = $3",
                &[&uri.as_str(), &(level as i16), &from, &to],
            )
        })?;
        Ok(n > 0)
    }

    fn vector_state(&self, uri: &VPath, level: Level) -> Result<Option<(String, bool)>> {
        Ok(self
            .pg
            .read(|s| {
                s.opt(
                    "SELECT version, vec IS NOT NULL FROM vi_records WHERE uri = $1 AND level = $2",
                    &[&uri.as_str(), &(level as i16)],
                )
            })?
            .map(|r| (r.get(0), r.get(1))))
    }

    fn has_under(&self, prefix: &VPath) -> Result<bool> {
        let [a, b, c] = under_params(prefix);
        Ok(self
            .pg
            .read(|s| {
                s.one(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM vi_records r WHERE {})",
                        under_sql(1)
                    ),
                    &[&a, &b, &c],
                )
            })?
            .get(0))
    }

    fn stats(&self) -> Result<IndexStats> {
        let row = self.pg.read(|s| {
            s.one(
                "SELECT count(*),
                        count(*) FILTER (WHERE len = 0 OR EXISTS
                            (SELECT 1 FROM vi_postings p WHERE p.rid = r.id)),
                        count(*) FILTER (WHERE vec IS NOT NULL),
                        count(*) FILTER (WHERE partial)
                   FROM vi_records r",
                &[],
            )
        })?;
        let n = |i: usize| row.get::<_, i64>(i) as u64;
        Ok(IndexStats {
            records: n(0),
            lexical: n(1),
            vectors: n(2),
            partial: n(3),
        })
    }

    fn count(&self) -> Result<u64> {
        let row = self
            .pg
            .read(|s| s.one("SELECT count(*) FROM vi_records", &[]))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn uris(&self, which: Which<'_>) -> Result<Vec<(VPath, Level)>> {
        let rows = match which {
            Which::All => self
                .pg
                .read(|s| s.all("SELECT uri, level FROM vi_records ORDER BY uri, level", &[]))?,
            Which::NoVector => self.pg.read(|s| {
                s.all(
                    "SELECT uri, level FROM vi_records WHERE vec IS NULL ORDER BY uri, level",
                    &[],
                )
            })?,
            Which::Under(prefix) => {
                let [a, b, c] = under_params(prefix);
                self.pg.read(|s| {
                    s.all(
                        &format!(
                            "SELECT uri, level FROM vi_records r WHERE {} ORDER BY uri, level",
                            under_sql(1)
                        ),
                        &[&a, &b, &c],
                    )
                })?
            }
        };
        rows.iter()
            .map(|r| Ok((self.vpath(r.get(0))?, self.level(r.get(1))?)))
            .collect()
    }

    fn upsert_many(&self, recs: &[Record]) -> Result<()> {
        let docs: Vec<(String, String)> = recs
            .iter()
            .map(|r| {
                let name = if r.uri.is_root() { "" } else { r.uri.name() };
                (text::document(name), text::document(&r.text))
            })
            .collect();
        let pairs: Vec<(&str, &str)> = docs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let postings = self.postings(&pairs)?;
        // Row locks in one order (by name), so two writers of the same records queue rather
        // than deadlock.
        let mut order: Vec<usize> = (0..recs.len()).collect();
        order.sort_by(|&a, &b| (&recs[a].uri, recs[a].level).cmp(&(&recs[b].uri, recs[b].level)));
        let repeated = order
            .windows(2)
            .any(|w| (&recs[w[0]].uri, recs[w[0]].level) == (&recs[w[1]].uri, recs[w[1]].level));
        self.write(|s| {
            if repeated || recs.len() < 4 {
                // A record named twice in one batch, or a few: one at a time.
                return order
                    .iter()
                    .try_for_each(|&i| self.upsert(s, &recs[i], &postings[i]));
            }
            self.upsert_batch(s, recs, &postings, &order)
        })
    }

    fn set_vector(&self, uri: &VPath, level: Level, version: &str, v: &[f32]) -> Result<bool> {
        if v.len() != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: v.len(),
            });
        }
        let vec = pgvector::Vector::from(super::sqlite::quant::normalised(v));
        self.write(|s| {
            let n = s
                .exec(
                    "UPDATE vi_records SET vec = $4 WHERE uri = $1 AND level = $2 AND version = $3",
                    &[&uri.as_str(), &(level as i16), &version, &vec],
                )
                .map_err(self.e())?;
            crate::crash_point!("index.set_vector.before_commit");
            Ok(n > 0)
        })
    }

    fn delete(&self, uri: &VPath) -> Result<usize> {
        self.write(|s| self.remove(s, "r.uri = $1", &[&uri.as_str()]))
    }

    fn delete_prefix(&self, prefix: &VPath) -> Result<usize> {
        if prefix.is_root() {
            return self.write(|s| self.remove(s, "true", &[]));
        }
        let [a, b, c] = under_params(prefix);
        self.write(|s| self.remove(s, &under_sql(1), &[&a, &b, &c]))
    }

    fn delete_if_versions(&self, which: &[(&VPath, Level, &str)]) -> Result<usize> {
        let uris: Vec<&str> = which.iter().map(|w| w.0.as_str()).collect();
        let levels: Vec<i16> = which.iter().map(|w| w.1 as i16).collect();
        let versions: Vec<&str> = which.iter().map(|w| w.2).collect();
        self.write(|s| {
            self.remove(
                s,
                "(r.uri, r.level, r.version) IN
                   (SELECT * FROM unnest($1::text[], $2::int2[], $3::text[]))",
                &[&uris, &levels, &versions],
            )
        })
    }

    fn rename_prefix(&self, from: &VPath, to: &VPath) -> Result<usize> {
        // The moved path's own name is in its postings: its name terms change with it.
        let names: Vec<String> = [from, to]
            .iter()
            .map(|p| text::document(if p.is_root() { "" } else { p.name() }))
            .collect();
        let name_postings = self.postings(&[(names[0].as_str(), ""), (names[1].as_str(), "")])?;
        self.write(|s| {
            let e = self.e();
            let rows = if from.is_root() {
                s.all("SELECT id, uri, level FROM vi_records r FOR UPDATE", &[])
            } else {
                let [a, b, c] = under_params(from);
                s.all(
                    &format!(
                        "SELECT id, uri, level FROM vi_records r WHERE {} FOR UPDATE",
                        under_sql(1)
                    ),
                    &[&a, &b, &c],
                )
            }
            .map_err(&e)?;
            let mut ids = Vec::with_capacity(rows.len());
            let mut new_uris = Vec::with_capacity(rows.len());
            let mut levels = Vec::with_capacity(rows.len());
            for r in &rows {
                let old = self.vpath(r.get(1))?;
                let new = old.rebase(from, to).ok_or_else(|| IndexError::Corrupt {
                    at: self.pg.location().to_string(),
                    msg: format!("{old} is not under {from}"),
                })?;
                ids.push(r.get::<_, i64>(0));
                new_uris.push(new.as_str().to_string());
                levels.push(r.get::<_, i16>(2));
            }
            // Records the move replaces (as rename(2) replaces its target).
            self.remove(
                s,
                "(r.uri, r.level) IN (SELECT * FROM unnest($1::text[], $2::int2[]))
                 AND NOT r.id = ANY($3)",
                &[&new_uris, &levels, &ids],
            )?;
            // Two passes through names no path can have, so that no intermediate state
            // breaks UNIQUE (uri, level) however old and new names interleave.
            s.exec(
                "UPDATE vi_records SET uri = chr(1) || id WHERE id = ANY($1)",
                &[&ids],
            )
            .map_err(&e)?;
            crate::crash_point!("index.rename.between_passes");
            s.exec(
                "UPDATE vi_records r SET uri = n.uri
                   FROM unnest($1::int8[], $2::text[]) AS n(id, uri) WHERE r.id = n.id",
                &[&ids, &new_uris],
            )
            .map_err(&e)?;
            if from.name() != to.name() {
                let moved: Vec<i64> = ids
                    .iter()
                    .zip(&new_uris)
                    .filter(|(_, u)| u.as_str() == to.as_str())
                    .map(|(id, _)| *id)
                    .collect();
                for id in moved {
                    self.rename_terms(s, id, &name_postings[0], &name_postings[1])?;
                }
            }
            Ok(ids.len())
        })
    }

    fn search_dense(&self, unit: &[f32], k: usize, under: Option<&VPath>) -> Result<Vec<Hit>> {
        if unit.len() != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: unit.len(),
            });
        }
        let q = pgvector::Vector::from(unit.to_vec());
        let k = k as i64;
        // The graph search looks at this many candidates: enough that the top k are found.
        let ef = (k * 2).clamp(100, 1000).to_string();
        let rows = self.read(|s| {
            let e = self.e();
            let Some(prefix) = under.filter(|p| !p.is_root()) else {
                s.one("SELECT set_config('hnsw.ef_search', $1, true)", &[&ef])
                    .map_err(&e)?;
                return s
                    .all(
                        "SELECT uri, level, version, snippet, (vec <#> $1)::float4 FROM vi_records
                          WHERE vec IS NOT NULL ORDER BY vec <#> $1 LIMIT $2",
                        &[&q, &k],
                    )
                    .map_err(&e);
            };
            let [a, b, c] = under_params(prefix);
            let small: i64 = s
                .one(
                    &format!(
                        "SELECT count(*) FROM (SELECT 1 FROM vi_records r WHERE {} LIMIT {})",
                        under_sql(1),
                        EXACT_MAX + 1
                    ),
                    &[&a, &b, &c],
                )
                .map_err(&e)?
                .get(0);
            if small <= EXACT_MAX {
                // A small subtree: every vector in it, exactly (`+ 0` keeps the planner off
                // the graph index, which would filter after the fact).
                s.all(
                    &format!(
                        "SELECT uri, level, version, snippet, (vec <#> $4)::float4 FROM vi_records r
                          WHERE {} AND vec IS NOT NULL ORDER BY (vec <#> $4) + 0 LIMIT $5",
                        under_sql(1)
                    ),
                    &[&a, &b, &c, &q, &k],
                )
                .map_err(&e)
            } else {
                // A large one: the graph, scanned on until enough results fall inside it.
                s.one("SELECT set_config('hnsw.ef_search', $1, true)", &[&ef])
                    .map_err(&e)?;
                s.one(
                    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                    &[],
                )
                .map_err(&e)?;
                s.all(
                    &format!(
                        "SELECT uri, level, version, snippet, (vec <#> $4)::float4 FROM vi_records r
                          WHERE {} AND vec IS NOT NULL ORDER BY vec <#> $4 LIMIT $5",
                        under_sql(1)
                    ),
                    &[&a, &b, &c, &q, &k],
                )
                .map_err(&e)
            }
        })?;
        let mut hits = rows
            .iter()
            .map(|r| {
                let cosine = -r.get::<_, f32>(4);
                self.hit(
                    r,
                    cosine,
                    Evidence {
                        cosine: Some(cosine),
                        ..Evidence::default()
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.uri.cmp(&b.uri))
                .then(a.level.cmp(&b.level))
        });
        Ok(hits)
    }

    fn search_lexical(
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

    fn doc_freq(&self, terms: &[&str], excluding: Option<&VPath>) -> Result<(u64, Vec<u64>)> {
        let tokens: Vec<Vec<String>> = terms
            .iter()
            .map(|t| {
                let doc = text::document(t);
                if doc.is_empty() {
                    Ok(Vec::new())
                } else {
                    self.tokens(&doc)
                }
            })
            .collect::<Result<_>>()?;
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
        // A term's index terms all in one file (FTS5 asks for them as a phrase: the files
        // hold them as the document made them, side by side).
        let df_sql = format!(
            "SELECT count(*) FROM
               (SELECT rid FROM vi_postings WHERE term = ANY($1)
                 GROUP BY rid HAVING count(*) = $2) x
               JOIN vi_records r ON r.id = x.rid
              WHERE r.level = {content} {}",
            outside(3)
        );
        self.read(|s| {
            let e = self.e();
            let docs: i64 = match excluding {
                Some(_) => s.one(&docs_sql, &[&a, &b, &c]),
                None => s.one(&docs_sql, &[]),
            }
            .map_err(&e)?
            .get(0);
            let mut out = Vec::with_capacity(tokens.len());
            for t in &tokens {
                let mut distinct = t.clone();
                distinct.sort();
                distinct.dedup();
                if distinct.is_empty() {
                    out.push(0);
                    continue;
                }
                let n = distinct.len() as i64;
                let row = match excluding {
                    Some(_) => s.one(&df_sql, &[&distinct, &n, &a, &b, &c]),
                    None => s.one(&df_sql, &[&distinct, &n]),
                }
                .map_err(&e)?;
                out.push(row.get::<_, i64>(0) as u64);
            }
            Ok((docs as u64, out))
        })
    }

    fn verify(&self) -> Result<Vec<String>> {
        let row = self.read(|s| {
            s.one(
                "SELECT (SELECT sum(docs) FROM vi_stats)::bigint,
                        (SELECT count(*) FROM vi_records)::bigint,
                        (SELECT sum(tokens) FROM vi_stats)::bigint,
                        (SELECT COALESCE(sum(len), 0) FROM vi_records)::bigint,
                        (SELECT count(*) FROM vi_records r WHERE len > 0 AND NOT EXISTS
                            (SELECT 1 FROM vi_postings p WHERE p.rid = r.id)),
                        (SELECT count(*) FROM vi_postings p JOIN vi_records r ON r.id = p.rid
                          WHERE p.len != r.len)",
                &[],
            )
            .map_err(self.e())
        })?;
        let n = |i: usize| row.get::<_, i64>(i);
        let mut problems = Vec::new();
        if n(0) != n(1) {
            problems.push(format!("stats count {} records, there are {}", n(0), n(1)));
        }
        if n(2) != n(3) {
            problems.push(format!(
                "stats count {} tokens, the records hold {}",
                n(2),
                n(3)
            ));
        }
        if n(4) > 0 {
            problems.push(format!("{} records have no postings", n(4)));
        }
        if n(5) > 0 {
            problems.push(format!(
                "{} postings disagree with their record's length",
                n(5)
            ));
        }
        Ok(problems)
    }
}

impl PgIndex {
    /// Many records (each named once) in a few statements: the existing rows locked in
    /// `order`, updated from arrays, the new ones inserted from arrays, all their postings in
    /// one insert. A record another writer inserted meanwhile goes the one-at-a-time way.
    fn upsert_batch(
        &self,
        s: &mut Tx<'_, '_, '_>,
        recs: &[Record],
        postings: &[Postings],
        order: &[usize],
    ) -> Result<()> {
        let e = self.e();
        let uris: Vec<&str> = order.iter().map(|&i| recs[i].uri.as_str()).collect();
        let levels: Vec<i16> = order.iter().map(|&i| recs[i].level as i16).collect();
        let rows = s
            .all(
                "SELECT r.id, r.uri, r.level, r.version, r.len FROM vi_records r
                  JOIN unnest($1::text[], $2::int2[]) AS w(uri, level)
                    ON r.uri = w.uri AND r.level = w.level
                  ORDER BY r.uri, r.level FOR UPDATE OF r",
                &[&uris, &levels],
            )
            .map_err(&e)?;
        let mut existing = std::collections::HashMap::new();
        for r in &rows {
            let key: (String, i16) = (r.get(1), r.get(2));
            existing.insert(
                key,
                (
                    r.get::<_, i64>(0),
                    r.get::<_, String>(3),
                    r.get::<_, i32>(4),
                ),
            );
        }
        let unit = |i: usize| {
            recs[i]
                .vector
                .as_ref()
                .map(|v| pgvector::Vector::from(super::sqlite::quant::normalised(v)))
        };
        // Existing rows: new values, postings replaced.
        let (mut old, mut new): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for &i in order {
            let key = (recs[i].uri.as_str().to_string(), recs[i].level as i16);
            if existing.contains_key(&key) {
                old.push(i);
            } else {
                new.push(i);
            }
        }
        let mut ids: Vec<(usize, i64)> = Vec::with_capacity(recs.len());
        if !old.is_empty() {
            let mut u_ids = Vec::new();
            let mut clear = Vec::new();
            for &i in &old {
                let (id, version, len) =
                    &existing[&(recs[i].uri.as_str().to_string(), recs[i].level as i16)];
                u_ids.push(*id);
                // A new version without a vector: the old vector described other text.
                clear.push(*version != recs[i].source_version && recs[i].vector.is_none());
                s.tokens += (postings[i].len - len) as i64;
                ids.push((i, *id));
            }
            let versions: Vec<&str> = old
                .iter()
                .map(|&i| recs[i].source_version.as_str())
                .collect();
            let snippets: Vec<&str> = old.iter().map(|&i| recs[i].snippet.as_str()).collect();
            let partial: Vec<bool> = old.iter().map(|&i| recs[i].partial).collect();
            let name_lens: Vec<i32> = old.iter().map(|&i| postings[i].name_len).collect();
            let lens: Vec<i32> = old.iter().map(|&i| postings[i].len).collect();
            let vecs: Vec<Option<pgvector::Vector>> = old.iter().map(|&i| unit(i)).collect();
            s.exec(
                "UPDATE vi_records r SET version = u.version, snippet = u.snippet,
                        partial = u.partial, name_len = u.name_len, len = u.len,
                        vec = CASE WHEN u.vec IS NOT NULL THEN u.vec
                                   WHEN u.clear THEN NULL ELSE r.vec END
                   FROM unnest($1::int8[], $2::text[], $3::text[], $4::bool[], $5::int4[],
                               $6::int4[], $7::vector[], $8::bool[])
                        AS u(id, version, snippet, partial, name_len, len, vec, clear)
                  WHERE r.id = u.id",
                &[
                    &u_ids, &versions, &snippets, &partial, &name_lens, &lens, &vecs, &clear,
                ],
            )
            .map_err(&e)?;
            s.exec("DELETE FROM vi_postings WHERE rid = ANY($1)", &[&u_ids])
                .map_err(&e)?;
        }
        if !new.is_empty() {
            let n_uris: Vec<&str> = new.iter().map(|&i| recs[i].uri.as_str()).collect();
            let n_levels: Vec<i16> = new.iter().map(|&i| recs[i].level as i16).collect();
            let versions: Vec<&str> = new
                .iter()
                .map(|&i| recs[i].source_version.as_str())
                .collect();
            let snippets: Vec<&str> = new.iter().map(|&i| recs[i].snippet.as_str()).collect();
            let partial: Vec<bool> = new.iter().map(|&i| recs[i].partial).collect();
            let name_lens: Vec<i32> = new.iter().map(|&i| postings[i].name_len).collect();
            let lens: Vec<i32> = new.iter().map(|&i| postings[i].len).collect();
            let vecs: Vec<Option<pgvector::Vector>> = new.iter().map(|&i| unit(i)).collect();
            let made = s
                .all(
                    "INSERT INTO vi_records (uri, level, version, snippet, partial, name_len, len, vec)
                     SELECT * FROM unnest($1::text[], $2::int2[], $3::text[], $4::text[],
                                          $5::bool[], $6::int4[], $7::int4[], $8::vector[])
                     ON CONFLICT (uri, level) DO NOTHING RETURNING id, uri, level",
                    &[&n_uris, &n_levels, &versions, &snippets, &partial, &name_lens, &lens, &vecs],
                )
                .map_err(&e)?;
            let mut made_ids = std::collections::HashMap::new();
            for r in &made {
                made_ids.insert(
                    (r.get::<_, String>(1), r.get::<_, i16>(2)),
                    r.get::<_, i64>(0),
                );
            }
            for &i in &new {
                match made_ids.get(&(recs[i].uri.as_str().to_string(), recs[i].level as i16)) {
                    Some(&id) => {
                        s.docs += 1;
                        s.tokens += postings[i].len as i64;
                        ids.push((i, id));
                    }
                    // Another writer inserted it meanwhile: update that row instead.
                    None => self.upsert(s, &recs[i], &postings[i])?,
                }
            }
        }
        let mut rid = Vec::new();
        let mut term = Vec::new();
        let mut name_tf = Vec::new();
        let mut body_tf = Vec::new();
        let mut len = Vec::new();
        for (i, id) in ids {
            for (t, n, b) in &postings[i].terms {
                rid.push(id);
                term.push(t.as_str());
                name_tf.push(*n);
                body_tf.push(*b);
                len.push(postings[i].len);
            }
        }
        if !rid.is_empty() {
            s.exec(
                "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::int4[], $5::int4[])",
                &[&term, &rid, &name_tf, &body_tf, &len],
            )
            .map_err(&e)?;
        }
        Ok(())
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

    /// Record `id`'s name changed from the one of `old` to the one of `new` (both postings
    /// of a name alone): its name counts and length follow, its text's stay.
    fn rename_terms(
        &self,
        s: &mut Tx<'_, '_, '_>,
        id: i64,
        old: &Postings,
        new: &Postings,
    ) -> Result<()> {
        let e = self.e();
        let row = s
            .one("SELECT name_len, len FROM vi_records WHERE id = $1", &[&id])
            .map_err(&e)?;
        let (name_len, len): (i32, i32) = (row.get(0), row.get(1));
        debug_assert_eq!(name_len, old.name_len);
        let new_len = len - name_len + new.name_len;
        s.exec(
            "UPDATE vi_postings SET name_tf = 0 WHERE rid = $1 AND name_tf != 0",
            &[&id],
        )
        .map_err(&e)?;
        s.exec(
            "DELETE FROM vi_postings WHERE rid = $1 AND name_tf = 0 AND body_tf = 0",
            &[&id],
        )
        .map_err(&e)?;
        let terms: Vec<&str> = new.terms.iter().map(|t| t.0.as_str()).collect();
        let counts: Vec<i32> = new.terms.iter().map(|t| t.1).collect();
        s.exec(
            "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
             SELECT t, $1, n, 0, $2 FROM unnest($3::text[], $4::int4[]) AS u(t, n)
             ON CONFLICT (term, rid) DO UPDATE SET name_tf = EXCLUDED.name_tf",
            &[&id, &new_len, &terms, &counts],
        )
        .map_err(&e)?;
        s.exec(
            "UPDATE vi_postings SET len = $2 WHERE rid = $1",
            &[&id, &new_len],
        )
        .map_err(&e)?;
        s.exec(
            "UPDATE vi_records SET name_len = $2, len = $3 WHERE id = $1",
            &[&id, &new.name_len, &new_len],
        )
        .map_err(&e)?;
        self.count_in(s, 0, (new_len - len) as i64)
    }
}
