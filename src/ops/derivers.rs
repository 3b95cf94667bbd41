//! The derivers: what turns the files into derived state — the dense model, the summariser,
//! the job bodies (`jobs`, `lifecycle`), the rebuild (`rebuild`, `reindex`), search and the
//! repair (`fsck`) — over the locked operations and the store kernel below them. [`Ops`] is
//! the type they are methods of; `ops/mod.rs` composes it.

use std::sync::Arc;

use super::{rebuild, search, Locked, Result};
use crate::embed::Embedder;
use crate::semantic::Summarizer;
use crate::uri::VPath;

/// The operations engine of one process, the composition root of `ops`, in three layers each
/// reaching only the one below: the store kernel ([`Stores`](super::Stores)), the locked operations over it
/// ([`Locked`]), and the derivers here — the dense model, the summariser, the job bodies, the
/// lifecycle refresher's working set, the mount's write probe, search and a background
/// rebuild. Cheap to share (`Arc<Ops>`); every method is safe to call from several threads.
/// It dereferences to its [`Locked`] (and that to its [`Stores`](super::Stores)), so a face calls a locked
/// operation (`ops.rm(..)`) and a deriving one (`ops.find(..)`) on the same handle; a face that
/// only runs locked operations needs no `Ops` at all.
pub struct Ops {
    pub(super) locked: Arc<Locked>,
    /// The dense model; `None`: search is lexical only.
    pub(super) embedder: Option<Arc<dyn Embedder>>,
    pub(super) summarizer: Arc<dyn Summarizer>,
    /// Lifecycles a job of this process is working for right now, with how many jobs: the
    /// refresher thread keeps their locks fresh however long a job runs (a chat model may
    /// take a minute; OpenViking #1165, #3273).
    pub(super) working: Arc<parking_lot::Mutex<std::collections::HashMap<String, usize>>>,
    /// Set by the mount daemon: is this file open for writing through the mount right now?
    pub(super) write_probe: std::sync::OnceLock<WriteProbe>,
    /// A rebuild of the index from the files running in the background ([`rebuild`]).
    pub(super) rebuild: rebuild::Progress,
    /// This engine itself, for a background rebuild, which outlives `&self`.
    pub(super) me: std::sync::Weak<Ops>,
}

impl std::ops::Deref for Ops {
    type Target = Locked;

    fn deref(&self) -> &Locked {
        &self.locked
    }
}

/// See [`Ops::set_write_probe`].
pub type WriteProbe = Box<dyn Fn(&VPath) -> bool + Send + Sync>;

impl Ops {
    /// The locked operations, for the mount's mutation seam ([`LockedMutations`](super::LockedMutations)).
    pub fn locked(&self) -> &Arc<Locked> {
        &self.locked
    }

    /// The mount daemon tells the jobs which files it has open for writing. Under FUSE
    /// passthrough their bytes reach the disk without the daemon seeing them, so an embedding
    /// made now could be stale with nothing queued to redo it if the daemon died before the
    /// close. Such a job waits (no attempt spent, never dead) and runs again later; the close
    /// queues a fresh one anyway.
    pub fn set_write_probe(&self, probe: WriteProbe) {
        let _ = self.write_probe.set(probe);
    }

    pub(crate) fn open_for_write(&self, p: &VPath) -> bool {
        self.write_probe.get().is_some_and(|probe| probe(p))
    }

    /// The `Arc` this engine lives in (every `Ops` is made by [`Ops::assemble`]).
    pub(super) fn arc(&self) -> Arc<Ops> {
        self.me
            .upgrade()
            .expect("an Ops is only reached through its Arc")
    }

    /// The dense model, when one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The summariser's short name (`local`, `chat`), for the server's model status.
    pub fn summarizer_name(&self) -> &'static str {
        self.summarizer.name()
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
        let found = self.search(&search::Query {
            text: query,
            mode: crate::index::Mode::Hybrid,
            limit,
            under,
        })?;
        Ok(found.hits)
    }

    /// [`Ops::find`] in any mode, with how many records of missing files it deleted (what
    /// the CLI's `find` asks a daemon).
    pub fn search(&self, q: &search::Query) -> Result<crate::index::Found> {
        search::find(
            &self.ws,
            &self.index,
            Some(&self.queue as &dyn search::PendingSummaries),
            self.embedder.as_deref(),
            q,
        )
    }
}
