//! The durable job queue: named queues of jobs in one database (SQLite by default, behind the
//! [`engine::Engine`] seam), worked by any number of processes, plus the in-process worker
//! pool that drains it.
//!
//! What it owns, and the OpenViking failures each part answers:
//! - claims carry a lease that the worker renews; a job whose lease ran out is claimable again at
//!   once, by any live worker (OpenViking #3225: rows stuck in `processing` until restart), and a
//!   pool that starts ends the leases of this host's exited processes without waiting them out;
//! - failures retry with exponential back-off up to `max_attempts`, then the job is dead with its
//!   last error (OpenViking #4919: a permanent error retried forever);
//! - coalesce versions per key live in the database (OpenViking #3891): re-enqueueing a key whose
//!   job is still pending updates that row in place, so a restart neither loses nor floods work.
//!
//! The queue knows nothing of what jobs mean: handlers are passed in as values
//! ([`JobHandler`]), so this layer only looks down.

pub mod engine;
mod error;
mod pool;
pub mod postgres;
pub(crate) mod rules;
mod spool;
pub mod sqlite;
mod stats;
mod store;

pub use error::{Cause, JobError, QueueError};
pub use pool::{drain, drain_with, Foreground, HandlerSpec, PoolOptions, Progress, WorkerPool};
pub use stats::{DeadJob, QueueStats};
pub use store::{Job, Queue, QueueOptions};

/// A job to enqueue. Spool files hold it as a JSON array `[queue, key, payload]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "JobLine", into = "JobLine")]
pub struct NewJob {
    /// The named queue it goes to.
    pub queue: String,
    /// Coalesce key: a pending job of the same key takes this one's payload in place.
    pub key: Option<String>,
    pub payload: serde_json::Value,
}

/// [`NewJob`] as a spool line spells it.
type JobLine = (String, Option<String>, serde_json::Value);

impl From<JobLine> for NewJob {
    fn from((queue, key, payload): JobLine) -> NewJob {
        NewJob {
            queue,
            key,
            payload,
        }
    }
}

impl From<NewJob> for JobLine {
    fn from(j: NewJob) -> JobLine {
        (j.queue, j.key, j.payload)
    }
}

impl NewJob {
    pub fn new(queue: &str, key: Option<String>, payload: serde_json::Value) -> NewJob {
        NewJob {
            queue: queue.to_string(),
            key,
            payload,
        }
    }
}

/// Directory summaries (`.abstract.md` / `.overview.md`).
pub const SEMANTIC: &str = "semantic";
/// A file's record in the derived index (its text, searchable at once).
pub const EMBEDDING: &str = "embedding";
/// A record's vector from the configured model (after its text is indexed).
pub const DENSE: &str = "dense";
/// Bringing the derived state in line with a changed `.vikingignore`.
pub const REDERIVE: &str = "rederive";
/// Phase 2 of a session commit.
pub const SESSION_COMMIT: &str = "session_commit";
/// The content hashes of the history's entries (filled in after they are recorded).
pub const HISTORY_HASH: &str = "history_hash";
/// The queues this project uses; `status` always lists them, even when empty.
pub const KNOWN_QUEUES: &[&str] = &[
    SEMANTIC,
    EMBEDDING,
    DENSE,
    REDERIVE,
    SESSION_COMMIT,
    HISTORY_HASH,
];

/// Work done for one job. Must be idempotent: a job may run again after its worker died.
pub trait JobHandler: Send + Sync {
    fn handle(&self, job: &Job) -> Result<(), JobError>;
}

impl<F> JobHandler for F
where
    F: Fn(&Job) -> Result<(), JobError> + Send + Sync,
{
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        self(job)
    }
}
