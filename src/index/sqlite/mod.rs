//! The index in a SQLite file (`WORKSPACE/.vikingfs/index.db`, WAL mode): the default
//! backend.
//!
//! Layout, chosen so a fresh `vikingfs find` process answers fast:
//! - `records`: one row per record with its exact f32 vectors when it has them, one per
//!   passage of its source (`vec`, read back only for re-ranking), the lines each passage
//!   covers (`spans`) and where each is packed (`places`);
//! - `lex`: an FTS5 table (BM25) over each record's name and text, rowid = the record's id,
//!   written in the same transaction as the record, so the two never disagree
//!   ([`super::text`] makes the terms). It is contentless with deletes by rowid
//!   (`contentless_delete`): removing a record tombstones its row instead of re-tokenizing
//!   its text to find its postings, which cost as much as indexing it and was most of
//!   `rm -rf`'s derived work. Tombstoned postings go when FTS5 merges segments as records are
//!   written (`deletemerge` 0: a delete never starts a merge; with the default, a burst of
//!   deletes rewrote the same big segments again and again, slower than the old deletes);
//! - `lex_text`: the terms each `lex` row was made from (its name's and its text's, as
//!   written), read back only when a rename changes a record's name: the one change that
//!   must re-make a row whose text the contentless table no longer has, and to count the
//!   words of one subtree's files for the summaries' document frequencies;
//! - `lex_sum`: the summary records' `lex` rows again (postings only, `detail=none`), so
//!   that the files holding a word are `lex`'s vocabulary count less `lex_sum`'s: one
//!   query of FTS5's `fts5vocab` for all of a summary's candidate words, where a `MATCH`
//!   joined to the records per word cost a record lookup per posting;
//! - `chunks`: the int8 codes of up to [`CHUNK_SLOTS`] vectors packed into one blob, so a
//!   dense search reads a few hundred blobs instead of stepping through one row per record.
//!
//! Reads (searches, document frequencies, lookups) go through a pool of read connections,
//! writes through the one write connection ([`SqliteEngine`]).
//!
//! Invariants: every record has exactly one `lex` row and one `lex_text` row, and each of
//! those is a record's; a record has a `lex_sum` row (the same terms) exactly when it is a
//! summary; a
//! record with N passage vectors has N packed slots holding its id, named in its `places`
//! in passage order (a dense search scores a record by its best passage).

mod chunk;
mod lex;
mod lexical;
pub(crate) mod quant;
mod search;
mod store;
mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::engine::{Engine, Meta, Reinit, Result, Which};
use super::{Hit, IndexError, IndexStats, Level, PassageVector, Record};
use crate::uri::VPath;

/// Records per packed chunk: 256 × 256-dim codes = 64 KiB blobs.
pub const CHUNK_SLOTS: usize = 256;
/// Writers (job workers in several processes) queue behind each other this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Let SQLite read pages through mmap: the chunk scan then costs memcpy, not a pread per page.
const MMAP_SIZE: i64 = 1 << 32;

/// The tables of an empty index.
fn create_sql() -> String {
    format!(
        "DROP TABLE IF EXISTS records;
         DROP TABLE IF EXISTS chunks;
         DROP TABLE IF EXISTS lex;
         DROP TABLE IF EXISTS lex_text;
         DROP TABLE IF EXISTS lex_sum;
         CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE records(
             id INTEGER PRIMARY KEY, uri TEXT NOT NULL, level INTEGER NOT NULL,
             version TEXT NOT NULL, snippet TEXT NOT NULL,
             places BLOB, spans BLOB, vec BLOB,
             partial INTEGER NOT NULL DEFAULT 0, UNIQUE(uri, level));
         CREATE INDEX records_novec ON records(id) WHERE vec IS NULL;
         CREATE TABLE chunks(
             id INTEGER PRIMARY KEY, used INTEGER NOT NULL, data BLOB NOT NULL);
         CREATE INDEX chunks_free ON chunks(id) WHERE used < {CHUNK_SLOTS};
         {}",
        lex_sql()
    )
}

/// The lexical tables, empty (see the module's docs).
fn lex_sql() -> String {
    format!(
        "CREATE VIRTUAL TABLE lex USING fts5(
             name, body, tokenize = '{}', content = '', contentless_delete = 1);
         INSERT INTO lex(lex, rank) VALUES('deletemerge', 0);
         CREATE TABLE lex_text(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT NOT NULL);
         {}",
        super::analyze::TOKENIZER,
        lex_sum_sql()
    )
}

/// `lex_sum`, empty: the summaries' `lex` rows again, postings only (see the module's docs).
fn lex_sum_sql() -> String {
    format!(
        "CREATE VIRTUAL TABLE lex_sum USING fts5(
             name, body, tokenize = '{}', content = '', contentless_delete = 1, detail = none);
         INSERT INTO lex_sum(lex_sum, rank) VALUES('deletemerge', 0);",
        super::analyze::TOKENIZER
    )
}

