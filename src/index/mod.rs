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

pub(crate) mod analyze;
mod engine;
mod hybrid;
pub mod passages;
pub mod postgres;
pub mod query;
pub mod sqlite;
pub mod text;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::uri::VPath;
use crate::workspace::Workspace;
use engine::{Engine, Meta, Reinit, Which};

pub use hybrid::{Evidence, Found, Mode, Scale, SearchRequest, Verdict, SUMMARY_WEIGHT};
pub use sqlite::CHUNK_SLOTS;

/// The format of the records and their terms; another is rebuilt from the files. (4: a
/// record has a vector per passage.)
const SCHEMA_VERSION: &str = "4";

#[derive(Debug, Error)]
pub enum IndexError {
    #[error("index {}", path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "index {at} was built with model {stored_model:?} (dimension {stored_dim}) but the \
         configured embedder is {model:?} (dimension {dim}); the index must be rebuilt"
    )]
    ModelMismatch {
        at: String,
        stored_model: String,
        stored_dim: usize,
        model: String,
        dim: usize,
    },
    #[error(
        "index {at} has format version {found:?}, this vikingfs writes {SCHEMA_VERSION:?}; \
         the index must be rebuilt"
    )]
    Schema { at: String, found: String },
    #[error("vector of dimension {got} for an index of dimension {expected}")]
    Dimension { expected: usize, got: usize },
    #[error("index {at} is corrupt: {msg}")]
    Corrupt { at: String, msg: String },
    /// A record's URI that is not a valid path.
    #[error("index {at} is corrupt: record uri")]
    CorruptUri {
        at: String,
        #[source]
        source: crate::uri::UriError,
    },
    #[error("PostgreSQL {at} has no pgvector extension (the index needs it for vectors): install pgvector on the server")]
    NoVectorExtension { at: String },
    /// The index on a PostgreSQL server (`storage.backend = "postgres"`).
    #[error("index")]
    Server(#[from] crate::pg::PgError),
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

/// One passage's vector: the lines of the source it covers (1-based, inclusive; `[0, 0]`
/// when unknown: a vector given for a record as a whole) and the model's vector of it.
#[derive(Debug, Clone, PartialEq)]
pub struct PassageVector {
    pub lines: [u32; 2],
    pub vector: Vec<f32>,
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
    /// The order of a dense search's results on every backend: higher score first, ties by
    /// name and level.
    pub(crate) fn best_first(a: &Hit, b: &Hit) -> std::cmp::Ordering {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.uri.cmp(&b.uri))
            .then(a.level.cmp(&b.level))
    }

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

/// An open index on one backend. `Send + Sync`.
pub struct Index {
    /// Where it is, for messages.
    at: String,
    /// Dimension of the stored vectors (0: none stored).
    dim: usize,
    /// The model the vectors are from ("" when none is configured: lexical only).
    model_id: String,
    /// Whether this handle may use and write vectors: a model is configured and it is the
    /// one the stored vectors came from.
    dense: bool,
    opened: Opened,
    engine: Box<dyn Engine>,
}

/// Where an index lives.
#[derive(Clone)]
pub enum Store<'a> {
    /// A SQLite file (the default backend).
    File(&'a Path),
    /// The PostgreSQL server of `storage.backend = "postgres"`, bound to the workspace.
    Server(Arc<crate::pg::Pg>),
}

impl Index {
    /// Open (creating when missing) the index file at `path` for vectors of `dim` from
    /// `model_id`. An index whose vectors came from another model is
    /// [`IndexError::ModelMismatch`].
    pub fn open(path: &Path, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        Self::open_in(Store::File(path), dim, model_id)
    }

    /// [`Index::open`] on any backend.
    pub fn open_in(store: Store<'_>, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        if dim == 0 {
            return Err(IndexError::Dimension {
                expected: 1,
                got: 0,
            });
        }
        let mut index = Self::connect(store, dim, model_id)?;
        index.init(false)?;
        Ok(index)
    }

    /// Open (creating when missing) the index file for lexical search only: vectors already
    /// stored are kept but never used or written.
    pub fn open_lexical(path: &Path) -> Result<Index, IndexError> {
        Self::open_lexical_in(Store::File(path))
    }

    /// [`Index::open_lexical`] on any backend.
    pub fn open_lexical_in(store: Store<'_>) -> Result<Index, IndexError> {
        let mut index = Self::connect(store, 0, "")?;
        index.init(false)?;
        Ok(index)
    }

    /// Open the index file at `path` (lexical only when `dim` is 0) and bring it to this
    /// build and model: an older format is recreated empty (the files rebuild it), vectors of
    /// another model are dropped. Returns whether anything was dropped; [`Index::opened`]
    /// says what.
    pub fn open_or_reset(
        path: &Path,
        dim: usize,
        model_id: &str,
    ) -> Result<(Index, bool), IndexError> {
        Self::open_or_reset_in(Store::File(path), dim, model_id)
    }

    /// [`Index::open_or_reset`] on any backend.
    pub fn open_or_reset_in(
        store: Store<'_>,
        dim: usize,
        model_id: &str,
    ) -> Result<(Index, bool), IndexError> {
        let mut index = Self::connect(store, dim, model_id)?;
        index.init(true)?;
        let reset = matches!(index.opened, Opened::Recreated | Opened::VectorsDropped);
        Ok((index, reset))
    }

    /// The model identity (id, dimension; "" for none) the index at `store` was built with,
    /// when it is not (`model_id`, `dim`) and the index holds records: opening it with
    /// [`Index::open_or_reset_in`] would drop or make every vector. `None` for a new or empty
    /// index, one of another format (rebuilt from the files anyway), or one of this model.
    /// Reads only.
    pub fn built_with_other(
        store: Store<'_>,
        dim: usize,
        model_id: &str,
    ) -> Result<Option<(String, usize)>, IndexError> {
        let index = Self::connect(store, dim, model_id)?;
        let Some(m) = index.engine.read_meta()? else {
            return Ok(None);
        };
        let same = m.model == model_id && (model_id.is_empty() || m.dim == dim);
        if m.schema != SCHEMA_VERSION || same || index.engine.count()? == 0 {
            return Ok(None);
        }
        Ok(Some((m.model, m.dim)))
    }

    fn connect(store: Store<'_>, dim: usize, model_id: &str) -> Result<Index, IndexError> {
        let engine: Box<dyn Engine> = match store {
            Store::File(path) => Box::new(sqlite::SqliteEngine::open(path)?),
            Store::Server(pg) => Box::new(postgres::PgIndex::open(pg)?),
        };
        Ok(Index {
            at: engine.location(),
            dim,
            model_id: model_id.to_string(),
            dense: dim > 0,
            opened: Opened::Current,
            engine,
        })
    }

    /// Create the store when missing and check (or, with `reset`, enforce) schema and model.
    fn init(&mut self, reset: bool) -> Result<(), IndexError> {
        let wanted = Meta {
            schema: SCHEMA_VERSION.to_string(),
            model: self.model_id.clone(),
            dim: self.dim,
        };
        let stored = self.engine.read_meta()?;
        if let Some(m) = &stored {
            if m.schema == wanted.schema && self.accepts(m, reset) {
                return self.adopt(m, reset); // The common case: no write lock taken.
            }
        }
        let decide = |stored: Option<&Meta>| match stored {
            Some(m) if m.schema == wanted.schema && self.accepts(m, reset) => Ok(Reinit::Keep),
            Some(m) if m.schema != wanted.schema && !reset => Err(IndexError::Schema {
                at: self.at.clone(),
                found: m.schema.clone(),
            }),
            Some(m) if m.schema == wanted.schema && !reset => Err(IndexError::ModelMismatch {
                at: self.at.clone(),
                stored_model: m.model.clone(),
                stored_dim: m.dim,
                model: self.model_id.clone(),
                dim: self.dim,
            }),
            // Another model's vectors: drop them, keep the records and their terms.
            Some(m) if m.schema == wanted.schema => Ok(Reinit::DropVectors),
            // New, or of another format: the records are derived, so starting empty loses
            // nothing (the caller rebuilds them from the files).
            _ => Ok(Reinit::Recreate),
        };
        let existed = stored.is_some();
        let done = self.engine.reinit(&wanted, &decide)?;
        match done {
            Reinit::Keep => {
                let m = self
                    .engine
                    .read_meta()?
                    .ok_or_else(|| self.corrupt("meta vanished"))?;
                return self.adopt(&m, reset);
            }
            Reinit::DropVectors => self.opened = Opened::VectorsDropped,
            Reinit::Recreate if existed => self.opened = Opened::Recreated,
            Reinit::Recreate => self.opened = Opened::Created,
        }
        self.engine.set_dim(self.dim);
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
    /// manages the stored vectors with their dimension; a model claims an index that has no
    /// vectors yet.
    fn adopt(&mut self, m: &Meta, reset: bool) -> Result<(), IndexError> {
        if self.model_id.is_empty() || (m.model.is_empty() && !reset) {
            self.dim = m.dim;
            self.dense = false;
            self.engine.set_dim(self.dim);
            return Ok(());
        }
        if m.model.is_empty() {
            self.opened = Opened::Claimed;
            self.engine.claim(&self.model_id, self.dim)?;
        }
        self.dense = true;
        self.engine.set_dim(self.dim);
        Ok(())
    }

    /// How [`Index::open_or_reset`] found the store.
    pub fn opened(&self) -> Opened {
        self.opened
    }

    /// Whether searches use, and writes take, vectors.
    pub fn has_dense(&self) -> bool {
        self.dense
    }

    /// Where the index is (a file, or a server's host and database), for messages.
    pub fn location(&self) -> &str {
        &self.at
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The version of the source the record at (uri, level) was built from.
    pub fn version_of(&self, uri: &VPath, level: Level) -> Result<Option<String>, IndexError> {
        self.engine.version_of(uri, level)
    }

    /// A value this index keeps about itself (`None` when unset).
    pub fn meta(&self, key: &str) -> Result<Option<String>, IndexError> {
        self.engine.meta(key)
    }

    /// Keep `value` under `key` (written only when it changes).
    pub fn set_meta(&self, key: &str, value: &str) -> Result<(), IndexError> {
        if self.meta(key)?.as_deref() == Some(value) {
            return Ok(());
        }
        self.engine.set_meta(key, value)
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
        self.engine.restamp(uri, level, from, to)
    }

    /// The version of the record at (uri, level) and whether it has a vector; `None` when
    /// there is no such record.
    pub fn vector_state(
        &self,
        uri: &VPath,
        level: Level,
    ) -> Result<Option<(String, bool)>, IndexError> {
        self.engine.vector_state(uri, level)
    }

    /// Does any record name `prefix` or a path below it? (A read: no write transaction.)
    pub fn has_under(&self, prefix: &VPath) -> Result<bool, IndexError> {
        if prefix.is_root() {
            return Ok(self.count()? > 0);
        }
        self.engine.has_under(prefix)
    }

    /// The model the stored vectors are from ("" when none).
    pub fn stored_model(&self) -> Result<String, IndexError> {
        Ok(self
            .engine
            .read_meta()?
            .map(|m| m.model)
            .unwrap_or_default())
    }

    /// Records, lexical rows and vectors.
    pub fn stats(&self) -> Result<IndexStats, IndexError> {
        self.engine.stats()
    }

    /// Records that have no vector yet (the model's backlog), for re-queueing their jobs.
    pub fn missing_vectors(&self) -> Result<Vec<(VPath, Level)>, IndexError> {
        self.engine.uris(Which::NoVector)
    }

    /// The (uri, level) of every record at or below `prefix`, sorted.
    pub fn uris_under(&self, prefix: &VPath) -> Result<Vec<(VPath, Level)>, IndexError> {
        if prefix.is_root() {
            return self.all_uris();
        }
        self.engine.uris(Which::Under(prefix))
    }

    /// Number of records.
    pub fn count(&self) -> Result<u64, IndexError> {
        self.engine.count()
    }

    /// Every (uri, level) in the index, sorted; for fsck.
    pub fn all_uris(&self) -> Result<Vec<(VPath, Level)>, IndexError> {
        self.engine.uris(Which::All)
    }

    /// Insert or replace the record for (rec.uri, rec.level).
    pub fn upsert(&self, rec: &Record) -> Result<(), IndexError> {
        self.upsert_many(std::slice::from_ref(rec))
    }

    /// Upsert many records in one transaction (bulk builds, rebuilds).
    pub fn upsert_many(&self, recs: &[Record]) -> Result<(), IndexError> {
        for r in recs {
            if let Some(v) = &r.vector {
                self.check_dim(v.len())?;
            }
        }
        self.engine.upsert_many(recs)
    }

    /// Give the record at (uri, level) the vector `v` if it is still at `version` (else the
    /// source changed since the vector's text was read: a newer job embeds it). Returns
    /// whether it was set. Never creates a record, so it needs no lock: a record that rm or
    /// mv took away stays away.
    pub fn set_vector(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        v: &[f32],
    ) -> Result<bool, IndexError> {
        let whole = PassageVector {
            lines: [0, 0],
            vector: v.to_vec(),
        };
        self.set_vectors(uri, level, version, std::slice::from_ref(&whole))
    }

    /// [`Index::set_vector`] with a vector for each passage of the source (at least one): a
    /// dense search scores the record by its best passage and names it.
    pub fn set_vectors(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        parts: &[PassageVector],
    ) -> Result<bool, IndexError> {
        if parts.is_empty() {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: 0,
            });
        }
        for p in parts {
            self.check_dim(p.vector.len())?;
        }
        self.engine.set_vectors(uri, level, version, parts)
    }

    /// Delete every level of `uri` (not what lies below it). Returns the records removed.
    pub fn delete(&self, uri: &VPath) -> Result<usize, IndexError> {
        self.engine.delete(uri)
    }

    /// Delete `prefix` itself and everything below it (component-wise), in one transaction.
    pub fn delete_prefix(&self, prefix: &VPath) -> Result<usize, IndexError> {
        self.engine.delete_prefixes(&[prefix])
    }

    /// [`Index::delete_prefix`] of each of `prefixes`, all in one transaction (a batch of
    /// removals: one commit, and one segment of the lexical index, for all of them).
    pub fn delete_prefixes(&self, prefixes: &[&VPath]) -> Result<usize, IndexError> {
        if prefixes.is_empty() {
            return Ok(0);
        }
        self.engine.delete_prefixes(prefixes)
    }

    /// Delete the record at (uri, level) only if it was built from `version`; a record that a
    /// concurrent job rebuilt from a newer source survives. Returns whether it was deleted.
    pub fn delete_if_version(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
    ) -> Result<bool, IndexError> {
        Ok(self.delete_if_versions(&[(uri, level, version)])? > 0)
    }

    /// [`Index::delete_if_version`] for many records in one transaction. Returns how many
    /// were deleted.
    pub fn delete_if_versions(&self, which: &[(&VPath, Level, &str)]) -> Result<usize, IndexError> {
        if which.is_empty() {
            return Ok(0);
        }
        self.engine.delete_if_versions(which)
    }

    /// Move `from` and everything below it to `to`, in one transaction. Records already at the
    /// destination names are replaced (as `rename(2)` replaces the target). Returns the records moved.
    pub fn rename_prefix(&self, from: &VPath, to: &VPath) -> Result<usize, IndexError> {
        if from == to {
            return Ok(0);
        }
        if to.starts_with(from) {
            return Err(IndexError::RenameIntoSelf {
                from: from.clone(),
                to: to.clone(),
            });
        }
        self.engine.rename_prefix(from, to)
    }

    /// The `k` records most similar to `query` (cosine), best first; only records at or below
    /// `under` when given. A query of all zeros matches nothing.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        self.check_dim(query.len())?;
        let unit = sqlite::quant::normalised(query);
        if k == 0 || unit.iter().all(|&x| x == 0.0) {
            return Ok(Vec::new());
        }
        self.engine.search_dense(&unit, k, under)
    }

    /// The `k` records that best match `query` by BM25 (score: the BM25 value, larger is
    /// better), only at or below `under` when given. A query without terms matches nothing.
    pub fn search_lexical(
        &self,
        query: &str,
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        let terms = text::query_terms(query);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        self.engine.search_lexical(&terms, k, under)
    }

    /// How many content records (files) there are, and how many of them hold each of
    /// `terms`, not counting those at or below `excluding` (a directory weighs its words
    /// against the rest of the workspace). A term is made into index terms as a document's
    /// text would be ([`text::document`], then FTS5's porter stemmer), so `locks` counts the
    /// files with `lock`, `locks` or `locking`; a term of several index terms (`LockGuard`:
    /// `lockguard lock guard`) counts the files holding the rarest of them. Summary records
    /// are not counted: a summary's words are its children's, and counting them would let
    /// each written summary shift the statistics it was made from. A term without index
    /// terms counts 0. Read from the index's own per-term statistics, not by a search per
    /// term (see each engine).
    pub fn doc_freq(
        &self,
        terms: &[&str],
        excluding: Option<&VPath>,
    ) -> Result<(u64, Vec<u64>), IndexError> {
        if excluding.is_some_and(|p| p.is_root()) {
            return Ok((0, vec![0; terms.len()]));
        }
        self.engine.doc_freq(terms, excluding)
    }

    /// Consistency check for fsck (the store's own invariants). Returns the problems found.
    pub fn verify(&self) -> Result<Vec<String>, IndexError> {
        self.engine.verify()
    }

    fn corrupt(&self, msg: impl Into<String>) -> IndexError {
        IndexError::Corrupt {
            at: self.at.clone(),
            msg: msg.into(),
        }
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

impl IndexError {
    /// The index file is damaged (rather than busy, missing or full): it is rebuilt. An
    /// index on a server is never damaged as a file is: its errors are the server's.
    pub fn is_damage(&self) -> bool {
        match self {
            IndexError::Sqlite { source, .. } => crate::db::is_damage_code(source),
            IndexError::Corrupt { .. } | IndexError::CorruptUri { .. } => true,
            _ => false,
        }
    }
}
