//! The locked operations: rm, mv, add-resource and single-file writes, each under the design's
//! locks and in its crash-safe order, plus the background jobs that derive the index and the
//! directory summaries from the files, and the repair (`fsck`) that rebuilds what is derived.
//!
//! Rules every operation here keeps (seed doc, "Consistency Issues and Solutions"):
//! - the files are the truth; the index is derived, so an index change that would make a search
//!   name a missing file happens *before* the file change (rm) or together with it (mv);
//! - an operation that moves or removes several things records an *intent* in the journal
//!   ([`journal`]) after taking its locks and clears it before releasing them, so a process that
//!   dies half-way leaves a record that [`Ops::recover`] finishes forward under the same locks
//!   (a dead owner's locks are free at once);
//! - queue work is idempotent and a job never writes a record for a source that changed or
//!   vanished since it read it (checked under the source's lock, [`jobs`]).
//!
//! Faces (CLI, FUSE mount, sessions) only call [`Ops`].

mod add;
mod at;
pub mod derive;
mod error;
pub mod fsck;
pub mod gauges;
pub mod jobs;
pub mod journal;
mod lifecycle;
mod light;
mod locked;
pub mod migrate;
mod mv;
pub mod rebuild;
mod recover;
mod reindex;
mod reserve;
mod rm;
pub mod search;
pub mod stores;
mod write;

pub use error::OpsError;
pub use light::Light;
pub use locked::LockedMutations;
pub use write::Release;

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::embed::{self, Embedder};
use crate::error::Chain;
use crate::index::{IndexError, Level, Opened};
use crate::lock::LockManager;
use crate::semantic::{self, Summarizer};
use crate::uri::VPath;
use crate::workspace::Workspace;

pub use add::{AddOptions, AddReport};
pub use fsck::{FsckReport, Problem};
pub use journal::{Intent, Journal};
pub use reindex::ReindexReport;
pub use rm::RmReport;
pub use stores::{index_home, open_queue_of, IndexHome, Stores};

pub type Result<T, E = OpsError> = std::result::Result<T, E>;

/// The operations engine of one process, the composition root of `ops`: the store kernel
/// ([`Stores`], which the locked operations run over) and the derivers beside it — the dense
/// model, the summariser, the lifecycle refresher's working set, the mount's write probe and
/// a background rebuild. Cheap to share (`Arc<Ops>`); every method is safe to call from
/// several threads. It dereferences to its [`Stores`], so a face calls a locked operation
/// (`ops.rm(..)`) and a deriving one (`ops.find(..)`) on the same handle.
pub struct Ops {
    stores: Arc<Stores>,
    /// The dense model; `None`: search is lexical only.
    embedder: Option<Arc<dyn Embedder>>,
    summarizer: Arc<dyn Summarizer>,
    /// Lifecycles a job of this process is working for right now, with how many jobs: the
    /// refresher thread keeps their locks fresh however long a job runs (a chat model may
    /// take a minute; OpenViking #1165, #3273).
    working: Arc<parking_lot::Mutex<std::collections::HashMap<String, usize>>>,
    /// Set by the mount daemon: is this file open for writing through the mount right now?
    write_probe: std::sync::OnceLock<WriteProbe>,
    /// A rebuild of the index from the files running in the background ([`rebuild`]).
    rebuild: rebuild::Progress,
    /// This engine itself, for a background rebuild, which outlives `&self`.
    me: std::sync::Weak<Ops>,
}

impl std::ops::Deref for Ops {
    type Target = Stores;

    fn deref(&self) -> &Stores {
        &self.stores
    }
}

/// See [`Ops::set_write_probe`].
pub type WriteProbe = Box<dyn Fn(&VPath) -> bool + Send + Sync>;

impl Ops {
    /// Open every store of `ws` as `config` says, and finish operations that a dead process
    /// left half-done ([`Stores::recover`]; failures there are logged, never fatal).
    pub fn open(ws: &Workspace, config: &Config) -> Result<Arc<Ops>> {
        Self::open_with_progress(ws, config, &mut |done, total| {
            if done == total || done % 1000 == 0 {
                tracing::info!(done, total, "rebuilding the lexical index from the files");
            }
        })
    }

