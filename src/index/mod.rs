//! The derived index (`WORKSPACE/.vikingfs/index.db`, SQLite in WAL mode): lexical and dense.
//!
//! Owns records — one per (uri, level): a file's content, or a directory's abstract/overview
//! summary — with a snippet, the version of the source it was built from, its terms in the
//! lexical index and, once a model has embedded it, its vector. The files are the truth;
//! everything here can be rebuilt from them, so the rule is "better to miss a search result
//! than to return a bad one".
//!
//! Layout, chosen so a fresh `vikingfs find` process answers fast:
//! - `records`: one row per record with its exact f32 vector when it has one (read back only
//!   for re-ranking);
//! - `lex`: an FTS5 table (BM25) over each record's name and text, rowid = the record's id,
//!   written in the same transaction as the record, so the two never disagree ([`text`]
//!   makes the terms);
//! - `chunks`: the int8 codes of up to [`CHUNK_SLOTS`] vectors packed into one blob, so a
//!   dense search reads a few hundred blobs instead of stepping through one row per record.
//!
//! Invariants: every record has exactly one `lex` row and every `lex` row is a record; a
//! record has a vector only from the model named in `meta`, built from the record's current
//! version (a new version clears the vector until the model embeds it again). Opening with a
//! different model is [`IndexError::ModelMismatch`] or, for the daemon, drops the vectors
//! only; never a silent mix of vector spaces.

mod chunk;
mod hybrid;
mod lexical;
mod quant;
mod search;
mod store;
pub mod text;
mod verify;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use thiserror::Error;

use crate::uri::VPath;
use crate::workspace::Workspace;

pub use hybrid::{Evidence, Mode, SearchRequest, Verdict, SUMMARY_WEIGHT};
pub use search::Found;

/// Records per packed chunk: 256 × 256-dim codes = 64 KiB blobs.
pub const CHUNK_SLOTS: usize = 256;
const SCHEMA_VERSION: &str = "3";
/// Writers (job workers in several processes) queue behind each other this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Let SQLite read pages through mmap: the chunk scan then costs memcpy, not a pread per page.
const MMAP_SIZE: i64 = 1 << 32;

#[derive(Debug, Error)]
pub enum IndexError {
    #[error("index {}", path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "index {path} was built with model {stored_model:?} (dimension {stored_dim}) but the \
         configured embedder is {model:?} (dimension {dim}); the index must be rebuilt"
    )]
    ModelMismatch {
        path: PathBuf,
        stored_model: String,
        stored_dim: usize,
        model: String,
        dim: usize,
    },
    #[error(
        "index {path} has format version {found:?}, this vikingfs writes {SCHEMA_VERSION:?}; \
         the index must be rebuilt"
    )]
    Schema { path: PathBuf, found: String },
    #[error("vector of dimension {got} for an index of dimension {expected}")]
    Dimension { expected: usize, got: usize },
    #[error("index {path} is corrupt: {msg}")]
    Corrupt { path: PathBuf, msg: String },
    /// A record's URI that is not a valid path.
    #[error("index {} is corrupt: record uri", path.display())]
    CorruptUri {
        path: PathBuf,
        #[source]
        source: crate::uri::UriError,
    },
    #[error("cannot rename {from} into its own subtree {to}")]
    RenameIntoSelf { from: VPath, to: VPath },
}

/// OpenViking's L0/L1/L2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// L0: a directory's `.abstract.md`.
    Abstract = 0,
    /// L1: a directory's `.overview.md`.
    Overview = 1,
    /// L2: a file's own content.
    Content = 2,
}

impl Level {
    pub fn from_i64(v: i64) -> Option<Level> {
        match v {
            0 => Some(Level::Abstract),
            1 => Some(Level::Overview),
            2 => Some(Level::Content),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Abstract => "abstract",
            Level::Overview => "overview",
            Level::Content => "content",
        }
    }

