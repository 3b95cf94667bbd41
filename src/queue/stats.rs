//! Read-only views of the queue for `status`, `wait` and drains: counts per queue, the last
//! errors of dead jobs, how much work is outstanding.

use std::time::Duration;

use super::{Queue, QueueError};

/// Dead jobs listed per queue by [`Queue::stats`].
const DEAD_JOBS_SHOWN: usize = 5;

/// A dead job as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadJob {
    pub id: i64,
    pub key: Option<String>,
    pub attempts: u32,
    pub error: String,
    /// When it died.
    pub age: Duration,
}

/// Counts for one named queue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueStats {
    pub queue: String,
    /// Waiting to be claimed (including jobs backing off before a retry).
    pub pending: u64,
    /// Of `pending`, jobs that failed before and wait for a retry.
    pub retrying: u64,
    /// Claimed, lease alive.
    pub running: u64,
    /// Claimed, lease ran out (worker died or hung): the next claim takes it.
    pub expired: u64,
    /// Of `expired`, how many each claimant (a worker name) holds.
    pub expired_by: Vec<(String, u64)>,
    pub dead: u64,
    /// Age of the oldest job not yet done (pending or claimed).
    pub oldest_age: Option<Duration>,
    /// The most recently dead jobs with their last error, newest first.
    pub dead_jobs: Vec<DeadJob>,
}

impl QueueStats {
    /// Jobs not finished yet (dead ones are finished: they wait for a repair).
    pub fn outstanding(&self) -> u64 {
        self.pending + self.running + self.expired
    }
}

impl Queue {
    /// Counts per queue that has or had jobs, sorted by name.
    pub fn stats(&self) -> Result<Vec<QueueStats>, QueueError> {
        self.engine().stats(DEAD_JOBS_SHOWN)
    }

    /// Jobs not finished (pending or claimed) in `queues`, or in all queues for `None`;
    /// jobs a live process spooled and not in the database yet count too (in any queue: a
    /// spool line does not say which without reading it). Spools of dead processes are
    /// replayed into the database first.
    pub fn outstanding(&self, queues: Option<&[&str]>) -> Result<u64, QueueError> {
        self.replay_spools()?;
        let spooled = self.spooled();
        Ok(self.engine().unfinished(queues)? + spooled)
    }

    /// No job is pending or claimed in any queue (dead jobs do not count: they wait for a
    /// repair, not for time).
    pub fn is_idle(&self) -> Result<bool, QueueError> {
        Ok(self.outstanding(None)? == 0)
    }
}