/// Apply `sql` to an index whose schema `needed` (a query answering one boolean) says is
/// old, in one write transaction: whoever opens it first upgrades it, and the others find it
/// done (`needed` asked again under the write lock). A current index costs one read of the
/// schema. Whether it ran.
fn upgrade_once(conn: &mut Connection, needed: &str, sql: &str) -> rusqlite::Result<bool> {
    let ask = |c: &Connection| c.query_row(needed, [], |r| r.get::<_, bool>(0));
    if !ask(conn)? {
        return Ok(false);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !ask(&tx)? {
        return Ok(false);
    }
    tx.execute_batch(sql)?;
    tx.commit()?;
    Ok(true)
}

/// An index made before `lex_sum` gets it, filled from the summaries' `lex_text`.
fn upgrade_lex_sum(conn: &mut Connection) -> rusqlite::Result<()> {
    upgrade_once(
        conn,
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'lex_text')
            AND NOT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'lex_sum')",
        &format!("{} {}", lex_sum_sql(), fill_lex_sum()),
    )
    .map(drop)
}

/// `lex_sum` made from the summaries' `lex_text`.
fn fill_lex_sum() -> String {
    format!(
        "INSERT INTO lex_sum(rowid, name, body)
              SELECT t.id, t.name, t.body FROM lex_text t JOIN records r ON r.id = t.id
               WHERE r.level != {};",
        Level::Content as i64
    )
}

/// An index written before `lex` was contentless (its text in FTS5's own content table, no
/// `lex_text`) is converted in place when opened: the text moves to `lex_text` and `lex` is
/// made again from it. Records, vectors and chunks stay as they are (re-deriving them from
/// the files would re-embed every file).
fn upgrade_lex(conn: &mut Connection) -> rusqlite::Result<()> {
    let ran = upgrade_once(
        conn,
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'lex')
            AND NOT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'lex_text')",
        &format!(
            "CREATE TEMP TABLE old_lex AS SELECT rowid AS id, name, body FROM lex;
             DROP TABLE lex;
             DROP TABLE IF EXISTS lex_sum;
             {}
             INSERT INTO lex_text(id, name, body) SELECT id, name, body FROM temp.old_lex;
             INSERT INTO lex(rowid, name, body) SELECT id, name, body FROM lex_text;
             {}
             DROP TABLE temp.old_lex;",
            lex_sql(),
            fill_lex_sum()
        ),
    )?;
    if ran {
        tracing::info!(
            "the index's lexical table made contentless (deletes no longer re-read text)"
        );
    }
    Ok(())
}

/// Idle read connections an engine keeps for the next reads; more are opened while more
/// reads run at once, and closed when they end.
const IDLE_READERS: usize = 4;

/// An open index file: one connection that writes, behind a mutex (writes queue behind each
/// other, as SQLite would make them anyway), and a pool of read connections
/// ([`SqliteEngine::reader`]) for searches and the summaries' document frequencies. In WAL
/// mode a reader sees the last commit and never waits for a writer: a search answers while a
/// batch of records is being written, and a long read (a summary's statistics) holds no
/// write back.
pub struct SqliteEngine {
    path: PathBuf,
    /// Dimension of the stored vectors (0: none stored).
    dim: usize,
    conn: Mutex<Connection>,
    /// Idle read connections (`query_only`), at most [`IDLE_READERS`].
    readers: Mutex<Vec<Connection>>,
    /// The tokenizer of the words whose document frequencies are asked for, made at the
    /// first ask.
    analyzer: Mutex<Option<super::analyze::Analyzer>>,
    /// See [`search::ID_SET_MAX`]; a field so tests can exercise both `under` strategies.
    id_set_max: usize,
}

