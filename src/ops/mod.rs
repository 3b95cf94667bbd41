//! The locked operations: rm, mv, add-resource and single-file writes, each under the design's
//! locks and in its crash-safe order, plus the background jobs that derive the index and the
//! directory summaries from the files, and the repair (`fsck`) that rebuilds what is derived.
//!
//! Rules every operation here keeps (seed doc, "Consistency Issues and Solutions"):
//! - the files are the truth; the index is derived, and a search never names a missing file:
//!   rm removes the path first (one rename(2)) and settles its records after the reply, while
//!   `find` drops every hit whose file is gone; mv renames, then moves the records;
//! - an operation that moves or removes several things records an *intent* in the journal
//!   ([`crate::journal`]) after taking its locks and clears it before releasing them, so a process that
//!   dies half-way leaves a record that [`Locked::recover`] finishes forward under the same locks
//!   (a dead owner's locks are free at once);
//! - queue work is idempotent and a job never writes a record for a source that changed or
//!   vanished since it read it (checked under the source's lock, [`jobs`]).
//!
//! Faces (CLI, FUSE mount, sessions) only call [`Ops`].

mod add;
mod at;
pub mod derive;
mod derivers;
mod error;
pub mod fsck;
pub mod gauges;
mod history;
pub mod jobs;

mod keys;
mod lifecycle;
mod light;
mod locked;
pub mod migrate;
mod mv;
mod past;
mod prune;
pub mod rebuild;
mod recover;
mod rederive;
mod refresher;
mod reindex;
mod reserve;
mod rm;
pub mod search;
mod settle;
mod source;
pub mod status;
pub mod stores;
mod tags;
mod undo;
mod write;

pub use derivers::{Ops, WriteProbe};
pub use error::{OpsError, Result};
pub use light::Light;
pub use locked::{Locked, LockedMutations};
pub use past::{changes, PastView};
pub use prune::pressure_line;
pub use source::source_version;
pub(crate) use source::{is_source_name, same_but_inode, stat, stat_version};
pub use write::{BatchReport, BatchWrite, Frees, Release};

use std::sync::Arc;

use crate::config::Config;
use crate::embed::{self, Embedder};
use crate::error::Chain;
use crate::index::Opened;
use crate::lock::LockManager;
use crate::semantic::{self, Summarizer};
use crate::uri::VPath;
use crate::workspace::Workspace;

pub use crate::journal::{Intent, Journal};
pub use add::{AddOptions, AddReport};
pub use fsck::{FsckReport, Problem};
pub use history::Shown;
pub use reindex::ReindexReport;
pub use rm::RmReport;
pub use stores::{check_backend, index_home, open_queue_of, Healed, IndexHome, Stores};
pub use tags::{normalize_tag, normalize_tags, TagMode, TAGS_XATTR};
pub use undo::{rfc3339, undo_time, UndoReport};

/// Whether an open may re-derive what another configuration derived (see
/// [`Ops::open_as_built`]).
#[derive(Clone, Copy)]
enum Derive {
    /// Bring the index to this configuration's model (a daemon's start, `reindex`).
    Again,
    /// Refuse an index of another model (a one-shot command).
    AsBuilt,
}

