//! What a removal finishes after its reply, for many removals at once: the records of the
//! removed paths deleted, their intents closed, their locks released, their scratch trees
//! deleted and their parents' summaries queued — with one index commit and one journal commit
//! for the whole batch.
//!
//! `rm -rf` of a big tree through the mount is one unlink after another. Each removal's
//! records cost a commit of the lexical index and its intent another; done one by one, those
//! commits were most of the work. Removals answered through the mount (a reply scope is open,
//! [`crate::tail`]) are handed to the layer's settler thread, which settles everything
//! waiting as one batch, then what arrived meanwhile: while `rm -rf` goes on unlinking on the
//! FUSE thread, each batch gathers the removals answered during the one before, and none of
//! the commits delays a reply. Without a reply scope (the CLI, recovery) a removal settles at
//! once on its own thread, with whatever waits (flat combining: whoever finds no batch running
//! runs them all). [`Locked::drain_settling`] settles what is left before the daemon stops;
//! the layer's drop does too.
//!
//! Invariants:
//! - a removal's lock is released only after its records are deleted and its intent closed,
//!   so a path re-created under that lock never meets the old records (a caller touching the
//!   path meanwhile waits for that lock, woken by its release);
//! - until then `find` already leaves the path out (a hit whose file is gone is dropped);
//! - a batch that fails keeps its intents open (their locks are released as they drop):
//!   recovery finishes them at the next open, as it finishes any interrupted removal;
//! - one batch at a time, whichever thread runs it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Condvar, Mutex};

use super::{Locked, OpsError, Result};
use crate::journal::IntentId;
use crate::lock::LockGuard;
use crate::uri::VPath;

/// A path whose removal is done in the files, waiting for the rest.
pub(crate) struct Removed {
    pub path: VPath,
    /// Its intent (a row, or a spooled line when its content is kept), when it had one.
    pub intent: Option<IntentId>,
    pub guard: LockGuard,
    /// A removed tree's scratch copy, deleted once the lock is released.
    pub trash: Option<PathBuf>,
    /// Its content kept in the history as this blob: the entry goes with the intent's close.
    pub blob: Option<String>,
    /// Who removed it: pid (none for a remote caller) and command line.
    pub pid: Option<(Option<u32>, Option<String>)>,
}

/// The removals waiting and the settler thread that takes them.
#[derive(Default)]
pub(crate) struct Settling {
    shared: Arc<Shared>,
    /// Started at the first removal handed over; whether it runs.
    worker: OnceLock<bool>,
}

#[derive(Default)]
struct Shared {
    waiting: Mutex<Vec<Removed>>,
    /// A thread is settling a batch.
    busy: AtomicBool,
    /// Signalled (under `waiting`) when removals are handed over, when a batch ends and when
    /// the layer goes.
    changed: Condvar,
    /// The layer is gone: the settler stops.
    closed: AtomicBool,
}

impl Shared {
    fn signal(&self) {
        let _w = self.waiting.lock();
        self.changed.notify_all();
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.signal();
    }
}

impl Drop for Locked {
    /// Nothing handed over is left unsettled by a layer that goes (the settler holds the
    /// layer while it runs a batch, so none is running now).
    fn drop(&mut self) {
        if let Err(e) = self.settle_waiting() {
            tracing::warn!(error = %crate::error::Chain(&e), "settling removals");
        }
    }
}

impl Locked {
    /// Settle `r`: after the reply, on the settler thread, when a reply scope is open on this
    /// thread (returning 0 records); else now, with every removal waiting, returning the
    /// records deleted.
    pub(crate) fn settle(&self, r: Removed) -> Result<usize> {
        let s = &self.settling;
        s.shared.waiting.lock().push(r);
        if crate::tail::in_scope() && *s.worker.get_or_init(|| self.start_settler()) {
            s.shared.signal();
            return Ok(0);
        }
        self.settle_waiting()
    }

    /// Whether the settler thread started; without it each removal settles on its own
    /// thread, as without a reply scope (logged once).
    fn start_settler(&self) -> bool {
        let (shared, me) = (self.settling.shared.clone(), self.me());
        let spawned = std::thread::Builder::new()
            .name("settle".into())
            .spawn(move || settler(shared, me));
        if let Err(e) = &spawned {
            tracing::error!("starting the removals' settler thread: {e}");
        }
        spawned.is_ok()
    }

