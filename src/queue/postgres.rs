//! The queue's rows on a PostgreSQL server (`storage.backend = "postgres"`), shared by the
//! daemons of every host that mounts the workspace: the same rows, states and fences as
//! [`super::sqlite`], each state change one transaction.
//!
//! What differs from SQLite, and why it keeps the [`super::engine`] rules:
//! - a claim takes its row `FOR UPDATE SKIP LOCKED`: workers of several hosts claiming at once
//!   each get a different row, and none waits behind another's claim;
//! - every instant (`due`, `created`, `updated`) is the server's clock ([`crate::pg::NOW_MS`]),
//!   so hosts whose clocks differ still agree when a lease ran out;
//! - a keyed enqueue first bumps the key's row in `vq_key_versions` (`INSERT … ON CONFLICT DO
//!   UPDATE`), which locks it until commit: two enqueues of one key are serialised, so at most
//!   one pending row of a key exists (the partial unique index checks it too);
//! - a claim racing an enqueue of the same key: the enqueue's `UPDATE … WHERE state = 0` waits
//!   for the claim's row lock and then no longer matches, so it inserts a new pending row —
//!   the claimed job goes stale, as on SQLite.

use std::time::Duration;

use postgres::Transaction;

/// A transaction with statements prepared once per connection.
type Tx<'a, 'b, 'c> = Session<'a, 'b, Transaction<'c>>;

use super::engine::{
    bad_payload, expired_message, export_filter, Engine, Failure, JobRow, KeyVersion, QueueRows,
};
use super::stats::DeadJob;
use super::{Job, NewJob, QueueError, QueueStats};
use crate::pg::{Pg, Session, NOW_MS, NOW_SQL};

/// This store's schema version in `vikingfs_schema`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE vq_jobs (
    id         bigserial PRIMARY KEY,
    queue      text NOT NULL,
    key        text,
    version    bigint NOT NULL DEFAULT 0,
    payload    text NOT NULL,
    state      smallint NOT NULL DEFAULT 0,
    due        bigint NOT NULL,
    attempts   integer NOT NULL DEFAULT 0,
    worker     text,
    last_error text,
    created    bigint NOT NULL,
    updated    bigint NOT NULL
);
CREATE INDEX vq_jobs_due ON vq_jobs (queue, due) WHERE state < 2;
CREATE UNIQUE INDEX vq_jobs_pending_key ON vq_jobs (queue, key) WHERE state = 0 AND key IS NOT NULL;
CREATE INDEX vq_jobs_key ON vq_jobs (queue, key) WHERE key IS NOT NULL;
CREATE TABLE vq_key_versions (
    queue   text NOT NULL,
    key     text NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (queue, key)
);";

/// The queue on one PostgreSQL database.
pub struct PgEngine {
    pg: std::sync::Arc<Pg>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn age(now: i64, then: i64) -> Duration {
    Duration::from_millis(now.saturating_sub(then).max(0) as u64)
}

impl PgEngine {
    /// The queue's tables on `pg`, created when missing; a schema from a newer vikingfs is
    /// refused.
    pub fn open(pg: std::sync::Arc<Pg>) -> Result<PgEngine, QueueError> {
        pg.migrate("queue", SCHEMA_VERSION, SCHEMA)?;
        Ok(PgEngine { pg })
    }

    /// Run `f` in one transaction with the server's time.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_, '_, '_>, i64) -> Result<T, postgres::Error>,
    ) -> Result<T, QueueError> {
        Ok(self.pg.transaction(|s| {
            let now: i64 = s.one(NOW_SQL, &[])?.get(0);
            f(s, now)
        })?)
    }

    /// Statements outside a transaction (reads).
    fn read<T>(
        &self,
        f: impl FnOnce(&mut Session<'_, '_, postgres::Client>) -> Result<T, postgres::Error>,
    ) -> Result<T, QueueError> {
        Ok(self.pg.read(f)?)
    }
}

fn superseded(
    tx: &mut Tx<'_, '_, '_>,
    queue: &str,
    key: Option<&str>,
    version: i64,
) -> Result<bool, postgres::Error> {
    let Some(key) = key else { return Ok(false) };
    let current: Option<i64> = tx
        .opt(
            "SELECT version FROM vq_key_versions WHERE queue = $1 AND key = $2",
            &[&queue, &key],
        )?
        .map(|r| r.get(0));
    Ok(current.is_some_and(|c| c > version))
}