impl Ops {
    /// Open every store of `ws` as `config` says, and finish operations that a dead process
    /// left half-done ([`Locked::recover`]; failures there are logged, never fatal).
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
        Self::open_rebuilding(ws, config, progress, Healed::default(), Derive::Again)
    }

    /// [`Ops::open_with_progress`] for a one-shot command (`wait`, `fsck`, `add-resource
    /// --wait`, `session commit`): its own configuration never re-derives the workspace. A
    /// configured model that is not the one the index was built with is
    /// [`OpsError::BuiltWith`], a backend that is not the stores' [`OpsError::BuiltOn`],
    /// both before anything changed; only `vikingfs reindex` ([`Ops::open_with_progress`])
    /// and a daemon's start ([`Ops::open_serving`]) re-derive.
    pub fn open_as_built(
        ws: &Workspace,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Arc<Ops>> {
        stores::check_backend(ws, &config.backend)?;
        Self::open_rebuilding(ws, config, progress, Healed::default(), Derive::AsBuilt)
    }

    /// [`Ops::open_with_progress`], deriving again also what an earlier open of the stores
    /// in this process healed (`carried`).
    fn open_rebuilding(
        ws: &Workspace,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
        carried: Healed,
        derive: Derive,
    ) -> Result<Arc<Ops>> {
        let ops = Self::from_config(ws, config, carried, derive)?;
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
        let ops = Self::from_config(ws, config, Healed::default(), Derive::Again)?;
        if ops.needs_rebuild()? {
            ops.rebuild_in_background();
        }
        start_tending(&ops);
        Ok(ops)
    }

    fn from_config(
        ws: &Workspace,
        config: &Config,
        carried: Healed,
        derive: Derive,
    ) -> Result<Arc<Ops>> {
        let locks = LockManager::new(ws, config.lock.clone())?;
        let embedder = embed::from_config(&config.embedding)?;
        let summarizer =
            semantic::summarizer_from_config(config.vlm.as_ref()).map_err(OpsError::Summarizer)?;
        Self::assemble(ws, locks, embedder, summarizer, config, carried, derive)
    }

    /// The locked operations alone, for a one-shot command that runs only them (rm, mv,
    /// write, add-resource without --wait): no model is loaded and no summariser built, and
    /// the index keeps whatever vectors it has, whatever this process's configuration says
    /// (only the derivers re-derive). What opening found lost (an index to rebuild, a
    /// damaged queue's jobs) is the derivers' to rebuild: then the whole engine opens, as
    /// [`Ops::open_with_progress`], and hands its locked operations on.
    pub fn open_locked(
        ws: &Workspace,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Arc<Locked>> {
        stores::check_backend(ws, &config.backend)?;
        let locks = LockManager::new(ws, config.lock.clone())?;
        let carried = match Stores::open(ws, config, locks, &stores::Model::AsStored) {
            Ok((stores, healed)) if !healed.queue_lost && !stores.needs_rebuild()? => {
                let locked = Locked::new(stores);
                if let Err(e) = locked.recover() {
                    tracing::warn!("recovering interrupted operations: {}", Chain(&e));
                }
                return Ok(locked);
            }
            // These stores close here; the whole engine derives again what this open healed
            // (a queue set aside is healthy when it reopens).
            Ok((_, healed)) => healed,
            Err(OpsError::Index(crate::index::IndexError::Schema { .. })) => Healed::default(),
            Err(e) => return Err(e),
        };
        let ops = Self::open_rebuilding(ws, config, progress, carried, Derive::AsBuilt)?;
        Ok(ops.locked().clone())
    }

    /// Queue again what a damaged queue held (set aside at open, or while serving): whatever
    /// the files have that the index does not, and every missing vector.
    fn derive_lost_queue(&self) -> Result<()> {
        let mut n = 0;
        for scope in crate::uri::SCOPES {
            n += self.refresh_under(&VPath::root().join(scope)?)?;
        }
        tracing::warn!(jobs = n, "queued again what the damaged queue held");
        self.backfill_vectors().map(drop)
    }

    /// [`Ops::open`] with the parts given (tests, and a daemon that already has them) and
    /// the default content rules.
    pub fn with_parts(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
    ) -> Result<Arc<Ops>> {
        Self::assemble(
            ws,
            locks,
            embedder,
            summarizer,
            &Config::default(),
            Healed::default(),
            Derive::Again,
        )
    }

    /// The composition: the kernel for this model, the derivers over it, then what opening
    /// healed derived again and what a dead process left half-done finished.
    fn assemble(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
        config: &Config,
        carried: Healed,
        derive: Derive,
    ) -> Result<Arc<Ops>> {
        let model = match derive {
            Derive::Again => stores::Model::of(embedder.as_deref()),
            Derive::AsBuilt => stores::Model::as_built(embedder.as_deref()),
        };
        let (stores, healed) = Stores::open(ws, config, locks, &model)?;
        let healed = Healed {
            queue_lost: healed.queue_lost || carried.queue_lost,
        };
        let ops = Arc::new_cyclic(|me| Ops {
            locked: Locked::new(stores),
            embedder,
            summarizer,
            working: Default::default(),
            write_probe: std::sync::OnceLock::new(),
            rebuild: Default::default(),
            me: me.clone(),
        });
        refresher::start_refresher(&ops);
        if healed.queue_lost {
            ops.derive_lost_queue()?;
        } else if matches!(ops.index.opened(), Opened::VectorsDropped | Opened::Claimed) {
            ops.backfill_vectors()?;
        }
        start_relief(&ops);
        if ops.sole {
            // A page found damaged while we serve: the queue starts anew at once, and its
            // jobs are derived again here, beside the serving (never in the failing call).
            let me = Arc::downgrade(&ops);
            ops.queue.heal_in_place(move || {
                let me = me.clone();
                let spawned = std::thread::Builder::new()
                    .name("vikingfs-queue-heal".into())
                    .spawn(move || {
                        let Some(ops) = me.upgrade() else { return };
                        if let Err(e) = ops.derive_lost_queue() {
                            tracing::error!("deriving the lost queue's jobs: {}", Chain(&e));
                        }
                    });
                if let Err(e) = spawned {
                    tracing::error!("no thread to derive the lost queue's jobs: {e}");
                }
            });
        }
        if let Err(e) = ops.recover() {
            tracing::warn!("recovering interrupted operations: {}", Chain(&e));
        }
        if let Err(e) = ops.forget_shared_summaries() {
            tracing::warn!(
                "queueing the removal of viking://user's summary: {}",
                Chain(&e)
            );
        }
        Ok(ops)
    }
}

/// Every [`history::ENTRIES_EVERY`] while the engine lives, record the history entries
/// waiting, and queue their hashing once the history is quiet.
fn start_relief(ops: &Arc<Ops>) {
    if !ops.history.enabled {
        return;
    }
    let weak = Arc::downgrade(ops);
    let spawned = std::thread::Builder::new()
        .name("vikingfs-history-relief".into())
        .spawn(move || {
            // The history's generation last seen, since when, and the one last hashed.
            let (mut seen, mut since, mut hashed) = (None, std::time::Instant::now(), None);
            loop {
                std::thread::sleep(history::ENTRIES_EVERY);
                let Some(ops) = weak.upgrade() else { return };
                ops.flush_entries();
                // New entries get their content hashes from a job, off this thread, once
                // the history is quiet: an `rm -rf` in progress comes first.
                let now = ops.history_generation();
                if seen != Some(now) {
                    (seen, since) = (Some(now), std::time::Instant::now());
                }
                if hashed != seen && since.elapsed() >= history::hash_when_quiet() {
                    hashed = seen;
                    ops.hash_history_soon();
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no history relief thread: {e}");
    }
}

/// The daemon's history timer: every [`history::ENTRIES_EVERY`] while the engine lives, give
/// back history when the disk is short of space and prune what is past its time or over the
/// cap, idle or not ([`Stores::tend_history`]; the rules are [`prune`]'s). The writes that
/// fill a disk under passthrough never reach the daemon, so the history must be given back
/// before they meet ENOSPC, not after. Only the daemon that serves the workspace runs it: a
/// one-shot command beside it gives back only when it meets ENOSPC.
fn start_tending(ops: &Arc<Ops>) {
    if !ops.history.enabled {
        return;
    }
    let weak = Arc::downgrade(ops);
    let spawned = std::thread::Builder::new()
        .name("vikingfs-history-space".into())
        .spawn(move || loop {
            std::thread::sleep(history::ENTRIES_EVERY);
            let Some(ops) = weak.upgrade() else { return };
            if let Err(e) = ops.tend_history() {
                tracing::warn!("keeping the history within its bounds: {}", Chain(&e));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no history space thread: {e}");
    }
}