    /// Content records name a file, summary records a directory.
    pub fn names_directory(self) -> bool {
        self != Level::Content
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a background job writes: one source at one level, as read at `source_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub uri: VPath,
    pub level: Level,
    /// The text the lexical index holds (with the record's name); may be empty.
    pub text: String,
    /// The model's vector of the text, when it is known already; `None` keeps the stored
    /// vector if the version is unchanged and clears it otherwise.
    pub vector: Option<Vec<f32>>,
    pub snippet: String,
    pub source_version: String,
    /// The text is only the head of a source longer than the indexing limit.
    pub partial: bool,
}

/// One search result. `score` orders results: the cosine similarity for a dense search, the
/// fused score for [`Index::find`].
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub uri: VPath,
    pub level: Level,
    pub score: f32,
    pub snippet: String,
    pub source_version: String,
    /// Why it was returned.
    pub evidence: Evidence,
}

/// How [`Index::open_or_reset`] found the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// As this build and model left it.
    Current,
    /// Created empty.
    Created,
    /// Of an older format (or damaged meta): recreated empty, to be rebuilt from the files.
    Recreated,
    /// Vectors of another model (or none configured now) were dropped; records stay.
    VectorsDropped,
    /// It had no vectors, and the configured model claimed it (its vectors are to be made).
    Claimed,
}

/// Sizes, for `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    pub records: u64,
    /// Rows of the lexical index (one per record).
    pub lexical: u64,
    /// Records with a vector of the current model.
    pub vectors: u64,
    /// Records of files indexed only up to the limit (`vikingfs.index.max_file_bytes`).
    pub partial: u64,
}

impl Hit {
    /// Whether the source this hit names is still in the workspace, as the right kind
    /// (a file for content, a directory for summaries).
    pub fn is_live_in(&self, ws: &Workspace) -> bool {
        match std::fs::metadata(ws.fs_path(&self.uri)) {
            Ok(m) => m.is_dir() == self.level.names_directory(),
            // Deeper than PATH_MAX as a backing path (the mount allows it): look relative to
            // the data root, in steps.
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                crate::sys::DataRoot::open(&ws.data_root())
                    .and_then(|root| root.lstat(self.uri.as_bytes()))
                    .is_ok_and(|st| st.is_dir() == self.level.names_directory())
            }
            Err(_) => false,
        }
    }
}

/// An open index. `Send + Sync`: one connection behind a mutex; open one per process (or per
/// thread, for parallel searches) — opening is cheap.
pub struct Index {
    path: PathBuf,
    /// Dimension of the stored vectors (0: none stored).
    dim: usize,
    /// The model the vectors are from ("" when none is configured: lexical only).
    model_id: String,
    /// Whether this handle may use and write vectors: a model is configured and it is the
    /// one the stored vectors came from.
    dense: bool,
    opened: Opened,
    conn: Mutex<Connection>,
    /// See [`search::ID_SET_MAX`]; a field so tests can exercise both `under` strategies.
    id_set_max: usize,
}

impl Index {
    /// Open (creating when missing) the index at `path` for vectors of `dim` from `model_id`.
    /// An index whose vectors came from another model is [`IndexError::ModelMismatch`].
    pub fn open(path: &Path, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        if dim == 0 {
            return Err(IndexError::Dimension {
                expected: 1,
                got: 0,
            });
        }
        let mut index = Self::connect(path, dim, model_id)?;
        index.init(false)?;
        Ok(index)
    }

    /// Open (creating when missing) the index for lexical search only: vectors already stored
    /// are kept but never used or written.
    pub fn open_lexical(path: &Path) -> Result<Index, IndexError> {
        let mut index = Self::connect(path, 0, "")?;
        index.init(false)?;
        Ok(index)
    }