    /// Settle every removal waiting on this thread, unless a batch is running on another
    /// (whose thread takes them before it stops). Returns the records deleted.
    fn settle_waiting(&self) -> Result<usize> {
        let s = &self.settling.shared;
        let (mut records, mut failed) = (0, None);
        // Until nothing waits that no thread will take: a batch that fails does not leave
        // the removals after it waiting (their locks held) for the next removal.
        while !s.waiting.lock().is_empty() {
            if s.busy.swap(true, Ordering::AcqRel) {
                break; // the thread settling takes it before it stops
            }
            loop {
                let batch = std::mem::take(&mut *s.waiting.lock());
                if batch.is_empty() {
                    break;
                }
                match self.settle_batch(batch) {
                    Ok(n) => records += n,
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            s.busy.store(false, Ordering::Release);
            s.signal();
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(records),
        }
    }

    /// Settle everything handed over and wait for a batch running elsewhere: what a daemon
    /// does before it stops, so that no removal is left for recovery.
    pub fn drain_settling(&self) -> Result<()> {
        let s = &self.settling.shared;
        loop {
            self.settle_waiting()?;
            let mut w = s.waiting.lock();
            if w.is_empty() && !s.busy.load(Ordering::Acquire) {
                return Ok(());
            }
            if w.is_empty() {
                s.changed.wait(&mut w);
            }
        }
    }

    /// Whether removals wait to be settled or a batch is being settled (`wait` waits for
    /// them as it waits for the queues: a batch queues the parents' summaries last).
    pub fn settling(&self) -> bool {
        let s = &self.settling.shared;
        s.busy.load(Ordering::Acquire) || !s.waiting.lock().is_empty()
    }

    fn settle_batch(&self, batch: Vec<Removed>) -> Result<usize> {
        let with_intent: Vec<&VPath> = batch
            .iter()
            .filter(|r| r.intent.is_some())
            .map(|r| &r.path)
            .collect();
        let records = self.index.delete_prefixes(&with_intent)?;
        crate::crash_point!("rm.index_deleted");
        let intents: Vec<IntentId> = batch.iter().filter_map(|r| r.intent).collect();
        let entries: Vec<_> = batch
            .iter()
            .filter_map(|r| {
                let blob = r.blob.as_deref()?;
                let (pid, cmd) = r.pid.clone().unzip();
                let entry = self.removal_entry(r.path.as_str(), blob, pid.flatten(), cmd.flatten());
                if entry.is_none() {
                    // Moved away from under us: nothing to record (a spooled intent of it is
                    // settled all the same).
                    tracing::warn!(path = %r.path, blob, "removed content not in the history");
                }
                entry
            })
            .collect();
        if intents.is_empty() {
            // Removals without an intent: their entries wait with the others for one commit.
            self.record_soon(entries.clone());
        } else {
            // The rows closed and the spooled lines' entries in one commit.
            self.journal.finish_ids(&intents, &entries)?;
        }
        let mut jobs = Vec::new();
        for r in batch {
            // A directory's own lock file left with it; the release reports that, and it is
            // fine.
            let _ = r.guard.release();
            if let Some(t) = r.trash {
                if let Err(e) = std::fs::remove_dir_all(&t) {
                    tracing::warn!(path = %t.display(), "removing a removed tree: {e}");
                }
            }
            self.derive.parent_jobs(&r.path, None, &mut jobs);
        }
        if !jobs.is_empty() {
            self.queue.submit(&jobs)?;
        }
        if !entries.is_empty() {
            self.prune_history(false)?;
        }
        Ok(records)
    }
}

/// The settler thread: each time removals are handed over and no batch runs elsewhere, it
/// settles them all (with what arrives meanwhile); it stops when the layer goes.
fn settler(shared: Arc<Shared>, me: Weak<Locked>) {
    loop {
        {
            let mut w = shared.waiting.lock();
            while (w.is_empty() || shared.busy.load(Ordering::Acquire))
                && !shared.closed.load(Ordering::Acquire)
            {
                shared.changed.wait(&mut w);
            }
            if shared.closed.load(Ordering::Acquire) {
                return;
            }
        }
        // Held only while settling: the layer's last owner may drop it meanwhile.
        let Some(ops) = me.upgrade() else { return };
        if let Err(e) = ops.settle_waiting() {
            let e: OpsError = e;
            tracing::warn!(
                what = "rm",
                error = %crate::error::Chain(&e),
                "finishing an operation after its reply"
            );
        }
    }
}
