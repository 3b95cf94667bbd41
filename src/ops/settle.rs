//! What a removal finishes after its reply, for many removals at once: the records of the
//! removed paths deleted, their intents closed, their locks released, their scratch trees
//! deleted and their parents' summaries queued — with one index commit and one journal commit
//! for the whole batch.
//!
//! `rm -rf` of a big tree through the mount is one unlink after another. Each removal's
//! records cost a commit of the lexical index (a new segment of it, later merged) and its
//! intent another; done one by one, those commits were most of the work. Instead, each
//! removal's tail is handed to [`Locked::settle`]: the thread that finds no batch running
//! runs every removal waiting, then those that arrived meanwhile, until none is left (flat
//! combining: no thread of its own, so nothing is left unsettled when the daemon stops, and
//! without a reply scope — the CLI, recovery — a removal settles at once, alone).
//!
//! Invariants:
//! - a removal's lock is released only after its records are deleted and its intent closed,
//!   so a path re-created under that lock never meets the old records;
//! - until then `find` already leaves the path out (a hit whose file is gone is dropped);
//! - a batch that fails keeps its intents open (their locks are released as they drop):
//!   recovery finishes them at the next open, as it finishes any interrupted removal.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::{Locked, Result};
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
    /// Who removed it: pid and command line.
    pub pid: Option<(u32, Option<String>)>,
}

/// The removals waiting, and whether a thread is settling a batch.
#[derive(Default)]
pub(crate) struct Settling {
    waiting: Mutex<Vec<Removed>>,
    busy: AtomicBool,
}

impl Locked {
    /// Settle `r` with every removal waiting, on this thread; or, when another thread is
    /// settling a batch already, leave it to that thread (which takes it before it stops).
    /// Returns the records deleted by the batches this thread ran.
    pub(crate) fn settle(&self, r: Removed) -> Result<usize> {
        let s = &self.settling;
        s.waiting.lock().push(r);
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
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(records),
        }
    }

    /// Whether removals wait to be settled or a batch is being settled (`wait` waits for
    /// them as it waits for the queues: a batch queues the parents' summaries last).
    pub fn settling(&self) -> bool {
        self.settling.busy.load(Ordering::Acquire) || !self.settling.waiting.lock().is_empty()
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
                let entry = self.removal_entry(r.path.as_str(), blob, pid, cmd.flatten());
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