impl SqliteEngine {
    pub fn open(path: &Path) -> Result<SqliteEngine> {
        let mut conn = crate::db::open(
            path,
            crate::db::Open {
                busy_timeout: BUSY_TIMEOUT,
                mmap_size: MMAP_SIZE,
            },
        )
        .map_err(|source| IndexError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
        upgrade_lex(&mut conn)
            .and_then(|()| upgrade_lex_sum(&mut conn))
            .map_err(|source| IndexError::Sqlite {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(SqliteEngine {
            path: path.to_path_buf(),
            dim: 0,
            conn: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            analyzer: Mutex::new(None),
            id_set_max: search::ID_SET_MAX,
        })
    }

    /// A read connection for one read (one snapshot per statement, or per transaction the
    /// caller opens on it): an idle one, or a new one. It goes back to the pool when dropped.
    fn reader(&self) -> Result<Reader<'_>> {
        if let Some(conn) = self.readers.lock().pop() {
            return Ok(Reader {
                eng: self,
                conn: Some(conn),
            });
        }
        let conn = crate::db::open(
            &self.path,
            crate::db::Open {
                busy_timeout: BUSY_TIMEOUT,
                mmap_size: MMAP_SIZE,
            },
        )
        .and_then(|c| {
            // The vocabularies of the lexical tables (temp: nothing in the file), made
            // before the connection is made read-only.
            c.execute_batch(
                "CREATE VIRTUAL TABLE temp.lex_terms USING fts5vocab(main, lex, 'row');
                 CREATE VIRTUAL TABLE temp.lex_sum_terms USING fts5vocab(main, lex_sum, 'row');
                 PRAGMA query_only = 1;",
            )?;
            Ok(c)
        })
        .map_err(|e| self.sql(e))?;
        Ok(Reader {
            eng: self,
            conn: Some(conn),
        })
    }

    fn sql(&self, source: rusqlite::Error) -> IndexError {
        IndexError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, msg: impl Into<String>) -> IndexError {
        IndexError::Corrupt {
            at: self.path.display().to_string(),
            msg: msg.into(),
        }
    }

    fn vpath(&self, s: &str) -> Result<VPath> {
        VPath::from_rel(s).map_err(|source| IndexError::CorruptUri {
            at: self.path.display().to_string(),
            source,
        })
    }

    fn level(&self, v: i64) -> Result<Level> {
        Level::from_i64(v).ok_or_else(|| self.corrupt(format!("record level {v}")))
    }

    fn put_meta(conn: &Connection, pairs: &[(&str, &str)]) -> rusqlite::Result<()> {
        for (k, v) in pairs {
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![k, v],
            )?;
        }
        Ok(())
    }

    /// The (uri, level) of the records matching the SQL condition `cond`, sorted.
    fn uris_where(&self, cond: &str, params: impl rusqlite::Params) -> Result<Vec<(VPath, Level)>> {
        let conn = self.reader()?;
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT uri, level FROM records WHERE {cond} ORDER BY uri, level"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params, |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (uri, level) = row.map_err(|e| self.sql(e))?;
            out.push((self.vpath(&uri)?, self.level(level)?));
        }
        Ok(out)
    }
}

impl Engine for SqliteEngine {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn read_meta(&self) -> Result<Option<Meta>> {
        read_meta(&self.conn.lock()).map_err(|e| self.sql(e))
    }

