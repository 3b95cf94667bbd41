//! Resource lifecycle locks: the TREE (or, for a single-file resource, EXACT) lock that
//! add-resource takes on its target at finalisation and that stays held until every summary
//! and embedding of the resource is done (seed doc, "add_resource").
//!
//! The lock's owner is a persistent handle (`vfs-lifecycle-…`), not a process, so it outlives
//! the CLI that added the resource. Process liveness never frees it; only its age does, so
//! whichever worker runs one of its jobs refreshes it first — and re-acquires it after a
//! restart when it went stale meanwhile ("Server restart recovery"). The job that finishes the
//! last outstanding key releases it; [`Stores::sweep_lifecycles`](super::Stores::sweep_lifecycles) releases the ones whose jobs
//! can no longer finish (dead jobs) once the queue is idle.

use std::time::Duration;

use super::{OpsError, Result, Stores};
use crate::error::Chain;
use crate::lock::{LockError, LockGuard, LockKind};
use crate::queue::JobError;
use crate::uri::VPath;

/// A fresh lifecycle handle. Not of the `vfs-{host}-{pid}-{start}-{n}` form, so the lock engine
/// judges it by token age, never by a process.
pub(crate) fn new_handle() -> String {
    format!("vfs-lifecycle-{}", uuid::Uuid::new_v4().simple())
}

impl Stores {
    /// Take the lifecycle lock on `target` for `handle`, without waiting, and leave it on disk.
    pub(crate) fn lifecycle_acquire(
        &self,
        handle: &str,
        target: &VPath,
        kind: LockKind,
    ) -> Result<()> {
        let guard = self
            .locks
            .acquire_as(handle, &[(target.clone(), kind)], Duration::ZERO)?;
        guard.persist();
        Ok(())
    }

    /// Before a job of lifecycle `handle` writes back: keep its lock fresh, re-acquiring it
    /// when it went stale and was taken over or cleared. Returns `false` when the lifecycle is
    /// over (the job then locks as anybody would).
    pub(crate) fn lifecycle_keep(&self, handle: &str) -> Result<bool> {
        let Some(lc) = self.journal.lifecycle(handle)? else {
            return Ok(false);
        };
        if self.locks.refresh_owned(&lc.target, handle)? {
            return Ok(true);
        }
        if super::stat(&self.backing(&lc.target))?.is_none() {
            // The resource was removed (its lock had expired): nothing left to protect.
            self.lifecycle_release(handle, &lc.target)?;
            return Ok(false);
        }
        tracing::info!(handle, target = %lc.target, "re-acquiring lifecycle lock");
        self.lifecycle_acquire(handle, &lc.target, lc.kind)?;
        Ok(true)
    }

    /// A job of lifecycle `handle` is done with `key`; the last one releases the lock.
    pub(crate) fn lifecycle_job_done(&self, handle: &str, key: &str) -> Result<()> {
        if self.journal.lifecycle_done_key(handle, key)? > 0 {
            return Ok(());
        }
        // No key left, but an add still syncing (its intent open) will register more.
        if self.journal.intents()?.iter().any(
            |(_, i, _)| matches!(i, crate::journal::Intent::Add { handle: h, .. } if h == handle),
        ) {
            return Ok(());
        }
        if let Some(lc) = self.journal.lifecycle(handle)? {
            crate::crash_point!("lifecycle.before_release");
            self.lifecycle_release(handle, &lc.target)?;
        }
        Ok(())
    }

    fn lifecycle_release(&self, handle: &str, target: &VPath) -> Result<()> {
        self.locks.release_owned(target, handle)?;
        self.journal.lifecycle_end(handle)?;
        tracing::debug!(handle, %target, "lifecycle lock released");
        Ok(())
    }

    /// Lifecycles that cannot make progress any more: no job is pending or running (so the
    /// jobs they wait for are done or dead) and no unfinished add still owns them. Empty while
    /// the queues are busy.
    pub(crate) fn idle_lifecycles(&self) -> Result<Vec<crate::journal::Lifecycle>> {
        if !self.queue.is_idle()? {
            return Ok(Vec::new());
        }
        let open: Vec<String> = self
            .journal
            .intents()?
            .into_iter()
            .filter_map(|(_, i, _)| match i {
                crate::journal::Intent::Add { handle, .. } => Some(handle),
                _ => None,
            })
            .collect();
        let mut idle = self.journal.lifecycles()?;
        idle.retain(|lc| !open.contains(&lc.handle));
        Ok(idle)
    }

    /// Release every [idle lifecycle](Self::idle_lifecycles). Returns how many were released.
    pub fn sweep_lifecycles(&self) -> Result<usize> {
        let mut n = 0;
        for lc in self.idle_lifecycles()? {
            match self.lifecycle_release(&lc.handle, &lc.target) {
                Ok(()) => n += 1,
                Err(e) => {
                    tracing::warn!(handle = lc.handle, "releasing lifecycle: {}", Chain(&e))
                }
            }
        }
        Ok(n)
    }
}

/// What a job's write-back lock came to.
pub(crate) enum JobLock {
    /// Held (`None`: covered by a lifecycle lock held already).
    Held(Option<LockGuard>),
    /// The directory of a path to lock is gone.
    Gone,
}

impl Stores {
    /// The lock a job's write-back takes: EXACT on each path — or nothing more while a
    /// resource lifecycle lock covering them is held (the job's own, or that of the resource
    /// the paths lie in: derived work is what a lifecycle waits for, so it proceeds under it).
    /// That TREE already keeps every other writer (rm, mv, writes) out of the resource, and a
    /// worker dying under it leaves no lock file of its own behind. A busy lock is a retryable
    /// job error. The lock never creates a directory: a path whose directory was removed
    /// since the job read it is [`JobLock::Gone`].
    pub(super) fn job_lock(
        &self,
        paths: &[VPath],
        lifecycle: Option<&str>,
    ) -> Result<JobLock, JobError> {
        let covering = match lifecycle {
            Some(h) => Some(h.to_string()),
            None => self
                .journal
                .lifecycles()
                .map_err(|e| JobError::from(OpsError::from(e)))?
                .into_iter()
                .find(|l| paths.iter().all(|p| p.starts_with(&l.target)))
                .map(|l| l.handle),
        };
        if let Some(h) = covering {
            if self.lifecycle_keep(&h)? {
                return Ok(JobLock::Held(None));
            }
        }
        let reqs: Vec<(VPath, LockKind)> =
            paths.iter().map(|p| (p.clone(), LockKind::Exact)).collect();
        match self.locks.acquire_background(&reqs, self.waits.job) {
            Ok(g) => Ok(JobLock::Held(Some(g))),
            Err(LockError::Gone { .. }) => Ok(JobLock::Gone),
            Err(e) => Err(JobError::from(OpsError::from(e))),
        }
    }
}
