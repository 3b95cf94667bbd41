//! The queue's rows in one SQLite database (`WORKSPACE/.vikingfs/queue.db`): the default
//! [`Engine`], each state change one `BEGIN IMMEDIATE` transaction.
//!
//! Row layout: `state` is pending (0), running (1) or dead (2); `due` is the instant (ms)
//! the row is next claimable (see [`super::engine`]); ids are AUTOINCREMENT, never reused;
//! `key_versions` keeps each key's version while a row of the key exists.
//!
//! Durability: WAL with `synchronous=NORMAL`. A committed enqueue survives a crash of any
//! process (it is in the WAL); only an OS crash or power loss may drop the last few commits,
//! as WAL mode documents. That trade keeps enqueue at tens of microseconds, cheap enough for
//! the FUSE write path.

mod schema;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::engine::{
    bad_payload, expired_message, export_filter, Engine, Failure, JobRow, KeyVersion, QueueRows,
};
use super::stats::DeadJob;
use super::{Job, NewJob, QueueError, QueueStats};

/// `state` of a claimed row (0 is pending, 2 dead; SQL below spells those inline).
const RUNNING: i64 = 1;
/// Connections kept open for reuse (more may be open while busy).
const MAX_IDLE_CONNECTIONS: usize = 8;

/// The queue database at one path; shareable between threads.
pub struct SqliteEngine {
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Held around every write transaction of this process. SQLite makes a second writer
    /// wait in its busy handler, which sleeps 1, 2, 5… ms between tries: a FUSE create that
    /// met a worker's commit would stall a millisecond or more. Writers of one process queue
    /// here instead and are woken the moment the previous commit is done; the busy handler
    /// is left to arbitrate between processes.
    writer: Mutex<()>,
}

/// A pooled connection, handed back on drop.
pub(crate) struct PooledConn<'a> {
    engine: &'a SqliteEngine,
    conn: Option<Connection>,
}

impl std::ops::Deref for PooledConn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let mut idle = self.engine.idle.lock();
            if idle.len() < MAX_IDLE_CONNECTIONS {
                idle.push(c);
            }
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn age(now: i64, then: i64) -> Duration {
    Duration::from_millis(now.saturating_sub(then).max(0) as u64)
}

impl SqliteEngine {
    /// Open (creating and migrating when needed) the queue database at `path`.
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<SqliteEngine, QueueError> {
        let open_err = |source| QueueError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut conn = schema::open_connection(path, busy_timeout).map_err(open_err)?;
        schema::migrate(&mut conn, path).map_err(|e| match e {
            QueueError::Sql(source) => open_err(source),
            other => other,
        })?;
        Ok(SqliteEngine {
            path: path.to_path_buf(),
            busy_timeout,
            idle: Mutex::new(vec![conn]),
            writer: Mutex::new(()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn conn(&self) -> Result<PooledConn<'_>, QueueError> {
        let cached = self.idle.lock().pop();
        let conn = match cached {
            Some(c) => c,
            None => schema::open_connection(&self.path, self.busy_timeout)?,
        };
        Ok(PooledConn {
            engine: self,
            conn: Some(conn),
        })
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction (taking the write lock up front, so two
    /// processes never deadlock upgrading a read to a write).
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> Result<T, QueueError>,
    ) -> Result<T, QueueError> {
        let mut conn = self.conn()?;
        let _writer = self.writer.lock();
        let conn = conn.conn.as_mut().expect("connection present until drop");
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx, now_ms())?;
        tx.commit()?;
        Ok(out)
    }
}

/// True when the job's key has been enqueued again since this job's version.
fn superseded(
    tx: &Connection,
    queue: &str,
    key: Option<&str>,
    version: i64,
) -> rusqlite::Result<bool> {
    let Some(key) = key else { return Ok(false) };
    let current: Option<i64> = tx
        .query_row(
            "SELECT version FROM key_versions WHERE queue = ?1 AND key = ?2",
            params![queue, key],
            |r| r.get(0),
        )
        .optional()?;
    Ok(current.is_some_and(|c| c > version))
}

/// Forget a key's version once no row uses it, so the table does not grow with every path
/// ever written. Safe: versions are only compared against rows that exist.
fn prune_key(tx: &Connection, queue: &str, key: Option<&str>) -> rusqlite::Result<()> {
    if let Some(key) = key {
        tx.prepare_cached(
            "DELETE FROM key_versions WHERE queue = ?1 AND key = ?2
               AND NOT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND key = ?2)",
        )?
        .execute(params![queue, key])?;
    }
    Ok(())
}

/// Is `job` still claimed under this very claim?
fn held(tx: &Connection, job: &Job) -> rusqlite::Result<bool> {
    tx.prepare_cached(
        "SELECT EXISTS(SELECT 1 FROM jobs WHERE id = ?1 AND state = 1 AND attempts = ?2)",
    )?
    .query_row(params![job.id, job.attempts], |r| r.get(0))
}

/// Drop the job (its key moved on) and the key's version if nothing else uses it.
fn drop_job(tx: &Connection, job_id: i64, queue: &str, key: Option<&str>) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM jobs WHERE id = ?1", [job_id])?;
    prune_key(tx, queue, key)
}

impl Engine for SqliteEngine {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn enqueue(&self, jobs: &[NewJob], rerun_delay: Duration) -> Result<Vec<i64>, QueueError> {
        let delay = ms(rerun_delay);
        self.write(|tx, now| {
            let mut ids = Vec::with_capacity(jobs.len());
            for j in jobs {
                let payload = j.payload.to_string();
                ids.push(enqueue_in(
                    tx,
                    now,
                    delay,
                    &j.queue,
                    j.key.as_deref(),
                    &payload,
                )?);
            }
            Ok(ids)
        })
    }