/// Forget a key's version once no row uses it (see the SQLite engine).
fn prune_key(
    tx: &mut Tx<'_, '_, '_>,
    queue: &str,
    key: Option<&str>,
) -> Result<(), postgres::Error> {
    if let Some(key) = key {
        tx.exec(
            "DELETE FROM vq_key_versions WHERE queue = $1 AND key = $2
               AND NOT EXISTS (SELECT 1 FROM vq_jobs WHERE queue = $1 AND key = $2)",
            &[&queue, &key],
        )?;
    }
    Ok(())
}

/// Is `job` still claimed under this very claim? Locks its row until commit.
fn held(tx: &mut Tx<'_, '_, '_>, job: &Job) -> Result<bool, postgres::Error> {
    Ok(tx
        .opt(
            "SELECT 1 FROM vq_jobs WHERE id = $1 AND state = 1 AND attempts = $2 FOR UPDATE",
            &[&job.id, &(job.attempts as i32)],
        )?
        .is_some())
}

fn drop_job(
    tx: &mut Tx<'_, '_, '_>,
    id: i64,
    queue: &str,
    key: Option<&str>,
) -> Result<(), postgres::Error> {
    tx.exec("DELETE FROM vq_jobs WHERE id = $1", &[&id])?;
    prune_key(tx, queue, key)
}

fn enqueue_in(
    tx: &mut Tx<'_, '_, '_>,
    now: i64,
    rerun_delay_ms: i64,
    job: &NewJob,
) -> Result<i64, postgres::Error> {
    let queue = job.queue.as_str();
    let payload = job.payload.to_string();
    let Some(key) = job.key.as_deref() else {
        return Ok(tx
            .one(
                "INSERT INTO vq_jobs (queue, key, version, payload, state, due, created, updated)
                 VALUES ($1, NULL, 0, $2, 0, $3, $3, $3) RETURNING id",
                &[&queue, &payload, &now],
            )?
            .get(0));
    };
    let version: i64 = tx
        .one(
            "INSERT INTO vq_key_versions (queue, key, version) VALUES ($1, $2, 1)
             ON CONFLICT (queue, key) DO UPDATE SET version = vq_key_versions.version + 1
             RETURNING version",
            &[&queue, &key],
        )?
        .get(0);
    tx.exec(
        "DELETE FROM vq_jobs WHERE queue = $1 AND key = $2 AND state = 2",
        &[&queue, &key],
    )?;
    let running = tx
        .opt(
            "SELECT 1 FROM vq_jobs WHERE queue = $1 AND key = $2 AND state = 1 LIMIT 1",
            &[&queue, &key],
        )?
        .is_some();
    let due = if running { now + rerun_delay_ms } else { now };
    let updated = tx.opt(
        "UPDATE vq_jobs SET version = $3, payload = $4,
                            due = CASE WHEN attempts > 0 THEN $6 ELSE due END,
                            attempts = 0, last_error = NULL, updated = $5
         WHERE queue = $1 AND key = $2 AND state = 0 RETURNING id",
        &[&queue, &key, &version, &payload, &now, &due],
    )?;
    if let Some(r) = updated {
        return Ok(r.get(0));
    }
    Ok(tx
        .one(
            "INSERT INTO vq_jobs (queue, key, version, payload, state, due, created, updated)
             VALUES ($1, $2, $3, $4, 0, $6, $5, $5) RETURNING id",
            &[&queue, &key, &version, &payload, &now, &due],
        )?
        .get(0))
}

impl Engine for PgEngine {
    fn location(&self) -> String {
        format!("PostgreSQL {}", self.pg.location())
    }

    fn enqueue(&self, jobs: &[NewJob], rerun_delay: Duration) -> Result<Vec<i64>, QueueError> {
        let delay = ms(rerun_delay);
        self.write(|tx, now| jobs.iter().map(|j| enqueue_in(tx, now, delay, j)).collect())
    }

    fn any_due(&self, queue: &str) -> Result<bool, QueueError> {
        self.read(|c| {
            Ok(c.opt(
                &format!(
                    "SELECT 1 FROM vq_jobs WHERE queue = $1 AND state < 2 AND due <= (SELECT {NOW_MS}) LIMIT 1"
                ),
                &[&queue],
            )?
            .is_some())
        })
    }