    fn reinit(
        &self,
        wanted: &Meta,
        decide: &dyn Fn(Option<&Meta>) -> Result<Reinit>,
    ) -> Result<Reinit> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| IndexError::Sqlite {
                path: self.path.clone(),
                source,
            })?;
        // Re-read inside the write transaction: another process may have initialised it.
        let stored = read_meta(&tx).map_err(|e| self.sql(e))?;
        let what = decide(stored.as_ref())?;
        match what {
            Reinit::Keep => return Ok(what),
            Reinit::DropVectors => tx.execute_batch(
                "DELETE FROM chunks;
                 UPDATE records SET places = NULL, spans = NULL, vec = NULL
                  WHERE vec IS NOT NULL;",
            ),
            Reinit::Recreate => tx.execute_batch(&create_sql()),
        }
        .map_err(|e| self.sql(e))?;
        let dim = wanted.dim.to_string();
        Self::put_meta(
            &tx,
            &[
                ("schema", &wanted.schema),
                ("model", &wanted.model),
                ("dim", &dim),
            ],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(what)
    }

    fn claim(&mut self, model: &str, dim: usize) -> Result<()> {
        let conn = self.conn.lock();
        Self::put_meta(&conn, &[("model", model), ("dim", &dim.to_string())])
            .map_err(|e| self.sql(e))
    }

    fn set_dim(&mut self, dim: usize) {
        self.dim = dim;
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        let conn = self.conn.lock();
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        let conn = self.conn.lock();
        Self::put_meta(&conn, &[(key, value)]).map_err(|e| self.sql(e))
    }

    fn version_of(&self, uri: &VPath, level: Level) -> Result<Option<String>> {
        let conn = self.reader()?;
        conn.prepare_cached("SELECT version FROM records WHERE uri = ?1 AND level = ?2")
            .and_then(|mut s| {
                s.query_row(params![uri.as_str(), level as i64], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.sql(e))
    }

    fn restamp(&self, uri: &VPath, level: Level, from: &str, to: &str) -> Result<bool> {
        let conn = self.conn.lock();
        conn.execute(
            "UPDATE records SET version = ?4 WHERE uri = ?1 AND level = ?2 AND version = ?3",
            params![uri.as_str(), level as i64, from, to],
        )
        .map(|n| n > 0)
        .map_err(|e| self.sql(e))
    }

    fn vector_state(&self, uri: &VPath, level: Level) -> Result<Option<(String, bool)>> {
        let conn = self.reader()?;
        conn.prepare_cached(
            "SELECT version, vec IS NOT NULL FROM records WHERE uri = ?1 AND level = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![uri.as_str(), level as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(|e| self.sql(e))
    }

    fn has_under(&self, prefix: &VPath) -> Result<bool> {
        let conn = self.reader()?;
        conn.prepare_cached(&format!(
            "SELECT EXISTS(SELECT 1 FROM records WHERE {UNDER_SQL})"
        ))
        .and_then(|mut s| s.query_row(under_params(prefix), |r| r.get(0)))
        .map_err(|e| self.sql(e))
    }

    fn stats(&self) -> Result<IndexStats> {
        let conn = self.reader()?;
        let n = |sql: &str| -> Result<u64> {
            conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(|e| self.sql(e))
        };
        Ok(IndexStats {
            records: n("SELECT COUNT(*) FROM records")?,
            lexical: n("SELECT COUNT(*) FROM lex")?,
            vectors: n("SELECT COUNT(*) FROM records WHERE vec IS NOT NULL")?,
            partial: n("SELECT COUNT(*) FROM records WHERE partial != 0")?,
        })
    }

    fn count(&self) -> Result<u64> {
        let conn = self.reader()?;
        conn.query_row("SELECT COUNT(*) FROM records", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.sql(e))
    }

    fn uris(&self, which: Which<'_>) -> Result<Vec<(VPath, Level)>> {
        match which {
            Which::All => self.uris_where("1", []),
            Which::Under(prefix) => self.uris_where(UNDER_SQL, under_params(prefix)),
            Which::NoVector => self.uris_where("vec IS NULL", []),
        }
    }

    fn upsert_many(&self, recs: &[Record]) -> Result<()> {
        SqliteEngine::upsert_many(self, recs)
    }

    fn set_vectors(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        parts: &[PassageVector],
    ) -> Result<bool> {
        SqliteEngine::set_vectors(self, uri, level, version, parts)
    }

    fn delete(&self, uri: &VPath) -> Result<usize> {
        SqliteEngine::delete(self, uri)
    }

    fn delete_prefixes(&self, prefixes: &[&VPath]) -> Result<usize> {
        SqliteEngine::delete_prefixes(self, prefixes)
    }

    fn delete_if_versions(&self, which: &[(&VPath, Level, &str)]) -> Result<usize> {
        SqliteEngine::delete_if_versions(self, which)
    }

    fn rename_prefix(&self, from: &VPath, to: &VPath) -> Result<usize> {
        SqliteEngine::rename_prefix(self, from, to)
    }

    fn search_dense(&self, unit: &[f32], k: usize, under: Option<&VPath>) -> Result<Vec<Hit>> {
        self.search(unit, k, under)
    }

    fn search_lexical(
        &self,
        terms: &[String],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>> {
        SqliteEngine::search_lexical(self, terms, k, under)
    }

    fn doc_freq(&self, terms: &[&str], excluding: Option<&VPath>) -> Result<(u64, Vec<u64>)> {
        SqliteEngine::doc_freq(self, terms, excluding)
    }

    fn verify(&self) -> Result<Vec<String>> {
        SqliteEngine::verify(self)
    }
}

/// A read connection of an engine's pool ([`SqliteEngine::reader`]).
struct Reader<'e> {
    eng: &'e SqliteEngine,
    conn: Option<Connection>,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("until dropped")
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let mut idle = self.eng.readers.lock();
        if idle.len() < IDLE_READERS && conn.is_autocommit() {
            idle.push(conn);
        }
    }
}

/// The stored [`Meta`], or `None` on a new database.
fn read_meta(conn: &Connection) -> rusqlite::Result<Option<Meta>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(None);
    }
    let get = |k: &str| -> rusqlite::Result<Option<String>> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
    };
    match (get("schema")?, get("model")?, get("dim")?) {
        (Some(schema), Some(model), Some(d)) => Ok(Some(Meta {
            schema,
            model,
            dim: d.parse().unwrap_or(0),
        })),
        _ => Ok(None),
    }
}

/// SQL range for "`prefix` itself or anything below it", component-wise: binds `?1` = prefix,
/// `?2` = prefix + "/", `?3` = prefix + "0" ('0' follows '/'). Paths in `[p, p+"0")` that are
/// neither `p` nor under `p/` (such as `p-x`) sort before `p/` and are excluded.
pub(crate) const UNDER_SQL: &str = "uri >= ?1 AND uri < ?3 AND (uri = ?1 OR uri >= ?2)";

pub(crate) fn under_params(prefix: &VPath) -> [String; 3] {
    let p = prefix.as_str();
    [p.to_string(), format!("{p}/"), format!("{p}0")]
}