    fn any_due(&self, queue: &str) -> Result<bool, QueueError> {
        Ok(self
            .conn()?
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM jobs WHERE queue = ?1 AND state < 2 AND due <= ?2)",
            )?
            .query_row(params![queue, now_ms()], |r| r.get(0))?)
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
            let row = tx
                .prepare_cached(
                    "SELECT id, key, version, payload, attempts, state, last_error FROM jobs
                     WHERE queue = ?1 AND state < 2 AND due <= ?2 ORDER BY due, id LIMIT 1",
                )?
                .query_row(params![queue, now], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, Option<String>>(6)?,
                    ))
                })
                .optional()?;
            let Some((id, key, version, payload, attempts, state, last_error)) = row else {
                return Ok(None);
            };
            if state == RUNNING {
                // Its worker died or hung. A newer version makes it moot; too many deaths
                // make it a poison job rather than a reason to crash workers forever.
                if superseded(tx, queue, key.as_deref(), version)? {
                    drop_job(tx, id, queue, key.as_deref())?;
                    continue;
                }
                if attempts >= max_attempts {
                    tx.execute(
                        "UPDATE jobs SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
                        params![id, expired_message(attempts, last_error.as_deref()), now],
                    )?;
                    continue;
                }
            }
            let payload = match serde_json::from_str(&payload) {
                Ok(p) => p,
                Err(e) => {
                    // Damaged, not transient: it would stand at the head of the line forever.
                    tx.execute(
                        "UPDATE jobs SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
                        params![id, bad_payload(&e), now],
                    )?;
                    continue;
                }
            };
            tx.prepare_cached(
                "UPDATE jobs SET state = 1, due = ?2, attempts = attempts + 1, worker = ?3, updated = ?4
                 WHERE id = ?1",
            )?
            .execute(params![id, now.saturating_add(ms(lease)), worker, now])?;
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
            let n = tx
                .prepare_cached(
                    "UPDATE jobs SET due = ?3, worker = ?4, updated = ?5
                     WHERE id = ?1 AND state = 1 AND attempts = ?2",
                )?
                .execute(params![
                    job.id,
                    job.attempts,
                    now.saturating_add(ms(lease)),
                    worker,
                    now
                ])?;
            Ok(n == 1)
        })
    }

    fn complete(&self, job: &Job) -> Result<(), QueueError> {
        self.write(|tx, _| {
            let n = tx
                .prepare_cached("DELETE FROM jobs WHERE id = ?1 AND state = 1 AND attempts = ?2")?
                .execute(params![job.id, job.attempts])?;
            if n == 0 {
                return Err(QueueError::NotClaimed { id: job.id });
            }
            prune_key(tx, &job.queue, job.key.as_deref())?;
            Ok(())
        })
    }

    fn fail(&self, job: &Job, failure: Failure<'_>) -> Result<(), QueueError> {
        self.write(|tx, now| {
            if !held(tx, job)? {
                return Err(QueueError::NotClaimed { id: job.id });
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                drop_job(tx, job.id, &job.queue, job.key.as_deref())?;
                return Ok(());
            }
            match failure {
                Failure::Wait { message, after } => tx.execute(
                    "UPDATE jobs SET state = 0, worker = NULL, last_error = ?2, due = ?3, \
                     attempts = MAX(attempts - 1, 0), updated = ?4 WHERE id = ?1",
                    params![job.id, message, now.saturating_add(ms(after)), now],
                )?,
                Failure::Dead { message } => tx.execute(
                    "UPDATE jobs SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
                    params![job.id, message, now],
                )?,
                Failure::Retry { message, after } => tx.execute(
                    "UPDATE jobs SET state = 0, worker = NULL, last_error = ?2, due = ?3, updated = ?4 WHERE id = ?1",
                    params![job.id, message, now.saturating_add(ms(after)), now],
                )?,
            };
            Ok(())
        })
    }

    fn release(&self, job: &Job) -> Result<(), QueueError> {
        self.write(|tx, now| {
            if !held(tx, job)? {
                return Ok(());
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                drop_job(tx, job.id, &job.queue, job.key.as_deref())?;
            } else {
                tx.execute(
                    "UPDATE jobs SET state = 0, worker = NULL, due = ?2, attempts = attempts - 1, updated = ?2
                     WHERE id = ?1",
                    params![job.id, now],
                )?;
            }
            Ok(())
        })
    }

    fn is_current(&self, job: &Job) -> Result<bool, QueueError> {
        let conn = self.conn()?;
        let ok = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM jobs j WHERE j.id = ?1 AND j.state = 1 AND j.attempts = ?2
                   AND (j.key IS NULL OR ?3 = (SELECT version FROM key_versions k
                                                WHERE k.queue = j.queue AND k.key = j.key)))",
            )?
            .query_row(params![job.id, job.attempts, job.version], |r| r.get(0))?;
        Ok(ok)
    }

    fn has_pending(&self, queue: &str, key: &str) -> Result<bool, QueueError> {
        let conn = self.conn()?;
        let pending = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM jobs WHERE queue = ?1 AND key = ?2 AND state < 2)",
            )?
            .query_row(params![queue, key], |r| r.get(0))?;
        Ok(pending)
    }

    fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT version FROM key_versions WHERE queue = ?1 AND key = ?2",
                params![queue, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError> {
        self.write(|tx, now| {
            tx.execute(
                "DELETE FROM jobs WHERE state = 2 AND key IS NOT NULL AND (?1 IS NULL OR queue = ?1)
                   AND EXISTS (SELECT 1 FROM jobs o WHERE o.queue = jobs.queue AND o.key = jobs.key
                               AND o.state < 2)",
                params![queue],
            )?;
            Ok(tx.execute(
                "UPDATE jobs SET state = 0, attempts = 0, due = ?2, updated = ?2
                 WHERE state = 2 AND (?1 IS NULL OR queue = ?1)",
                params![queue, now],
            )?)
        })
    }

    fn stats(&self, dead_shown: usize) -> Result<Vec<QueueStats>, QueueError> {
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
                .query_map(params![s.queue, dead_shown as i64], |r| {
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

    fn unfinished(&self, queues: Option<&[&str]>) -> Result<u64, QueueError> {
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
        Ok(n as u64)
    }

    fn export(&self) -> Result<QueueRows, QueueError> {
        // A write transaction: one snapshot of both tables, no claim in between.
        self.write(|tx, now| {
            let jobs = tx
                .prepare(&format!(
                    "SELECT j.queue, j.key, j.version, j.payload, j.state = 2, j.attempts,
                            j.last_error, CASE WHEN j.state = 0 THEN MAX(j.due - ?1, 0) ELSE 0 END,
                            MAX(?1 - j.created, 0), MAX(?1 - j.updated, 0)
                     FROM jobs j WHERE {} ORDER BY j.id",
                    export_filter("key_versions")
                ))?
                .query_map([now], |r| {
                    Ok(JobRow {
                        queue: r.get(0)?,
                        key: r.get(1)?,
                        version: r.get(2)?,
                        payload: r.get(3)?,
                        dead: r.get(4)?,
                        attempts: r.get::<_, i64>(5)? as u32,
                        last_error: r.get(6)?,
                        due_in_ms: r.get(7)?,
                        age_ms: r.get(8)?,
                        updated_ms: r.get(9)?,
                    })
                })?
                .collect::<Result<_, _>>()?;
            let keys = tx
                .prepare("SELECT queue, key, version FROM key_versions ORDER BY queue, key")?
                .query_map([], |r| {
                    Ok(KeyVersion {
                        queue: r.get(0)?,
                        key: r.get(1)?,
                        version: r.get(2)?,
                    })
                })?
                .collect::<Result<_, _>>()?;
            Ok(QueueRows { jobs, keys }.in_claim_order())
        })
    }

    fn import(&self, jobs: &[JobRow], keys: &[KeyVersion]) -> Result<(), QueueError> {
        self.write(|tx, now| {
            let mut key = tx.prepare_cached(
                "INSERT INTO key_versions (queue, key, version) VALUES (?1, ?2, ?3)
                 ON CONFLICT (queue, key) DO UPDATE SET version = MAX(version, excluded.version)",
            )?;
            for k in keys {
                key.execute(params![k.queue, k.key, k.version])?;
            }
            let mut job = tx.prepare_cached(
                "INSERT INTO jobs (queue, key, version, payload, state, due, attempts, last_error,
                                   created, updated)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for j in jobs {
                job.execute(params![
                    j.queue,
                    j.key,
                    j.version,
                    j.payload,
                    if j.dead { 2 } else { 0 },
                    now.saturating_add(j.due_in_ms),
                    i64::from(j.attempts),
                    j.last_error,
                    now.saturating_sub(j.age_ms),
                    now.saturating_sub(j.updated_ms),
                ])?;
            }
            Ok(())
        })
    }

    fn clear(&self) -> Result<(), QueueError> {
        self.write(|tx, _| {
            tx.execute_batch("DELETE FROM jobs; DELETE FROM key_versions;")?;
            Ok(())
        })
    }
}

fn enqueue_in(
    tx: &Connection,
    now: i64,
    rerun_delay_ms: i64,
    queue: &str,
    key: Option<&str>,
    payload: &str,
) -> rusqlite::Result<i64> {
    let Some(key) = key else {
        tx.prepare_cached(
            "INSERT INTO jobs (queue, key, version, payload, state, due, created, updated)
             VALUES (?1, NULL, 0, ?2, 0, ?3, ?3, ?3)",
        )?
        .execute(params![queue, payload, now])?;
        return Ok(tx.last_insert_rowid());
    };
    let version: i64 = tx
        .prepare_cached(
            "INSERT INTO key_versions (queue, key, version) VALUES (?1, ?2, 1)
             ON CONFLICT (queue, key) DO UPDATE SET version = version + 1 RETURNING version",
        )?
        .query_row(params![queue, key], |r| r.get(0))?;
    // An older dead job of this key is moot now: the new version redoes its work.
    tx.prepare_cached("DELETE FROM jobs WHERE queue = ?1 AND key = ?2 AND state = 2")?
        .execute(params![queue, key])?;
    // While the key's job runs, its next run waits `rerun_delay` (see QueueOptions).
    let running: bool = tx
        .prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM jobs WHERE queue = ?1 AND key = ?2 AND state = 1)",
        )?
        .query_row(params![queue, key], |r| r.get(0))?;
    let due = if running { now + rerun_delay_ms } else { now };
    // Coalesce into the pending job, keeping its place in line: its due stays, unless it
    // was backing off after a failure (new input ends a back-off).
    let updated: Option<i64> = tx
        .prepare_cached(
            "UPDATE jobs SET version = ?3, payload = ?4,
                             due = CASE WHEN attempts > 0 THEN ?6 ELSE due END,
                             attempts = 0, last_error = NULL, updated = ?5
             WHERE queue = ?1 AND key = ?2 AND state = 0 RETURNING id",
        )?
        .query_row(params![queue, key, version, payload, now, due], |r| {
            r.get(0)
        })
        .optional()?;
    if let Some(id) = updated {
        return Ok(id);
    }
    tx.prepare_cached(
        "INSERT INTO jobs (queue, key, version, payload, state, due, created, updated)
         VALUES (?1, ?2, ?3, ?4, 0, ?6, ?5, ?5)",
    )?
    .execute(params![queue, key, version, payload, now, due])?;
    Ok(tx.last_insert_rowid())
}
