//! The derived vector index (`WORKSPACE/.vikingfs/index.db`, SQLite in WAL mode).
//!
//! Owns records — one per (uri, level): a file's content, or a directory's abstract/overview
//! summary — with the vector, a snippet and the version of the source it was built from.
//! The files are the truth; everything here can be rebuilt from them, so the rule is
//! "better to miss a search result than to return a bad one".
//!
//! Layout, chosen so a fresh `vikingfs find` process answers fast:
//! - `records`: one row per record with its exact f32 vector (read back only for re-ranking);
//! - `chunks`: the int8 codes of up to [`CHUNK_SLOTS`] records packed into one blob, so a search
//!   reads a few hundred blobs instead of stepping through one SQLite row per record.
//!
//! The model id and dimension are stored in `meta`; opening with a different embedder is
//! [`IndexError::ModelMismatch`], never a silent mix of vector spaces.

mod chunk;
mod quant;
mod search;
mod store;
mod verify;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use thiserror::Error;

use crate::uri::VPath;
use crate::workspace::Workspace;

pub use search::Found;

/// Records per packed chunk: 256 × 256-dim codes = 64 KiB blobs.
pub const CHUNK_SLOTS: usize = 256;
const SCHEMA_VERSION: &str = "1";
/// Writers (job workers in several processes) queue behind each other this long.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Let SQLite read pages through mmap: the chunk scan then costs memcpy, not a pread per page.
const MMAP_SIZE: i64 = 1 << 32;

#[derive(Debug, Error)]
pub enum IndexError {
    #[error("index {path}: {source}")]
    Sqlite {
        path: PathBuf,
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

/// What a background job writes: the vector of one source at one level.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub uri: VPath,
    pub level: Level,
    pub vector: Vec<f32>,
    pub snippet: String,
    pub source_version: String,
}

/// One search result. `score` is the cosine similarity.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub uri: VPath,
    pub level: Level,
    pub score: f32,
    pub snippet: String,
    pub source_version: String,
}

impl Hit {
    /// Whether the source this hit names is still in the workspace, as the right kind
    /// (a file for content, a directory for summaries).
    pub fn is_live_in(&self, ws: &Workspace) -> bool {
        match std::fs::metadata(ws.fs_path(&self.uri)) {
            Ok(m) => m.is_dir() == self.level.names_directory(),
            Err(_) => false,
        }
    }
}

/// An open index. `Send + Sync`: one connection behind a mutex; open one per process (or per
/// thread, for parallel searches) — opening is cheap.
pub struct Index {
    path: PathBuf,
    dim: usize,
    model_id: String,
    conn: Mutex<Connection>,
    /// See [`search::ID_SET_MAX`]; a field so tests can exercise both `under` strategies.
    id_set_max: usize,
}

impl Index {
    /// Open (creating when missing) the index at `path` for vectors of `dim` from `model_id`.
    pub fn open(path: &Path, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        let index = Self::connect(path, dim, model_id)?;
        index.init(false)?;
        Ok(index)
    }

    /// Open the index at `path` and drop every record when it was built by another model,
    /// dimension or format version, so it can be rebuilt from the files. Returns whether it
    /// was reset.
    pub fn open_or_reset(
        path: &Path,
        dim: usize,
        model_id: &str,
    ) -> Result<(Index, bool), IndexError> {
        let index = Self::connect(path, dim, model_id)?;
        let reset = index.init(true)?;
        Ok((index, reset))
    }

    fn connect(path: &Path, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        if dim == 0 {
            return Err(IndexError::Dimension {
                expected: 1,
                got: 0,
            });
        }
        let err = |source| IndexError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.pragma_update(None, "mmap_size", MMAP_SIZE)
            .map_err(err)?;
        Ok(Index {
            path: path.to_path_buf(),
            dim,
            model_id: model_id.to_string(),
            conn: Mutex::new(conn),
            id_set_max: search::ID_SET_MAX,
        })
    }

    /// Create the schema when missing and check (or, with `reset`, enforce) schema and model.
    fn init(&self, reset: bool) -> Result<bool, IndexError> {
        let mut conn = self.conn.lock();
        let wanted = Meta {
            schema: SCHEMA_VERSION.to_string(),
            model: self.model_id.clone(),
            dim: self.dim,
        };
        if read_meta(&conn).map_err(|e| self.sql(e))?.as_ref() == Some(&wanted) {
            return Ok(false); // The common case: no write lock taken.
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        // Re-read inside the write transaction: another process may have initialised it.
        let stored = read_meta(&tx).map_err(|e| self.sql(e))?;
        match stored {
            Some(m) if m == wanted => return Ok(false),
            Some(m) if !reset && m.schema != wanted.schema => {
                return Err(IndexError::Schema {
                    path: self.path.clone(),
                    found: m.schema,
                })
            }
            Some(m) if !reset => {
                return Err(IndexError::ModelMismatch {
                    path: self.path.clone(),
                    stored_model: m.model,
                    stored_dim: m.dim,
                    model: self.model_id.clone(),
                    dim: self.dim,
                })
            }
            _ => {}
        }
        // New, or reset: the records are derived, so starting empty loses nothing.
        tx.execute_batch(&format!(
            "DROP TABLE IF EXISTS records;
             DROP TABLE IF EXISTS chunks;
             CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE records(
                 id INTEGER PRIMARY KEY, uri TEXT NOT NULL, level INTEGER NOT NULL,
                 version TEXT NOT NULL, chunk INTEGER NOT NULL, slot INTEGER NOT NULL,
                 snippet TEXT NOT NULL, vec BLOB NOT NULL, UNIQUE(uri, level));
             CREATE TABLE chunks(
                 id INTEGER PRIMARY KEY, used INTEGER NOT NULL, data BLOB NOT NULL);
             CREATE INDEX chunks_free ON chunks(id) WHERE used < {CHUNK_SLOTS};"
        ))
        .map_err(|e| self.sql(e))?;
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
        Ok(stored.is_some())
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

    /// Number of records.
    pub fn count(&self) -> Result<u64, IndexError> {
        let conn = self.conn.lock();
        conn.query_row("SELECT COUNT(*) FROM records", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.sql(e))
    }

    /// Every (uri, level) in the index, sorted; for fsck.
    pub fn all_uris(&self) -> Result<Vec<(VPath, Level)>, IndexError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare("SELECT uri, level FROM records ORDER BY uri, level")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
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
        VPath::from_rel(s).map_err(|e| self.corrupt(format!("record uri: {e}")))
    }

    fn level(&self, v: i64) -> Result<Level, IndexError> {
        Level::from_i64(v).ok_or_else(|| self.corrupt(format!("record level {v}")))
    }

    fn check_dim(&self, got: usize) -> Result<(), IndexError> {
        if got != self.dim {
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
