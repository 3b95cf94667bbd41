//! The index on the PostgreSQL server of `storage.backend = "postgres"`, shared by every host
//! mounting the workspace: records with their vectors (pgvector, an HNSW index for cosine),
//! postings for BM25, and the counts BM25 weighs them by, each write one transaction.
//!
//! Lexical search ranks as the SQLite index's FTS5 table does, by the same formula over the
//! same terms: [`super::analyze`] makes the postings with FTS5's own tokenizer, and the query
//! computes FTS5's `bm25()` (k1 = 1.2, b = 0.75, the name weighted `NAME_WEIGHT`, a term's
//! IDF from the records holding it among all records, a record's length in tokens against
//! the average) in SQL. Two answers on the two backends then differ only where their ties
//! break, and where a quoted query term is several tokens (FTS5 matches them as a phrase,
//! this backend by the first token).
//!
//! Tables (all `vi_`): `vi_meta`; `vi_records` (uri in byte order, as on SQLite); `vi_parts`
//! (a record's vector per passage, with the lines it covers: HNSW for cosine); `vi_postings`
//! (term, record, occurrences in name and text, the record's length); `vi_stats`, the
//! number of records and tokens as sums over a few rows, each writer adding to the row of its
//! connection so that writers on several hosts do not queue behind one row.
//!
//! Invariants: a record's postings are exactly its analysed name and text; `vi_stats` sums to
//! the records' count and lengths; a vector is unit length and of the meta's dimension (the
//! column's type says it once a model claimed the index); a record has parts exactly when its
//! `vec` is set, and its `vec` is its first part's.

mod search;
mod write;

use std::sync::Arc;

use parking_lot::Mutex;
use postgres::Transaction;

use super::analyze::{Analyzer, Postings};
use super::engine::{Engine, Meta, Reinit, Result, Which};
use super::sqlite::under_params;
use super::{text, Evidence, Hit, IndexError, IndexStats, Level, Record};
use crate::pg::{Pg, Session};
use crate::uri::VPath;

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

/// Version 2: a record's vectors, one per passage (`vi_records.vec` keeps the first, which
/// says the record has its vectors); the dense search reads these.
const PARTS: &str = r#"
CREATE TABLE vi_parts (
    rid        bigint NOT NULL REFERENCES vi_records (id) ON DELETE CASCADE,
    ord        integer NOT NULL,
    first_line integer NOT NULL,
    last_line  integer NOT NULL,
    vec        vector NOT NULL,
    PRIMARY KEY (rid, ord)
);
INSERT INTO vi_parts SELECT id, 0, 0, 0, vec FROM vi_records WHERE vec IS NOT NULL;
DROP INDEX IF EXISTS vi_records_hnsw;
DO $$
DECLARE t text;
BEGIN
    -- A store whose model was claimed has vectors of one size: the parts take that type
    -- and get the graph index the records had (else a graph search scans them all).
    SELECT format_type(atttypid, atttypmod) INTO t FROM pg_attribute
     WHERE attrelid = 'vi_records'::regclass AND attname = 'vec';
    IF t IS NOT NULL AND t <> 'vector' THEN
        EXECUTE format('ALTER TABLE vi_parts ALTER COLUMN vec TYPE %s', t);
        CREATE INDEX vi_parts_hnsw ON vi_parts USING hnsw (vec vector_ip_ops);
    END IF;
END $$;
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
        pg.migrate("index", &[SCHEMA, PARTS])?;
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
        s.exec("DROP INDEX IF EXISTS vi_parts_hnsw", &[])
            .map_err(&e)?;
        s.exec("TRUNCATE vi_parts", &[]).map_err(&e)?;
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
        for table in ["vi_records", "vi_parts"] {
            s.exec(
                &format!("ALTER TABLE {table} ALTER COLUMN vec TYPE {ty}"),
                &[],
            )
            .map_err(&e)?;
        }
        if dim > 0 {
            // Unit vectors: the inner product orders as the cosine does, and costs less.
            s.exec(
                "CREATE INDEX vi_parts_hnsw ON vi_parts USING hnsw (vec vector_ip_ops)",
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
                    s.exec("TRUNCATE vi_parts, vi_postings, vi_records", &[])
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
            if repeated {
                // A record named twice: one after the other, as the SQLite store writes them.
                return order
                    .iter()
                    .try_for_each(|&i| self.upsert_batch(s, recs, &postings, &[i]));
            }
            self.upsert_batch(s, recs, &postings, &order)
        })
    }

    fn set_vectors(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        parts: &[crate::index::PassageVector],
    ) -> Result<bool> {
        let Some(first) = parts.first() else {
            return Ok(false);
        };
        let unit = |v: &[f32]| pgvector::Vector::from(crate::index::sqlite::quant::normalised(v));
        let vecs: Vec<pgvector::Vector> = parts.iter().map(|p| unit(&p.vector)).collect();
        let ords: Vec<i32> = (0..parts.len() as i32).collect();
        let firsts: Vec<i32> = parts.iter().map(|p| p.lines[0] as i32).collect();
        let lasts: Vec<i32> = parts.iter().map(|p| p.lines[1] as i32).collect();
        self.write(|s| {
            let e = self.e();
            let Some(row) = s
                .opt(
                    "UPDATE vi_records SET vec = $4
                      WHERE uri = $1 AND level = $2 AND version = $3 RETURNING id",
                    &[
                        &uri.as_str(),
                        &(level as i16),
                        &version,
                        &unit(&first.vector),
                    ],
                )
                .map_err(&e)?
            else {
                return Ok(false);
            };
            let rid: i64 = row.get(0);
            s.exec("DELETE FROM vi_parts WHERE rid = $1", &[&rid])
                .map_err(&e)?;
            s.exec(
                "INSERT INTO vi_parts (rid, ord, first_line, last_line, vec)
                 SELECT $1, * FROM unnest($2::int4[], $3::int4[], $4::int4[], $5::vector[])",
                &[&rid, &ords, &firsts, &lasts, &vecs],
            )
            .map_err(&e)?;
            crate::crash_point!("index.set_vector.before_commit");
            Ok(true)
        })
    }

    fn delete(&self, uri: &VPath) -> Result<usize> {
        self.write(|s| self.remove(s, "r.uri = $1", &[&uri.as_str()]))
    }

    fn delete_prefixes(&self, prefixes: &[&VPath]) -> Result<usize> {
        self.write(|s| {
            let mut n = 0;
            for prefix in prefixes {
                n += if prefix.is_root() {
                    self.remove(s, "true", &[])?
                } else {
                    let [a, b, c] = under_params(prefix);
                    self.remove(s, &under_sql(1), &[&a, &b, &c])?
                };
            }
            Ok(n)
        })
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
        self.dense(unit, k, under)
    }

    fn search_lexical(
        &self,
        terms: &[String],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>> {
        self.lexical(terms, k, under)
    }

    fn doc_freq(&self, terms: &[&str], excluding: Option<&VPath>) -> Result<(u64, Vec<u64>)> {
        self.frequencies(terms, excluding)
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
