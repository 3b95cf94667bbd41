//! The index's storage seam: what a backend keeps (records, their terms, their vectors, the
//! meta) and answers (reads, the two retrievals), behind one trait with an implementation
//! per backend — SQLite files ([`super::sqlite`]) and a PostgreSQL server ([`super::postgres`]).
//!
//! The front ([`super::Index`]) owns everything that does not depend on where the records
//! live: which model and dimension a handle may use, the meta negotiation at open, the
//! query's terms, the fusion of the two retrievals and the verdict on each hit. An engine
//! owns the rules of its store: every write is one transaction that keeps a record, its
//! terms and its vector in step; every read sees one snapshot.

use super::{Hit, IndexError, IndexStats, Level, PassageVector, Record};
use crate::uri::VPath;

pub(crate) type Result<T> = std::result::Result<T, IndexError>;

/// What an index was built for, as stored in its meta.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Meta {
    pub schema: String,
    pub model: String,
    pub dim: usize,
}

/// What [`Engine::reinit`] does to a store whose meta the handle cannot accept as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reinit {
    /// Another process brought it to an acceptable state meanwhile: use it as it is.
    Keep,
    /// Drop every vector (another model's), keep the records and their terms.
    DropVectors,
    /// Start empty (new, or of another format): the files rebuild it.
    Recreate,
}

/// Which records' names [`Engine::uris`] lists.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a> {
    All,
    /// `prefix` itself and everything below it (never the root: that is `All`).
    Under(&'a VPath),
    /// Records without a vector.
    NoVector,
}

/// A store of records. Every method is one transaction (or one read snapshot).
pub(crate) trait Engine: Send + Sync {
    /// Where the store is, for messages (a file's path, a server's host and database).
    fn location(&self) -> String;

    /// The stored meta, `None` for a new store.
    fn read_meta(&self) -> Result<Option<Meta>>;

    /// In one exclusive transaction: re-read the meta, let `decide` say what to do with it
    /// (its error aborts), do it and store `wanted` as the meta. Returns what was done.
    fn reinit(
        &self,
        wanted: &Meta,
        decide: &dyn Fn(Option<&Meta>) -> Result<Reinit>,
    ) -> Result<Reinit>;

    /// A store without vectors is claimed by `model` of dimension `dim`: it records them
    /// (and readies what holds vectors of that dimension).
    fn claim(&mut self, model: &str, dim: usize) -> Result<()>;

    /// The dimension the stored vectors have (a lexical handle still moves them).
    fn set_dim(&mut self, dim: usize);

    fn meta(&self, key: &str) -> Result<Option<String>>;
    fn set_meta(&self, key: &str, value: &str) -> Result<()>;

    fn version_of(&self, uri: &VPath, level: Level) -> Result<Option<String>>;
    fn restamp(&self, uri: &VPath, level: Level, from: &str, to: &str) -> Result<bool>;
    fn vector_state(&self, uri: &VPath, level: Level) -> Result<Option<(String, bool)>>;
    /// Whether any record is at or below `prefix` (not the root).
    fn has_under(&self, prefix: &VPath) -> Result<bool>;
    fn stats(&self) -> Result<IndexStats>;
    fn count(&self) -> Result<u64>;
    /// The (uri, level) of `which` records, sorted.
    fn uris(&self, which: Which<'_>) -> Result<Vec<(VPath, Level)>>;

    /// Insert or replace each record (vectors already checked against the dimension).
    fn upsert_many(&self, recs: &[Record]) -> Result<()>;
    /// The record's vectors, one per passage (at least one), if it is still at `version`;
    /// whether they were set (each checked against the dimension, as every vector an engine
    /// is given). They replace every vector the record had.
    fn set_vectors(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        parts: &[PassageVector],
    ) -> Result<bool>;
    /// Every level of `uri`.
    fn delete(&self, uri: &VPath) -> Result<usize>;
    /// Each of `prefixes` and everything below it, in one transaction.
    fn delete_prefixes(&self, prefixes: &[&VPath]) -> Result<usize>;
    /// The records named, each only if it still has the version given.
    fn delete_if_versions(&self, which: &[(&VPath, Level, &str)]) -> Result<usize>;
    /// Move `from` and everything below it to `to` (not into itself: checked by the front),
    /// replacing records at the new names.
    fn rename_prefix(&self, from: &VPath, to: &VPath) -> Result<usize>;

    /// The `k` records most similar to the unit vector `unit` (cosine of their best passage,
    /// named in the evidence), best first.
    fn search_dense(&self, unit: &[f32], k: usize, under: Option<&VPath>) -> Result<Vec<Hit>>;
    /// The `k` best records by FTS5's BM25 (name weight [`NAME_WEIGHT`]) for the OR of
    /// `terms` ([`super::text::query_terms`]), best first; `score` is the BM25 value.
    fn search_lexical(&self, terms: &[String], k: usize, under: Option<&VPath>)
        -> Result<Vec<Hit>>;
    /// See [`super::Index::doc_freq`].
    fn doc_freq(&self, terms: &[&str], excluding: Option<&VPath>) -> Result<(u64, Vec<u64>)>;

    /// The store's own consistency check, for fsck: the problems found.
    fn verify(&self) -> Result<Vec<String>>;
}

/// BM25 weight of a record's name against its text: a query word in a file's name says
/// more about the file than the same word in its body.
pub(crate) const NAME_WEIGHT: f64 = 3.0;
