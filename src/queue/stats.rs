//! Read-only views of the queue for `status`, `wait` and drains: counts per queue, the last
//! errors of dead jobs, how much work is outstanding.

use std::time::Duration;

use rusqlite::params;

use super::store::{age, now_ms};
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
        let conn = self.conn()?;
        let now = now_ms();
        let mut out: Vec<QueueStats> = conn
            .prepare_cached(
                "SELECT queue,
                        SUM(state = 0), SUM(state = 0 AND attempts > 0),
                        SUM(state = 1 AND due > ?1), SUM(state = 1 AND due <= ?1),
                        SUM(state = 2), MIN(CASE WHEN state < 2 THEN created END)
                 FROM jobs GROUP BY queue ORDER BY queue",
            )?
            .query_map([now], |r| {
                Ok(QueueStats {
                    queue: r.get(0)?,
                    pending: r.get::<_, i64>(1)? as u64,
                    retrying: r.get::<_, i64>(2)? as u64,
                    running: r.get::<_, i64>(3)? as u64,
                    expired: r.get::<_, i64>(4)? as u64,
                    dead: r.get::<_, i64>(5)? as u64,
                    oldest_age: r.get::<_, Option<i64>>(6)?.map(|t| age(now, t)),
                    dead_jobs: Vec::new(),
                })
            })?
            .collect::<Result<_, _>>()?;
        let mut dead = conn.prepare_cached(
            "SELECT id, key, attempts, last_error, updated FROM jobs
             WHERE queue = ?1 AND state = 2 ORDER BY updated DESC, id DESC LIMIT ?2",
        )?;
        for s in out.iter_mut().filter(|s| s.dead > 0) {
            s.dead_jobs = dead
                .query_map(params![s.queue, DEAD_JOBS_SHOWN as i64], |r| {
                    Ok(DeadJob {
                        id: r.get(0)?,
                        key: r.get(1)?,
                        attempts: r.get::<_, i64>(2)? as u32,
                        error: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                        age: age(now, r.get(4)?),
                    })
                })?
                .collect::<Result<_, _>>()?;
        }
        Ok(out)
    }

    /// Jobs not finished (pending or claimed) in `queues`, or in all queues for `None`;
    /// jobs a live process spooled and not in the database yet count too (in any queue: a
    /// spool line does not say which without reading it). Spools of dead processes are
    /// replayed into the database first.
    pub fn outstanding(&self, queues: Option<&[&str]>) -> Result<u64, QueueError> {
        self.replay_spools()?;
        let spooled = self.spooled();
        let conn = self.conn()?;
        let n: i64 = match queues {
            None => conn.query_row("SELECT COUNT(*) FROM jobs WHERE state < 2", [], |r| {
                r.get(0)
            })?,
            Some(qs) => {
                let mut stmt = conn
                    .prepare_cached("SELECT COUNT(*) FROM jobs WHERE queue = ?1 AND state < 2")?;
                let mut sum = 0i64;
                for q in qs {
                    sum += stmt.query_row([q], |r| r.get::<_, i64>(0))?;
                }
                sum
            }
        };
        Ok(n as u64 + spooled)
    }

    /// No job is pending or claimed in any queue (dead jobs do not count: they wait for a
    /// repair, not for time).
    pub fn is_idle(&self) -> Result<bool, QueueError> {
        Ok(self.outstanding(None)? == 0)
    }
}