    /// Open the index at `path` (lexical only when `dense` is `None`) and bring it to this
    /// build and model: an older format is recreated empty (the files rebuild it), vectors of
    /// another model are dropped. Returns whether anything was dropped; [`Index::opened`]
    /// says what.
    pub fn open_or_reset(
        path: &Path,
        dim: usize,
        model_id: &str,
    ) -> Result<(Index, bool), IndexError> {
        let mut index = Self::connect(path, dim, model_id)?;
        index.init(true)?;
        let reset = matches!(index.opened, Opened::Recreated | Opened::VectorsDropped);
        Ok((index, reset))
    }

    fn connect(path: &Path, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        let err = |source| IndexError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = crate::db::open(
            path,
            crate::db::Open {
                busy_timeout: BUSY_TIMEOUT,
                mmap_size: MMAP_SIZE,
            },
        )
        .map_err(err)?;
        Ok(Index {
            path: path.to_path_buf(),
            dim,
            model_id: model_id.to_string(),
            dense: dim > 0,
            opened: Opened::Current,
            conn: Mutex::new(conn),
            id_set_max: search::ID_SET_MAX,
        })
    }

    /// Create the schema when missing and check (or, with `reset`, enforce) schema and model.
    fn init(&mut self, reset: bool) -> Result<(), IndexError> {
        let wanted = Meta {
            schema: SCHEMA_VERSION.to_string(),
            model: self.model_id.clone(),
            dim: self.dim,
        };
        let stored = read_meta(&self.conn.lock()).map_err(|e| self.sql(e))?;
        if let Some(m) = &stored {
            if m.schema == wanted.schema && self.accepts(m, reset) {
                return self.adopt(m, reset); // The common case: no write lock taken.
            }
        }
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| IndexError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        // Re-read inside the write transaction: another process may have initialised it.
        let stored = read_meta(&tx).map_err(|e| self.sql(e))?;
        let opened = match &stored {
            Some(m) if m.schema == wanted.schema && self.accepts(m, reset) => {
                drop(tx);
                drop(conn);
                let m = stored.expect("matched Some");
                return self.adopt(&m, reset);
            }
            Some(m) if m.schema != wanted.schema && !reset => {
                return Err(IndexError::Schema {
                    path: self.path.clone(),
                    found: m.schema.clone(),
                })
            }
            Some(m) if m.schema == wanted.schema && !reset => {
                return Err(IndexError::ModelMismatch {
                    path: self.path.clone(),
                    stored_model: m.model.clone(),
                    stored_dim: m.dim,
                    model: self.model_id.clone(),
                    dim: self.dim,
                })
            }
            Some(m) if m.schema == wanted.schema => {
                // Another model's vectors: drop them, keep the records and their terms.
                tx.execute_batch(
                    "DELETE FROM chunks;
                     UPDATE records SET chunk = NULL, slot = NULL, vec = NULL
                      WHERE vec IS NOT NULL;",
                )
                .map_err(|e| self.sql(e))?;
                Opened::VectorsDropped
            }
            other => {
                // New, or of another format: the records are derived, so starting empty loses
                // nothing (the caller rebuilds them from the files).
                tx.execute_batch(&format!(
                    "DROP TABLE IF EXISTS records;
                     DROP TABLE IF EXISTS chunks;
                     DROP TABLE IF EXISTS lex;
                     CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                     CREATE TABLE records(
                         id INTEGER PRIMARY KEY, uri TEXT NOT NULL, level INTEGER NOT NULL,
                         version TEXT NOT NULL, snippet TEXT NOT NULL,
                         chunk INTEGER, slot INTEGER, vec BLOB,
                         partial INTEGER NOT NULL DEFAULT 0, UNIQUE(uri, level));
                     CREATE INDEX records_novec ON records(id) WHERE vec IS NULL;
                     CREATE TABLE chunks(
                         id INTEGER PRIMARY KEY, used INTEGER NOT NULL, data BLOB NOT NULL);
                     CREATE INDEX chunks_free ON chunks(id) WHERE used < {CHUNK_SLOTS};
                     CREATE VIRTUAL TABLE lex USING fts5(
                         name, body, tokenize = 'porter unicode61 remove_diacritics 2');"
                ))
                .map_err(|e| self.sql(e))?;
                if other.is_some() {
                    Opened::Recreated
                } else {
                    Opened::Created
                }
            }
        };
        for (k, v) in [
            ("schema", wanted.schema),
            ("model", wanted.model),
            ("dim", wanted.dim.to_string()),
        ] {
            tx.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![k, v],
            )
            .map_err(|e| self.sql(e))?;
        }
        tx.commit().map_err(|e| self.sql(e))?;
        self.opened = opened;
        Ok(())
    }

    /// May this handle use an index of the current format whose meta is `m` as it is?
    fn accepts(&self, m: &Meta, reset: bool) -> bool {
        if m.model == self.model_id && m.dim == self.dim {
            return true;
        }
        if self.model_id.is_empty() {
            // Lexical only: a reader keeps the vectors it will not use; the daemon (reset)
            // drops vectors no configured model can extend (unless there are none).
            return !reset || m.model.is_empty();
        }
        // No vectors yet: a configured model claims the index (the daemon does, and fills
        // in the vectors; a reader only searches the terms).
        m.model.is_empty()
    }

    /// Take on the stored meta `m` (accepted by [`Self::accepts`]): a lexical-only handle
    /// manages the stored vectors' chunks with their dimension; a model claims an index that
    /// has no vectors yet.
    fn adopt(&mut self, m: &Meta, reset: bool) -> Result<(), IndexError> {
        if self.model_id.is_empty() || (m.model.is_empty() && !reset) {
            self.dim = m.dim;
            self.dense = false;
            return Ok(());
        }
        if m.model.is_empty() {
            self.opened = Opened::Claimed;
            let conn = self.conn.lock();
            for (k, v) in [
                ("model", self.model_id.clone()),
                ("dim", self.dim.to_string()),
            ] {
                conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                    params![k, v],
                )
                .map_err(|e| self.sql(e))?;
            }
        }
        self.dense = true;
        Ok(())
    }

    /// How [`Index::open_or_reset`] found the database.
    pub fn opened(&self) -> Opened {
        self.opened
    }

    /// Whether searches use, and writes take, vectors.
    pub fn has_dense(&self) -> bool {
        self.dense
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The version of the source the record at (uri, level) was built from.
    pub fn version_of(&self, uri: &VPath, level: Level) -> Result<Option<String>, IndexError> {
        let conn = self.conn.lock();
        conn.prepare_cached("SELECT version FROM records WHERE uri = ?1 AND level = ?2")
            .and_then(|mut s| {
                s.query_row(params![uri.as_str(), level as i64], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.sql(e))
    }

    /// A value this index keeps about itself (`None` when unset).
    pub fn meta(&self, key: &str) -> Result<Option<String>, IndexError> {
        let conn = self.conn.lock();
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Keep `value` under `key` (written only when it changes).
    pub fn set_meta(&self, key: &str, value: &str) -> Result<(), IndexError> {
        if self.meta(key)?.as_deref() == Some(value) {
            return Ok(());
        }
        let conn = self.conn.lock();
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
            [key, value],
        )
        .map(drop)
        .map_err(|e| self.sql(e))
    }

    /// Give the record at (uri, level) the version `to` if it still has `from` (a source
    /// that is the same file under another inode: a copied workspace). Whether it did.
    pub fn restamp(
        &self,
        uri: &VPath,
        level: Level,
        from: &str,
        to: &str,
    ) -> Result<bool, IndexError> {
        let conn = self.conn.lock();
        conn.execute(
            "UPDATE records SET version = ?4 WHERE uri = ?1 AND level = ?2 AND version = ?3",
            params![uri.as_str(), level as i64, from, to],
        )
        .map(|n| n > 0)
        .map_err(|e| self.sql(e))
    }

    /// The version of the record at (uri, level) and whether it has a vector; `None` when
    /// there is no such record.
    pub fn vector_state(
        &self,
        uri: &VPath,
        level: Level,
    ) -> Result<Option<(String, bool)>, IndexError> {
        let conn = self.conn.lock();
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

    /// Does any record name `prefix` or a path below it? (A read: no write transaction.)
    pub fn has_under(&self, prefix: &VPath) -> Result<bool, IndexError> {
        if prefix.is_root() {
            return Ok(self.count()? > 0);
        }
        let conn = self.conn.lock();
        conn.prepare_cached(&format!(
            "SELECT EXISTS(SELECT 1 FROM records WHERE {UNDER_SQL})"
        ))
        .and_then(|mut s| s.query_row(under_params(prefix), |r| r.get(0)))
        .map_err(|e| self.sql(e))
    }

    /// The model the stored vectors are from ("" when none).
    pub fn stored_model(&self) -> Result<String, IndexError> {
        let conn = self.conn.lock();
        Ok(read_meta(&conn)
            .map_err(|e| self.sql(e))?
            .map(|m| m.model)
            .unwrap_or_default())
    }

    /// Records, lexical rows and vectors.
    pub fn stats(&self) -> Result<IndexStats, IndexError> {
        let conn = self.conn.lock();
        let n = |sql: &str| -> Result<u64, IndexError> {
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

    /// Records that have no vector yet (the model's backlog), for re-queueing their jobs.
    pub fn missing_vectors(&self) -> Result<Vec<(VPath, Level)>, IndexError> {
        self.uris_where("vec IS NULL", [])
    }

    /// The (uri, level) of every record at or below `prefix`, sorted.
    pub fn uris_under(&self, prefix: &VPath) -> Result<Vec<(VPath, Level)>, IndexError> {
        if prefix.is_root() {
            return self.all_uris();
        }
        self.uris_where(UNDER_SQL, under_params(prefix))
    }

    /// Number of records.
    pub fn count(&self) -> Result<u64, IndexError> {
        let conn = self.conn.lock();
        conn.query_row("SELECT COUNT(*) FROM records", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.sql(e))
    }

    /// Every (uri, level) in the index, sorted; for fsck.
    pub fn all_uris(&self) -> Result<Vec<(VPath, Level)>, IndexError> {
        self.uris_where("1", [])
    }

    /// The (uri, level) of the records matching the SQL condition `cond`, sorted.
    fn uris_where(
        &self,
        cond: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<(VPath, Level)>, IndexError> {
        let conn = self.conn.lock();
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

    fn sql(&self, source: rusqlite::Error) -> IndexError {
        IndexError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, msg: impl Into<String>) -> IndexError {
        IndexError::Corrupt {
            path: self.path.clone(),
            msg: msg.into(),
        }
    }

    fn vpath(&self, s: &str) -> Result<VPath, IndexError> {
        VPath::from_rel(s).map_err(|source| IndexError::CorruptUri {
            path: self.path.clone(),
            source,
        })
    }

    fn level(&self, v: i64) -> Result<Level, IndexError> {
        Level::from_i64(v).ok_or_else(|| self.corrupt(format!("record level {v}")))
    }

    fn check_dim(&self, got: usize) -> Result<(), IndexError> {
        if !self.dense || got != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got,
            });
        }
        Ok(())
    }
}

/// What an index was built for, as stored in its `meta` table.
#[derive(Debug, PartialEq)]
struct Meta {
    schema: String,
    model: String,
    dim: usize,
}

/// The stored [`Meta`], or `None` on a new database.
impl IndexError {
    /// The index file is damaged (rather than busy, missing or full): it is rebuilt.
    pub fn is_damage(&self) -> bool {
        match self {
            IndexError::Sqlite { source, .. } => crate::db::is_damage_code(source),
            IndexError::Corrupt { .. } | IndexError::CorruptUri { .. } => true,
            _ => false,
        }
    }
}

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
