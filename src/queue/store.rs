//! The queue's state changes, each one SQLite transaction: enqueue (with coalescing), claim,
//! renew, complete, fail, release, repair.
//!
//! A job row is `pending` (0), `running` (1) or `dead` (2). One column, `due`, says when a row is
//! next claimable: for a pending row the end of its back-off, for a running row the end of its
//! lease. So a claim is one indexed range scan, and a job whose worker died is picked up by the
//! next claim after its lease ends, by any process, with no recovery pass at start-up.
//!
//! A claim is fenced by `(id, attempts)`: `attempts` grows at every claim and ids are never
//! reused (AUTOINCREMENT), so a worker whose lease was handed on can no longer complete, fail or
//! renew the job it lost.
//!
//! Durability: WAL with `synchronous=NORMAL`. A committed enqueue survives a crash of any process
//! (it is in the WAL); only an OS crash or power loss may drop the last few commits, as WAL mode
//! documents. That trade keeps enqueue at tens of microseconds, cheap enough for the FUSE write path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::schema::{migrate, open_connection};
use super::NewJob;
use super::{JobError, QueueError};

/// `state` of a claimed row (0 is pending, 2 dead; SQL below spells those inline).
const RUNNING: i64 = 1;

/// Connections kept open for reuse per `Queue` (more may be open while busy).
const MAX_IDLE_CONNECTIONS: usize = 8;
/// When a job that waits for something outside it ([`JobError::Wait`]: a full disk) runs
/// again.
const WAIT_RETRY: Duration = Duration::from_secs(10);

/// Retry policy and database settings.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// Claims of one job before a failure makes it dead (a worker dying mid-job counts too).
    pub max_attempts: u32,
    /// Back-off after the first failure; doubles at every further failure.
    pub backoff_base: Duration,
    /// Longest back-off.
    pub backoff_max: Duration,
    /// How long a statement waits for another process's write lock.
    pub busy_timeout: Duration,
    /// A key queued again while its job runs waits this long before its next run: a burst
    /// of changes (`cp -r` of many files into one directory) then re-runs a directory's
    /// summary — which reads every child — once per this period, not after every file.
    pub rerun_delay: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            max_attempts: 5,
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
            busy_timeout: Duration::from_secs(30),
            rerun_delay: Duration::from_secs(1),
        }
    }
}

/// One claimed job, as a handler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: i64,
    pub queue: String,
    /// Coalesce key (e.g. a dirty path); `None` for jobs that are never merged.
    pub key: Option<String>,
    /// The key's version this job was enqueued as (0 without a key).
    pub version: i64,
    pub payload: serde_json::Value,
    /// Claims so far, this one included (1 on the first run).
    pub attempts: u32,
}

/// A handle on the queue database; cheap to clone, shareable between threads.
#[derive(Clone)]
pub struct Queue {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    path: PathBuf,
    opts: QueueOptions,
    idle: Mutex<Vec<Connection>>,
    /// Held around every write transaction of this process. SQLite makes a second writer
    /// wait in its busy handler, which sleeps 1, 2, 5… ms between tries: a FUSE create that
    /// met a worker's commit would stall a millisecond or more. Writers of one process queue
    /// here instead and are woken the moment the previous commit is done; the busy handler
    /// is left to arbitrate between processes.
    writer: Mutex<()>,
    /// One wake-up counter per queue name, bumped at every enqueue from this process to that
    /// queue, so its local dispatcher wakes without polling — and the dispatchers of the
    /// other queues sleep on (a FUSE create must not wake every thread of the pool).
    wakers: Mutex<HashMap<String, Arc<Waker>>>,
    /// This process's spool, once [`Queue::start_spool`] ran (the mount daemon).
    spool: Mutex<Option<Arc<super::spool::Spool>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(s) = self.spool.get_mut().take() {
            s.abandon();
        }
    }
}

#[derive(Default)]
struct Waker {
    count: Mutex<u64>,
    cv: Condvar,
}

impl Waker {
    fn bump(&self) {
        *self.count.lock() += 1;
        self.cv.notify_all();
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// A pooled connection, handed back on drop.
pub(super) struct PooledConn<'a> {
    inner: &'a Inner,
    conn: Option<Connection>,
}

impl std::ops::Deref for PooledConn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for PooledConn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let mut idle = self.inner.idle.lock();
            if idle.len() < MAX_IDLE_CONNECTIONS {
                idle.push(c);
            }
        }
    }
}

pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

