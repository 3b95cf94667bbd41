//! The seam between the queue's rules and the database that keeps its rows (JuiceFS's meta
//! engine shape): [`Queue`](super::Queue) checks names, wakes local dispatchers, runs the
//! spool and decides what a failure means (retry after which back-off, dead, or wait);
//! an [`Engine`] applies each state change as one transaction of its database.
//!
//! What every engine must keep, whatever its database:
//! - a job is `pending`, `running` or `dead`; one instant per row (`due`) says when it is
//!   next claimable — for a pending row the end of its back-off, for a running one the end of
//!   its lease — so a job whose worker died is taken by the next claim after its lease, by any
//!   process on any host;
//! - a claim is fenced by `(id, attempts)`: attempts grow at every claim and ids are never
//!   reused, so a worker whose lease was handed on can no longer renew, complete or fail;
//! - a keyed job coalesces: enqueueing a key bumps its version (kept while any row of the key
//!   exists, so across restarts); a pending row of the key takes the new version and payload
//!   in place, keeping its place in line; a dead row of the key is dropped; a row whose key
//!   moved on is dropped rather than retried or revived;
//! - a key enqueued while its job runs waits the re-run delay;
//! - the state change and its checks are one transaction: two engines' processes never both
//!   claim a job, and a crash leaves each change whole or absent.

use std::time::Duration;

use super::{Job, NewJob, QueueError, QueueStats};

/// What becomes of a job that failed, as [`Queue::fail`](super::Queue::fail) decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure<'a> {
    /// Pending again once `after` has passed.
    Retry { message: &'a str, after: Duration },
    /// Dead with `message` until a repair revives it.
    Dead { message: &'a str },
    /// Pending again after `after`, the attempt given back: the job waits for something
    /// outside it (a full disk), so it never dies of it.
    Wait { message: &'a str, after: Duration },
}

/// One database's rows of the queue. Implementations: SQLite ([`super::sqlite`]).
pub trait Engine: Send + Sync {
    /// Where the rows live, for messages: a database file, a server.
    fn location(&self) -> String;

    /// Add `jobs` in one transaction (coalescing keyed ones, see the module doc); a key
    /// queued while its job runs becomes due `rerun_delay` later. Returns each job's id.
    fn enqueue(&self, jobs: &[NewJob], rerun_delay: Duration) -> Result<Vec<i64>, QueueError>;

    /// Is any job of `queue` claimable now? A read: idle workers poll with it, so an empty
    /// queue costs no write.
    fn any_due(&self, queue: &str) -> Result<bool, QueueError>;

    /// Claim the next due job of `queue` for `lease`. A running row whose lease ran out is
    /// taken over, unless its key moved on (dropped) or it used `max_attempts` claims (dead,
    /// with [`expired_message`]); a row whose payload is not JSON is dead ([`bad_payload`]).
    fn claim(
        &self,
        queue: &str,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Job>, QueueError>;

    /// Extend the lease while this claim holds the job; `false` once it was handed on.
    fn renew(&self, job: &Job, worker: &str, lease: Duration) -> Result<bool, QueueError>;

    /// Remove the job this claim holds; [`QueueError::NotClaimed`] when it holds it no more.
    fn complete(&self, job: &Job) -> Result<(), QueueError>;

    /// Apply `failure` to the job this claim holds ([`QueueError::NotClaimed`] when it holds
    /// it no more); a job whose key moved on is dropped instead.
    fn fail(&self, job: &Job, failure: Failure<'_>) -> Result<(), QueueError>;

    /// Hand back a claimed job never started: pending at once, the claim not counted.
    fn release(&self, job: &Job) -> Result<(), QueueError>;

    /// Does this claim still hold the job, with no newer version of its key enqueued?
    fn is_current(&self, job: &Job) -> Result<bool, QueueError>;

    /// Is a job of `key` pending or running?
    fn has_pending(&self, queue: &str, key: &str) -> Result<bool, QueueError>;

    /// The key's current version (`None` when no row of it exists).
    fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError>;

    /// Dead jobs pending again with fresh attempts (those whose key has a live job are
    /// dropped instead). Returns how many were revived.
    fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError>;

    /// Counts per queue that has rows, sorted by name, each with its `dead_shown` most
    /// recently dead jobs.
    fn stats(&self, dead_shown: usize) -> Result<Vec<QueueStats>, QueueError>;

    /// Rows pending or running in `queues` (all queues for `None`).
    fn unfinished(&self, queues: Option<&[&str]>) -> Result<u64, QueueError>;
}

/// The last error of a job whose stored payload is not JSON (damage): dead at its claim.
pub fn bad_payload(e: &serde_json::Error) -> String {
    format!("payload is not JSON ({e}); the row was damaged")
}

/// The last error of a job that died because its leases kept running out.
pub fn expired_message(attempts: i64, last_error: Option<&str>) -> String {
    format!(
        "lease expired on attempt {attempts} (worker died or hung){}",
        last_error
            .map(|e| format!("; before: {e}"))
            .unwrap_or_default()
    )
}