    fn claim(
        &self,
        queue: &str,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Job>, QueueError> {
        let max_attempts = i64::from(max_attempts);
        self.write(|tx, now| loop {
            let row = tx.opt(
                "SELECT id, key, version, payload, attempts, state, last_error FROM vq_jobs
                 WHERE queue = $1 AND state < 2 AND due <= $2 ORDER BY due, id LIMIT 1
                 FOR UPDATE SKIP LOCKED",
                &[&queue, &now],
            )?;
            let Some(r) = row else { return Ok(None) };
            let id: i64 = r.get(0);
            let key: Option<String> = r.get(1);
            let version: i64 = r.get(2);
            let payload: String = r.get(3);
            let attempts = i64::from(r.get::<_, i32>(4));
            let state: i16 = r.get(5);
            let last_error: Option<String> = r.get(6);
            if state == 1 {
                if superseded(tx, queue, key.as_deref(), version)? {
                    drop_job(tx, id, queue, key.as_deref())?;
                    continue;
                }
                if attempts >= max_attempts {
                    tx.exec(
                        "UPDATE vq_jobs SET state = 2, worker = NULL, last_error = $2, updated = $3
                         WHERE id = $1",
                        &[&id, &expired_message(attempts, last_error.as_deref()), &now],
                    )?;
                    continue;
                }
            }
            let payload = match serde_json::from_str(&payload) {
                Ok(p) => p,
                Err(e) => {
                    // Damaged, not transient: it would stand at the head of the line forever.
                    tx.exec(
                        "UPDATE vq_jobs SET state = 2, worker = NULL, last_error = $2, updated = $3
                         WHERE id = $1",
                        &[&id, &bad_payload(&e), &now],
                    )?;
                    continue;
                }
            };
            tx.exec(
                "UPDATE vq_jobs SET state = 1, due = $2, attempts = attempts + 1, worker = $3,
                                    updated = $4
                 WHERE id = $1",
                &[&id, &now.saturating_add(ms(lease)), &worker, &now],
            )?;
            return Ok(Some(Job {
                id,
                queue: queue.to_string(),
                key,
                version,
                payload,
                attempts: (attempts + 1) as u32,
            }));
        })
    }

    fn renew(&self, job: &Job, worker: &str, lease: Duration) -> Result<bool, QueueError> {
        self.write(|tx, now| {
            let n = tx.exec(
                "UPDATE vq_jobs SET due = $3, worker = $4, updated = $5
                 WHERE id = $1 AND state = 1 AND attempts = $2",
                &[
                    &job.id,
                    &(job.attempts as i32),
                    &now.saturating_add(ms(lease)),
                    &worker,
                    &now,
                ],
            )?;
            Ok(n == 1)
        })
    }

    fn complete(&self, job: &Job) -> Result<(), QueueError> {
        let done = self.write(|tx, _| {
            let n = tx.exec(
                "DELETE FROM vq_jobs WHERE id = $1 AND state = 1 AND attempts = $2",
                &[&job.id, &(job.attempts as i32)],
            )?;
            if n == 1 {
                prune_key(tx, &job.queue, job.key.as_deref())?;
            }
            Ok(n == 1)
        })?;
        if done {
            Ok(())
        } else {
            Err(QueueError::NotClaimed { id: job.id })
        }
    }

    fn fail(&self, job: &Job, failure: Failure<'_>) -> Result<(), QueueError> {
        let was_held = self.write(|tx, now| {
            if !held(tx, job)? {
                return Ok(false);
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                drop_job(tx, job.id, &job.queue, job.key.as_deref())?;
                return Ok(true);
            }
            match failure {
                Failure::Wait { message, after } => tx.exec(
                    "UPDATE vq_jobs SET state = 0, worker = NULL, last_error = $2, due = $3,
                                        attempts = GREATEST(attempts - 1, 0), updated = $4
                     WHERE id = $1",
                    &[&job.id, &message, &now.saturating_add(ms(after)), &now],
                )?,
                Failure::Dead { message } => tx.exec(
                    "UPDATE vq_jobs SET state = 2, worker = NULL, last_error = $2, updated = $3
                     WHERE id = $1",
                    &[&job.id, &message, &now],
                )?,
                Failure::Retry { message, after } => tx.exec(
                    "UPDATE vq_jobs SET state = 0, worker = NULL, last_error = $2, due = $3,
                                        updated = $4
                     WHERE id = $1",
                    &[&job.id, &message, &now.saturating_add(ms(after)), &now],
                )?,
            };
            Ok(true)
        })?;
        if was_held {
            Ok(())
        } else {
            Err(QueueError::NotClaimed { id: job.id })
        }
    }

    fn release(&self, job: &Job) -> Result<(), QueueError> {
        self.write(|tx, now| {
            if !held(tx, job)? {
                return Ok(());
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                drop_job(tx, job.id, &job.queue, job.key.as_deref())?;
            } else {
                tx.exec(
                    "UPDATE vq_jobs SET state = 0, worker = NULL, due = $2,
                                        attempts = attempts - 1, updated = $2
                     WHERE id = $1",
                    &[&job.id, &now],
                )?;
            }
            Ok(())
        })
    }

    fn is_current(&self, job: &Job) -> Result<bool, QueueError> {
        self.read(|c| {
            Ok(c.opt(
                "SELECT 1 FROM vq_jobs j WHERE j.id = $1 AND j.state = 1 AND j.attempts = $2
                   AND (j.key IS NULL OR $3 = (SELECT version FROM vq_key_versions k
                                               WHERE k.queue = j.queue AND k.key = j.key))",
                &[&job.id, &(job.attempts as i32), &job.version],
            )?
            .is_some())
        })
    }

    fn has_pending(&self, queue: &str, key: &str) -> Result<bool, QueueError> {
        self.read(|c| {
            Ok(c.opt(
                "SELECT 1 FROM vq_jobs WHERE queue = $1 AND key = $2 AND state < 2 LIMIT 1",
                &[&queue, &key],
            )?
            .is_some())
        })
    }

    fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError> {
        self.read(|c| {
            Ok(c.opt(
                "SELECT version FROM vq_key_versions WHERE queue = $1 AND key = $2",
                &[&queue, &key],
            )?
            .map(|r| r.get(0)))
        })
    }

    fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError> {
        self.write(|tx, now| {
            tx.exec(
                "DELETE FROM vq_jobs d WHERE d.state = 2 AND d.key IS NOT NULL
                   AND ($1::text IS NULL OR d.queue = $1)
                   AND EXISTS (SELECT 1 FROM vq_jobs o WHERE o.queue = d.queue AND o.key = d.key
                               AND o.state < 2)",
                &[&queue],
            )?;
            let n = tx.exec(
                "UPDATE vq_jobs SET state = 0, attempts = 0, due = $2, updated = $2
                 WHERE state = 2 AND ($1::text IS NULL OR queue = $1)",
                &[&queue, &now],
            )?;
            Ok(n as usize)
        })
    }

    fn stats(&self, dead_shown: usize) -> Result<Vec<QueueStats>, QueueError> {
        self.read(|c| {
            let now: i64 = c.one(NOW_SQL, &[])?.get(0);
            let rows = c.all(
                "SELECT queue,
                        COUNT(*) FILTER (WHERE state = 0),
                        COUNT(*) FILTER (WHERE state = 0 AND attempts > 0),
                        COUNT(*) FILTER (WHERE state = 1 AND due > $1),
                        COUNT(*) FILTER (WHERE state = 1 AND due <= $1),
                        COUNT(*) FILTER (WHERE state = 2),
                        MIN(created) FILTER (WHERE state < 2)
                 FROM vq_jobs GROUP BY queue ORDER BY queue",
                &[&now],
            )?;
            let mut out: Vec<QueueStats> = rows
                .iter()
                .map(|r| QueueStats {
                    queue: r.get(0),
                    pending: r.get::<_, i64>(1) as u64,
                    retrying: r.get::<_, i64>(2) as u64,
                    running: r.get::<_, i64>(3) as u64,
                    expired: r.get::<_, i64>(4) as u64,
                    dead: r.get::<_, i64>(5) as u64,
                    oldest_age: r.get::<_, Option<i64>>(6).map(|t| age(now, t)),
                    dead_jobs: Vec::new(),
                })
                .collect();
            for s in out.iter_mut().filter(|s| s.dead > 0) {
                s.dead_jobs = c
                    .all(
                        "SELECT id, key, attempts, last_error, updated FROM vq_jobs
                         WHERE queue = $1 AND state = 2 ORDER BY updated DESC, id DESC LIMIT $2",
                        &[&s.queue, &(dead_shown as i64)],
                    )?
                    .iter()
                    .map(|r| DeadJob {
                        id: r.get(0),
                        key: r.get(1),
                        attempts: r.get::<_, i32>(2) as u32,
                        error: r.get::<_, Option<String>>(3).unwrap_or_default(),
                        age: age(now, r.get(4)),
                    })
                    .collect();
            }
            Ok(out)
        })
    }

    fn unfinished(&self, queues: Option<&[&str]>) -> Result<u64, QueueError> {
        self.read(|c| {
            let n: i64 = match queues {
                None => c
                    .one("SELECT COUNT(*) FROM vq_jobs WHERE state < 2", &[])?
                    .get(0),
                Some(qs) => {
                    let qs: Vec<&str> = qs.to_vec();
                    c.one(
                        "SELECT COUNT(*) FROM vq_jobs WHERE queue = ANY($1) AND state < 2",
                        &[&qs],
                    )?
                    .get(0)
                }
            };
            Ok(n as u64)
        })
    }

    fn export(&self) -> Result<QueueRows, QueueError> {
        // One transaction: one snapshot of both tables. Its rows are locked against claims of
        // other hosts meanwhile (`FOR SHARE`), though a migration runs with no daemon anyway.
        self.write(|tx, now| {
            let jobs = tx
                .all(
                    &format!(
                        "SELECT j.queue, j.key, j.version, j.payload, j.state = 2, j.attempts,
                                j.last_error,
                                CASE WHEN j.state = 0 THEN GREATEST(j.due - $1, 0) ELSE 0 END,
                                GREATEST($1 - j.created, 0), GREATEST($1 - j.updated, 0)
                         FROM vq_jobs j WHERE {} ORDER BY j.id FOR SHARE",
                        export_filter("vq_key_versions")
                    ),
                    &[&now],
                )?
                .iter()
                .map(|r| JobRow {
                    queue: r.get(0),
                    key: r.get(1),
                    version: r.get(2),
                    payload: r.get(3),
                    dead: r.get(4),
                    attempts: r.get::<_, i32>(5) as u32,
                    last_error: r.get(6),
                    due_in_ms: r.get(7),
                    age_ms: r.get(8),
                    updated_ms: r.get(9),
                })
                .collect();
            let keys = tx
                .all(
                    "SELECT queue, key, version FROM vq_key_versions ORDER BY queue, key",
                    &[],
                )?
                .iter()
                .map(|r| KeyVersion {
                    queue: r.get(0),
                    key: r.get(1),
                    version: r.get(2),
                })
                .collect();
            Ok(QueueRows { jobs, keys }.in_claim_order())
        })
    }

    fn import(&self, jobs: &[JobRow], keys: &[KeyVersion]) -> Result<(), QueueError> {
        self.write(|tx, now| {
            for k in keys {
                tx.exec(
                    "INSERT INTO vq_key_versions (queue, key, version) VALUES ($1, $2, $3)
                     ON CONFLICT (queue, key)
                     DO UPDATE SET version = GREATEST(vq_key_versions.version, EXCLUDED.version)",
                    &[&k.queue, &k.key, &k.version],
                )?;
            }
            for j in jobs {
                tx.exec(
                    "INSERT INTO vq_jobs (queue, key, version, payload, state, due, attempts,
                                          last_error, created, updated)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        &j.queue,
                        &j.key,
                        &j.version,
                        &j.payload,
                        &(if j.dead { 2i16 } else { 0i16 }),
                        &now.saturating_add(j.due_in_ms),
                        &(j.attempts as i32),
                        &j.last_error,
                        &now.saturating_sub(j.age_ms),
                        &now.saturating_sub(j.updated_ms),
                    ],
                )?;
            }
            Ok(())
        })
    }

    fn clear(&self) -> Result<(), QueueError> {
        self.write(|tx, _| {
            tx.exec("DELETE FROM vq_jobs", &[])?;
            tx.exec("DELETE FROM vq_key_versions", &[])?;
            Ok(())
        })
    }
}