pub(super) fn age(now: i64, then: i64) -> Duration {
    Duration::from_millis(now.saturating_sub(then).max(0) as u64)
}

fn check_name(queue: &str) -> Result<(), QueueError> {
    let ok = !queue.is_empty()
        && queue.len() <= 64
        && queue
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(QueueError::BadQueueName(queue.to_string()))
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

impl Queue {
    /// Open (creating when missing) the queue database at `path` with default options.
    pub fn open(path: &Path) -> Result<Queue, QueueError> {
        Queue::open_with(path, QueueOptions::default())
    }

    pub fn open_with(path: &Path, opts: QueueOptions) -> Result<Queue, QueueError> {
        let open_err = |source| QueueError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut conn = open_connection(path, &opts).map_err(open_err)?;
        migrate(&mut conn, path).map_err(|e| match e {
            QueueError::Sql(source) => open_err(source),
            other => other,
        })?;
        let q = Queue {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                opts,
                idle: Mutex::new(vec![conn]),
                writer: Mutex::new(()),
                wakers: Mutex::new(HashMap::new()),
                spool: Mutex::new(None),
            }),
        };
        // Jobs a dead process spooled but never moved into the database. On a full disk
        // they stay spooled (nothing is lost) for the next open: the queue still answers.
        match q.replay_spools() {
            Err(e) if e.is_disk_full() => {
                tracing::warn!(
                    "queue: disk full; spooled jobs of dead processes wait: {}",
                    crate::error::Chain(&e)
                )
            }
            r => drop(r?),
        }
        Ok(q)
    }

    /// Move the jobs of dead processes' spool files into the database; returns how many.
    pub fn replay_spools(&self) -> Result<usize, QueueError> {
        super::spool::replay_orphans(self.path(), |jobs| self.enqueue_many(jobs))
    }

    /// Let [`Queue::submit`] append to a spool file that a flusher thread moves into the
    /// database in batches (see `queue::spool`). For a process that queues jobs from a
    /// latency-sensitive path (the mount daemon); [`Queue::stop_spool`] before it exits.
    pub fn start_spool(&self) -> Result<(), QueueError> {
        let mut s = self.inner.spool.lock();
        if s.is_none() {
            let dir = super::spool::dir_of(&self.inner.path);
            let weak = std::sync::Arc::downgrade(&self.inner);
            let sink: super::spool::Sink = Box::new(move |jobs| {
                let inner = weak.upgrade()?;
                Some(Queue { inner }.enqueue_many(jobs))
            });
            let spool = super::spool::Spool::start(&self.inner.path, sink)
                .map_err(|e| QueueError::Spool(dir, e))?;
            *s = Some(spool);
        }
        Ok(())
    }

    /// Move everything spooled into the database and stop the flusher.
    pub fn stop_spool(&self) {
        let s = self.inner.spool.lock().take();
        if let Some(s) = s {
            s.stop();
        }
    }

    /// Queue `jobs` from a path that must not wait for the database: with a spool running,
    /// one append to it (durable against a crash of this process once this returns; in the
    /// database within milliseconds); without, [`Queue::enqueue_many`].
    pub fn submit(&self, jobs: &[NewJob]) -> Result<(), QueueError> {
        for (q, _, _) in jobs {
            check_name(q)?;
        }
        let s = self.inner.spool.lock().clone();
        match s {
            Some(s) => s
                .append(jobs)
                .map_err(|e| QueueError::Spool(super::spool::dir_of(&self.inner.path), e)),
            None => self.enqueue_many(jobs),
        }
    }

    /// Jobs spooled by any process and not in the database yet.
    pub fn spooled(&self) -> u64 {
        super::spool::pending_lines(&self.inner.path)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    pub(super) fn conn(&self) -> Result<PooledConn<'_>, QueueError> {
        let cached = self.inner.idle.lock().pop();
        let conn = match cached {
            Some(c) => c,
            None => open_connection(&self.inner.path, &self.inner.opts)?,
        };
        Ok(PooledConn {
            inner: &self.inner,
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
        let _writer = self.inner.writer.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx, now_ms())?;
        tx.commit()?;
        Ok(out)
    }

    fn rerun_delay_ms(&self) -> i64 {
        self.inner.opts.rerun_delay.as_millis() as i64
    }

    fn waker(&self, queue: &str) -> Arc<Waker> {
        let mut m = self.inner.wakers.lock();
        if let Some(w) = m.get(queue) {
            return w.clone();
        }
        m.entry(queue.to_string()).or_default().clone()
    }

    /// Wake the local dispatcher of `queue`.
    fn notify(&self, queue: &str) {
        self.waker(queue).bump();
    }

    /// Block until a local enqueue to `queue` happens after `seen` (a value this returned
    /// before) or `timeout` passes; returns the current wake counter. Other processes'
    /// enqueues are only seen by polling, which is what the timeout is for.
    pub(crate) fn wait_for_enqueue(&self, queue: &str, seen: u64, timeout: Duration) -> u64 {
        let w = self.waker(queue);
        let mut g = w.count.lock();
        if *g == seen {
            w.cv.wait_for(&mut g, timeout);
        }
        *g
    }

    pub(crate) fn wake_counter(&self, queue: &str) -> u64 {
        *self.waker(queue).count.lock()
    }

    /// Wake every local waiter (the pool calls this to stop; a retry of dead jobs may touch
    /// any queue).
    pub(crate) fn wake_all(&self) {
        let all: Vec<Arc<Waker>> = self.inner.wakers.lock().values().cloned().collect();
        for w in all {
            w.bump();
        }
    }

    /// Add a job. With a `key`, bump that key's version; if a job for the key is still pending,
    /// it takes the new version and payload in place instead of adding a row. Returns the
    /// job's id.
    pub fn enqueue(
        &self,
        queue: &str,
        key: Option<&str>,
        payload: &serde_json::Value,
    ) -> Result<i64, QueueError> {
        check_name(queue)?;
        let payload = payload.to_string();
        let delay = self.rerun_delay_ms();
        let id = self.write(|tx, now| Ok(enqueue_in(tx, now, delay, queue, key, &payload)?))?;
        self.notify(queue);
        Ok(id)
    }

    /// [`enqueue`](Self::enqueue) several jobs in one transaction (one WAL commit).
    pub fn enqueue_many(&self, jobs: &[NewJob]) -> Result<(), QueueError> {
        for (q, _, _) in jobs {
            check_name(q)?;
        }
        let delay = self.rerun_delay_ms();
        self.write(|tx, now| {
            for (q, key, payload) in jobs {
                enqueue_in(tx, now, delay, q, key.as_deref(), &payload.to_string())?;
            }
            Ok(())
        })?;
        let mut queues: Vec<&str> = jobs.iter().map(|(q, _, _)| q.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        for q in queues {
            self.notify(q);
        }
        Ok(())
    }

    /// Claim the next due job of `queue` for `lease`: a pending job whose back-off is over, or
    /// a claimed one whose lease ran out. Returns `None` when nothing is due.
    pub fn claim(
        &self,
        queue: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<Job>, QueueError> {
        // Idle workers poll: look with a read first, so an empty queue never takes the write
        // lock that enqueuers on the FUSE path need.
        let due: bool = self
            .conn()?
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM jobs WHERE queue = ?1 AND state < 2 AND due <= ?2)",
            )?
            .query_row(params![queue, now_ms()], |r| r.get(0))?;
        if !due {
            return Ok(None);
        }
        let max_attempts = i64::from(self.inner.opts.max_attempts);
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
                    tx.execute("DELETE FROM jobs WHERE id = ?1", [id])?;
                    prune_key(tx, queue, key.as_deref())?;
                    continue;
                }
                if attempts >= max_attempts {
                    let why = format!(
                        "lease expired on attempt {attempts} (worker died or hung){}",
                        last_error.map(|e| format!("; before: {e}")).unwrap_or_default()
                    );
                    tx.execute(
                        "UPDATE jobs SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
                        params![id, why, now],
                    )?;
                    continue;
                }
            }
            tx.prepare_cached(
                "UPDATE jobs SET state = 1, due = ?2, attempts = attempts + 1, worker = ?3, updated = ?4
                 WHERE id = ?1",
            )?
            .execute(params![id, now.saturating_add(ms(lease)), worker, now])?;
            let payload = serde_json::from_str(&payload)
                .map_err(|source| QueueError::Payload { id, source })?;
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

    /// Extend the lease of a job this worker still holds. `false`: the lease ran out and the
    /// job was handed on (or finished elsewhere); the caller must not write anything back.
    pub fn renew(&self, job: &Job, worker: &str, lease: Duration) -> Result<bool, QueueError> {
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

    /// The job is done: remove it.
    pub fn complete(&self, job: &Job) -> Result<(), QueueError> {
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

    /// The job failed. `Retry`: pending again after a back-off, or dead once it used its
    /// attempts. `Permanent`: dead at once. A job whose key was enqueued again meanwhile is
    /// dropped instead: the newer job does its work.
    pub fn fail(&self, job: &Job, err: &JobError) -> Result<(), QueueError> {
        let opts = &self.inner.opts;
        self.write(|tx, now| {
            if !held(tx, job)? {
                return Err(QueueError::NotClaimed { id: job.id });
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                tx.execute("DELETE FROM jobs WHERE id = ?1", [job.id])?;
                prune_key(tx, &job.queue, job.key.as_deref())?;
                return Ok(());
            }
            if let JobError::Wait(m) = err {
                let m = m.to_string();
                // Not the job's fault: the attempt is given back.
                tx.execute(
                    "UPDATE jobs SET state = 0, worker = NULL, last_error = ?2, due = ?3, \
                     attempts = MAX(attempts - 1, 0), updated = ?4 WHERE id = ?1",
                    params![
                        job.id,
                        m,
                        now.saturating_add(ms(WAIT_RETRY.min(opts.backoff_max))),
                        now
                    ],
                )?;
                return Ok(());
            }
            let dead = matches!(err, JobError::Permanent(_)) || job.attempts >= opts.max_attempts;
            if dead {
                tx.execute(
                    "UPDATE jobs SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
                    params![job.id, err.message(), now],
                )?;
            } else {
                let shift = job.attempts.saturating_sub(1).min(30);
                let backoff = opts
                    .backoff_base
                    .saturating_mul(1u32 << shift)
                    .min(opts.backoff_max);
                tx.execute(
                    "UPDATE jobs SET state = 0, worker = NULL, last_error = ?2, due = ?3, updated = ?4 WHERE id = ?1",
                    params![job.id, err.message(), now.saturating_add(ms(backoff)), now],
                )?;
            }
            Ok(())
        })
    }

    /// Hand back a claimed job that was never started (a stopping pool): pending again at
    /// once, the claim not counted as an attempt.
    pub fn release(&self, job: &Job) -> Result<(), QueueError> {
        self.write(|tx, now| {
            if !held(tx, job)? {
                return Ok(());
            }
            if superseded(tx, &job.queue, job.key.as_deref(), job.version)? {
                tx.execute("DELETE FROM jobs WHERE id = ?1", [job.id])?;
                prune_key(tx, &job.queue, job.key.as_deref())?;
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

    /// May this job write its result back? True while this claim still holds the job and no
    /// newer version of its key was enqueued. Check it right before the write-back (under the
    /// source's lock): a stale job's result would overwrite a newer one.
    pub fn is_current(&self, job: &Job) -> Result<bool, QueueError> {
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

    /// [`is_current`](Self::is_current) by key alone, for code that holds a key and version
    /// but not the claim: true when no newer version of `key` was enqueued.
    pub fn is_key_current(&self, queue: &str, key: &str, version: i64) -> Result<bool, QueueError> {
        Ok(match self.key_version(queue, key)? {
            Some(current) => current <= version,
            None => true,
        })
    }

    /// Is a job for `key` waiting or running (not done, not dead)? For readers that must not
    /// show what such a job is about to replace (a summary whose refresh is queued).
    pub fn has_pending(&self, queue: &str, key: &str) -> Result<bool, QueueError> {
        let conn = self.conn()?;
        let pending = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM jobs WHERE queue = ?1 AND key = ?2 AND state < 2)",
            )?
            .query_row(params![queue, key], |r| r.get(0))?;
        Ok(pending)
    }

    /// Current version of a key (None when no job for it exists).
    pub fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT version FROM key_versions WHERE queue = ?1 AND key = ?2",
                params![queue, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Make dead jobs pending again with fresh attempts (`fsck --repair`). Returns how many.
    pub fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError> {
        if let Some(q) = queue {
            check_name(q)?;
        }
        let n = self.write(|tx, now| {
            // A dead job whose key has a live job is superseded by it.
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
        })?;
        self.wake_all();
        Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn open(dir: &tempfile::TempDir) -> Queue {
        Queue::open_with(
            &dir.path().join("q.db"),
            QueueOptions {
                max_attempts: 3,
                backoff_base: Duration::ZERO,
                rerun_delay: Duration::ZERO,
                ..QueueOptions::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn a_key_queued_while_its_job_runs_waits_the_rerun_delay() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open_with(
            &dir.path().join("q.db"),
            QueueOptions {
                rerun_delay: Duration::from_secs(3600),
                ..QueueOptions::default()
            },
        )
        .unwrap();
        let lease = Duration::from_secs(60);
        q.enqueue("semantic", Some("k"), &json!(1)).unwrap();
        q.enqueue("semantic", Some("other"), &json!(1)).unwrap();
        let job = q.claim("semantic", "w", lease).unwrap().unwrap();
        assert_eq!(job.key.as_deref(), Some("k"), "nothing runs: no delay");
        q.enqueue("semantic", Some("k"), &json!(2)).unwrap();
        q.complete(&job).unwrap();
        // Queued again once the job finished: still coalesced into the delayed one.
        q.enqueue("semantic", Some("k"), &json!(3)).unwrap();
        let next = q.claim("semantic", "w", lease).unwrap().unwrap();
        assert_eq!(next.key.as_deref(), Some("other"));
        assert!(
            q.claim("semantic", "w", lease).unwrap().is_none(),
            "k waits for its rerun delay"
        );
        let s = &q.stats().unwrap()[0];
        assert_eq!((s.pending, s.running), (1, 1));
    }

    #[test]
    fn pending_key_is_updated_in_place_and_a_claimed_one_goes_stale() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        let a = q.enqueue("semantic", Some("k"), &json!(1)).unwrap();
        let b = q.enqueue("semantic", Some("k"), &json!(2)).unwrap();
        assert_eq!(a, b);
        let job = q
            .claim("semantic", "w", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!((job.version, job.payload.clone()), (2, json!(2)));
        assert!(q.is_current(&job).unwrap());
        let c = q.enqueue("semantic", Some("k"), &json!(3)).unwrap();
        assert_ne!(c, job.id, "a claimed job is not rewritten under its worker");
        assert!(!q.is_current(&job).unwrap());
        assert!(!q.is_key_current("semantic", "k", 2).unwrap());
        assert!(q.is_key_current("semantic", "k", 3).unwrap());
        q.complete(&job).unwrap();
        let next = q
            .claim("semantic", "w", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!((next.version, next.payload.clone()), (3, json!(3)));
        assert!(q.is_current(&next).unwrap());
    }

    #[test]
    fn a_stale_failure_is_dropped_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        q.enqueue("embedding", Some("k"), &json!(1)).unwrap();
        let job = q
            .claim("embedding", "w", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        q.enqueue("embedding", Some("k"), &json!(2)).unwrap();
        q.fail(&job, &JobError::Retry("x".into())).unwrap();
        let s = &q.stats().unwrap()[0];
        assert_eq!((s.pending, s.running, s.dead), (1, 0, 0));
    }

    #[test]
    fn a_lost_claim_cannot_complete_or_renew() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        q.enqueue("semantic", None, &json!({})).unwrap();
        let first = q.claim("semantic", "a", Duration::ZERO).unwrap().unwrap();
        let second = q
            .claim("semantic", "b", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!(first.id, second.id);
        assert!(!q.renew(&first, "a", Duration::from_secs(60)).unwrap());
        assert!(!q.is_current(&first).unwrap());
        assert!(matches!(
            q.complete(&first),
            Err(QueueError::NotClaimed { .. })
        ));
        q.complete(&second).unwrap();
        assert!(q.is_idle().unwrap());
    }

    #[test]
    fn release_does_not_count_an_attempt_and_retry_dead_revives() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        q.enqueue("semantic", None, &json!(7)).unwrap();
        let job = q
            .claim("semantic", "a", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        q.release(&job).unwrap();
        let job = q
            .claim("semantic", "a", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!(job.attempts, 1);
        q.fail(&job, &JobError::Permanent("bad".into())).unwrap();
        assert!(q
            .claim("semantic", "a", Duration::from_secs(60))
            .unwrap()
            .is_none());
        assert_eq!(q.retry_dead(Some("semantic")).unwrap(), 1);
        assert!(q
            .claim("semantic", "a", Duration::from_secs(60))
            .unwrap()
            .is_some());
    }

    #[test]
    fn bad_queue_name_and_newer_schema_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        assert!(matches!(
            q.enqueue("Bad Name", None, &json!(1)),
            Err(QueueError::BadQueueName(_))
        ));
        q.conn()
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let e = Queue::open(&dir.path().join("q.db")).unwrap_err();
        assert!(
            matches!(e, QueueError::SchemaTooNew { found: 99, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_database_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.db");
        std::fs::write(&p, vec![b'x'; 4096]).unwrap();
        let e = Queue::open(&p).unwrap_err().to_string();
        assert!(e.contains("q.db"), "{e}");
    }
}
