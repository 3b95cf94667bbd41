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
//! - a key enqueued while its job runs waits the re-run delay, and while it keeps coming that
//!   wait is held at half the delay past the last enqueue, up to ten delays;
//! - the state change and its checks are one transaction: two engines' processes never both
//!   claim a job, and a crash leaves each change whole or absent;
//! - [`Engine::export`] and [`Engine::import`] move the rows to another engine
//!   (`vikingfs migrate`) without breaking any of the above: a leased job is pending again
//!   (no claim survives a move), unless its key moved on (dropped, as a claim would); a dead
//!   one stays dead with its error and attempts; the keys' versions go along, so "latest
//!   version wins" still holds; instants go as offsets from the export, since each engine
//!   has its own clock.

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

/// One database's rows of the queue. Implemented once for every SQL database by
/// [`super::rules`] (SQLite, [`super::sqlite`]; PostgreSQL, [`super::postgres`]).
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

    /// End at once the leases of the claimants `gone` says have exited (a worker name, as
    /// claimed with): their running rows are claimable now. Returns how many.
    fn end_leases_of(&self, gone: &dyn Fn(&str) -> bool) -> Result<usize, QueueError>;

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

    /// Every job that is not done and every key's version, from one snapshot, in the order
    /// claims would take them (see the module doc for what a move keeps).
    fn export(&self) -> Result<QueueRows, QueueError>;

    /// Add `jobs` as exported (new ids, instants from this engine's clock) and raise each of
    /// `keys` to at least its version, in one transaction. Into an empty store (a pending row
    /// of a key already here would break the one-pending-row rule).
    fn import(&self, jobs: &[JobRow], keys: &[KeyVersion]) -> Result<(), QueueError>;

    /// Remove every row and key version (a migration target emptied before its copy).
    fn clear(&self) -> Result<(), QueueError>;

    /// From now on, damage met by any statement (a page SQLite finds corrupt) is healed in
    /// place: the file is set aside, a new one started, and `healed` called so that the
    /// caller derives its jobs again. Only the process that derives calls it (the daemon);
    /// elsewhere damage is an error, healed by the next open. A server's damage is the
    /// server's: the default does nothing.
    fn heal_in_place(&self, healed: Box<dyn Fn() + Send + Sync>) {
        drop(healed);
    }

    /// The last in-place heal of this process, if there was one (`status`).
    fn last_heal(&self) -> Option<Heal> {
        None
    }
}

/// A damaged database set aside while the queue was open ([`Engine::heal_in_place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heal {
    /// What SQLite said.
    pub why: String,
    /// Where the damaged file went.
    pub aside: std::path::PathBuf,
    pub at: std::time::SystemTime,
}

/// A job as it moves between engines ([`Engine::export`]): its instants are offsets from the
/// moment it was read, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub queue: String,
    pub key: Option<String>,
    pub version: i64,
    /// As stored (JSON text, kept byte for byte: a damaged one dies at its claim there too).
    pub payload: String,
    /// Dead (with `last_error`), else pending.
    pub dead: bool,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// How long until it may be claimed (a back-off still running); 0 for due now.
    pub due_in_ms: i64,
    /// How long ago it was enqueued (`status`'s oldest age).
    pub age_ms: i64,
    /// How long ago it last changed (a dead job's age in `status`).
    pub updated_ms: i64,
}

/// A key's current version ([`Engine::export`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyVersion {
    pub queue: String,
    pub key: String,
    pub version: i64,
}

/// What [`Engine::export`] reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRows {
    pub jobs: Vec<JobRow>,
    pub keys: Vec<KeyVersion>,
}

impl QueueRows {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.keys.is_empty()
    }

    /// Put the jobs (read in id order) in the order claims take them: by when they are due,
    /// ties by id (the sort is stable).
    pub(crate) fn in_claim_order(mut self) -> QueueRows {
        self.jobs.sort_by_key(|j| j.due_in_ms);
        self
    }
}

/// The export's `WHERE`: every row but a running one whose key moved on (`{k}` the key
/// versions table); one statement for every database ([`super::rules`]).
pub(crate) fn export_filter(k: &str) -> String {
    format!(
        "NOT (j.state = 1 AND j.key IS NOT NULL AND j.version <
              COALESCE((SELECT v.version FROM {k} v WHERE v.queue = j.queue AND v.key = j.key),
                       j.version))"
    )
}

/// The last error of a job whose stored payload is not JSON (damage): dead at its claim.
pub(crate) fn bad_payload(e: &serde_json::Error) -> String {
    format!("payload is not JSON ({e}); the row was damaged")
}

/// The last error of a job that died because its leases kept running out.
pub(crate) fn expired_message(attempts: i64, last_error: Option<&str>) -> String {
    format!(
        "lease expired on attempt {attempts} (worker died or hung){}",
        last_error
            .map(|e| format!("; before: {e}"))
            .unwrap_or_default()
    )
}