    /// [`Ops::open`] that reports the progress of a rebuild of the index from the files (an
    /// index of an older format, or a missing one beside existing files) to `progress`
    /// as (done, total) files.
    pub fn open_with_progress(
        ws: &Workspace,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Arc<Ops>> {
        let ops = Self::from_config(ws, config)?;
        if ops.needs_rebuild()? && !ops.rebuilt_elsewhere() {
            // Derived state rebuilds itself: the terms at once, vectors and summaries queued.
            ops.rebuild_index(progress)?;
        }
        Ok(ops)
    }

    /// [`Ops::open`] for the mount daemon: an index to rebuild from the files is rebuilt by a
    /// thread of its own while the mount serves (searches answer from what is rebuilt so
    /// far; `status` shows how far), not before the mount comes up.
    pub fn open_serving(ws: &Workspace, config: &Config) -> Result<Arc<Ops>> {
        let ops = Self::from_config(ws, config)?;
        if ops.needs_rebuild()? {
            ops.rebuild_in_background();
        }
        Ok(ops)
    }

    fn from_config(ws: &Workspace, config: &Config) -> Result<Arc<Ops>> {
        let locks = LockManager::new(ws, config.lock.clone())?;
        let embedder = embed::from_config(&config.embedding)?;
        let summarizer =
            semantic::summarizer_from_config(config.vlm.as_ref()).map_err(OpsError::Summarizer)?;
        Self::assemble(ws, locks, embedder, summarizer, config)
    }

    /// [`Ops::open`] with the parts given (tests, and a daemon that already has them) and
    /// the default content rules.
    pub fn with_parts(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
    ) -> Result<Arc<Ops>> {
        Self::assemble(ws, locks, embedder, summarizer, &Config::default())
    }

    /// The composition: the kernel for this model, the derivers over it, then what opening
    /// healed derived again and what a dead process left half-done finished.
    fn assemble(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
        config: &Config,
    ) -> Result<Arc<Ops>> {
        let model = stores::Model::of(embedder.as_deref());
        let (stores, healed) = Stores::open(ws, config, locks, &model)?;
        let ops = Arc::new_cyclic(|me| Ops {
            stores,
            embedder,
            summarizer,
            working: Default::default(),
            write_probe: std::sync::OnceLock::new(),
            rebuild: Default::default(),
            me: me.clone(),
        });
        lifecycle::start_refresher(&ops);
        if healed.queue_lost {
            // The damaged queue's jobs: whatever the files have that the index does not.
            let mut n = 0;
            for scope in crate::uri::SCOPES {
                n += ops.refresh_under(&VPath::root().join(scope)?)?;
            }
            tracing::warn!(jobs = n, "queued again what the damaged queue held");
        }
        if healed.queue_lost
            || matches!(ops.index.opened(), Opened::VectorsDropped | Opened::Claimed)
        {
            ops.backfill_vectors()?;
        }
        if let Err(e) = ops.recover() {
            tracing::warn!("recovering interrupted operations: {}", Chain(&e));
        }
        Ok(ops)
    }

    /// The store kernel, for the locked operations' faces ([`LockedMutations`]).
    pub fn stores(&self) -> &Arc<Stores> {
        &self.stores
    }

    /// The mount daemon tells the jobs which files it has open for writing. Under FUSE
    /// passthrough their bytes reach the disk without the daemon seeing them, so an embedding
    /// made now could be stale with nothing queued to redo it if the daemon died before the
    /// close. Such a job retries later instead (the close queues a fresh one anyway).
    pub fn set_write_probe(&self, probe: WriteProbe) {
        let _ = self.write_probe.set(probe);
    }

    pub(crate) fn open_for_write(&self, p: &VPath) -> bool {
        self.write_probe.get().is_some_and(|probe| probe(p))
    }

    /// The `Arc` this engine lives in (every `Ops` is made by [`Ops::assemble`]).
    fn arc(&self) -> Arc<Ops> {
        self.me
            .upgrade()
            .expect("an Ops is only reached through its Arc")
    }

    /// The dense model, when one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Search: the `limit` best live records for `query`, hybrid when a model is configured
    /// (records of missing files are dropped and deleted on the way; summaries whose refresh
    /// is queued are not shown).
    pub fn find(
        &self,
        query: &str,
        limit: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<crate::index::Hit>> {
        let found = search::find(
            &self.ws,
            &self.index,
            Some(&self.queue as &dyn search::PendingSummaries),
            self.embedder.as_deref(),
            &search::Query {
                text: query,
                mode: crate::index::Mode::Hybrid,
                limit,
                under,
            },
        )?;
        Ok(found.hits)
    }
}

impl Stores {
    /// Drop the index records of `p` (its file's text is about to change).
    pub fn forget_records(&self, p: &VPath) -> std::result::Result<(), IndexError> {
        self.index.delete(p).map(drop)
    }

    /// The source version the record of `p` at `level` was made from, if it has one.
    pub fn record_version(
        &self,
        p: &VPath,
        level: Level,
    ) -> std::result::Result<Option<String>, IndexError> {
        self.index.version_of(p, level)
    }
}

/// What a source looked like when it was read: a record built from it carries this, and a
/// job writes back only if the source still has it. rename(2) keeps all three, so an `mv`
/// does not make moved records look stale.
pub fn source_version(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format_version(meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// The one format of a source version: `{ino}-{size}-{mtime_ns}` in hex.
fn format_version(ino: u64, size: u64, mtime: i64, mtime_nsec: i64) -> String {
    let mtime_ns = mtime as i128 * 1_000_000_000 + mtime_nsec as i128;
    format!("{ino:x}-{size:x}-{mtime_ns:x}")
}

/// Whether two source versions differ only in the inode number: the same size and the same
/// modification time to the nanosecond, under another inode — a copy (`cp -a`, `rsync -a`,
/// a restore), whose content is the one the record was built from.
pub(crate) fn same_but_inode(a: &str, b: &str) -> bool {
    match (a.split_once('-'), b.split_once('-')) {
        (Some((ia, ra)), Some((ib, rb))) => ia != ib && ra == rb,
        _ => false,
    }
}

/// [`source_version`] from an `lstat` made relative to the data root (the same string).
pub(crate) fn stat_version(st: &crate::sys::Stat) -> String {
    let (mtime, mtime_ns) = st.mtime();
    format_version(st.st_ino, st.st_size as u64, mtime, mtime_ns)
}

/// The metadata of a path without following a final symlink; `None` when it does not exist.
pub(crate) fn stat(path: &Path) -> Result<Option<std::fs::Metadata>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
        Err(e) => Err(OpsError::io(path, e)),
    }
}

/// Whether a directory entry is a source file the index covers: not a lock, internal or
/// sidecar name.
pub(crate) fn is_source_name(name: &str) -> bool {
    !crate::uri::is_internal_name(name) && !crate::uri::is_sidecar_name(name)
}
