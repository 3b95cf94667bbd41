//! The queue's front: every process's handle on the job queue, whatever database keeps it.
//!
//! It owns the rules no engine may differ on: queue names, what a failure means (back-off
//! doubling up to a cap, dead after `max_attempts`, a wait that gives its attempt back), the
//! wake-ups of local dispatchers, and the spool. Each state change is one transaction of the
//! [`Engine`] underneath (SQLite by default; see [`super::engine`] for what an engine keeps).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::engine::{Engine, Failure};
use super::sqlite::SqliteEngine;
use super::NewJob;
use super::{JobError, QueueError};

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
    /// summary — which reads every child — once per this period, not after every file; and
    /// while the key keeps coming, half this period after the last time, up to ten periods.
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

/// A handle on the queue; cheap to clone, shareable between threads.
#[derive(Clone)]
pub struct Queue {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    engine: Box<dyn Engine>,
    /// Where this process's spool file and every process's spool directory live (next to
    /// the workspace's databases).
    spool_at: PathBuf,
    opts: QueueOptions,
    /// One wake-up counter per queue name, bumped at every enqueue from this process to that
    /// queue, so its local dispatcher wakes without polling — and the dispatchers of the
    /// other queues sleep on (a FUSE create must not wake every thread of the pool).
    wakers: Mutex<HashMap<String, Arc<Waker>>>,
    /// This process's spool, once [`Queue::start_spool`] ran (the mount daemon).
    spool: Mutex<Option<Arc<super::spool::Spool>>>,
}

impl Drop for Shared {
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
            .field("at", &self.shared.engine.location())
            .finish()
    }
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

impl Queue {
    /// Open (creating when missing) the SQLite queue database at `path` with default options.
    pub fn open(path: &Path) -> Result<Queue, QueueError> {
        Queue::open_with(path, QueueOptions::default())
    }

    /// [`Queue::open`] with `opts`; the spool directory is beside the database.
    pub fn open_with(path: &Path, opts: QueueOptions) -> Result<Queue, QueueError> {
        let engine = SqliteEngine::open(path, opts.busy_timeout)?;
        Queue::with_engine(Box::new(engine), path, opts)
    }

    /// A queue over `engine`, with spool files kept beside `spool_at` (a path whose parent
    /// directory holds the `spool/` directory). Replays the spools of dead processes.
    pub fn with_engine(
        engine: Box<dyn Engine>,
        spool_at: &Path,
        opts: QueueOptions,
    ) -> Result<Queue, QueueError> {
        let q = Queue {
            shared: Arc::new(Shared {
                engine,
                spool_at: spool_at.to_path_buf(),
                opts,
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

    /// Where the queue's rows live, for messages.
    pub fn location(&self) -> String {
        self.shared.engine.location()
    }

    /// Heal damage met while open in place, then call `healed` (the caller derives the lost
    /// jobs again): see [`Engine::heal_in_place`].
    pub fn heal_in_place(&self, healed: impl Fn() + Send + Sync + 'static) {
        self.shared.engine.heal_in_place(Box::new(healed))
    }

    /// The last in-place heal of this process, if any.
    pub fn last_heal(&self) -> Option<super::engine::Heal> {
        self.shared.engine.last_heal()
    }

    /// The engine underneath (tests and benchmarks reach the database through it).
    pub fn engine(&self) -> &dyn Engine {
        &*self.shared.engine
    }

    /// Move the jobs of dead processes' spool files into the database; returns how many.
    pub fn replay_spools(&self) -> Result<usize, QueueError> {
        super::spool::replay_orphans(&self.shared.spool_at, |jobs| self.enqueue_many(jobs))
    }

    /// Let [`Queue::submit`] append to a spool file that a flusher thread moves into the
    /// database in batches (see `queue::spool`). For a process that queues jobs from a
    /// latency-sensitive path (the mount daemon); [`Queue::stop_spool`] before it exits.
    pub fn start_spool(&self) -> Result<(), QueueError> {
        let mut s = self.shared.spool.lock();
        if s.is_none() {
            let dir = super::spool::dir_of(&self.shared.spool_at);
            let weak = std::sync::Arc::downgrade(&self.shared);
            let sink: super::spool::Sink = Box::new(move |jobs| {
                let shared = weak.upgrade()?;
                Some(Queue { shared }.enqueue_many(jobs))
            });
            let spool = super::spool::Spool::start(&self.shared.spool_at, sink)
                .map_err(|e| QueueError::Spool(dir, e))?;
            *s = Some(spool);
        }
        Ok(())
    }

    /// Move everything spooled into the database and stop the flusher.
    pub fn stop_spool(&self) {
        let s = self.shared.spool.lock().take();
        if let Some(s) = s {
            s.stop();
        }
    }

    /// Queue `jobs` from a path that must not wait for the database: with a spool running,
    /// one append to it (durable against a crash of this process once this returns; in the
    /// database within milliseconds); without, [`Queue::enqueue_many`].
    pub fn submit(&self, jobs: &[NewJob]) -> Result<(), QueueError> {
        for j in jobs {
            check_name(&j.queue)?;
        }
        let s = self.shared.spool.lock().clone();
        match s {
            Some(s) => s
                .append(jobs)
                .map_err(|e| QueueError::Spool(super::spool::dir_of(&self.shared.spool_at), e)),
            None => self.enqueue_many(jobs),
        }
    }

    /// Jobs spooled by any process and not in the database yet.
    pub fn spooled(&self) -> u64 {
        super::spool::pending_lines(&self.shared.spool_at)
    }

    /// Is a job of `queue` and `key` spooled by a live process, not in the database yet?
    pub fn spooled_has(&self, queue: &str, key: &str) -> bool {
        super::spool::has_key(&self.shared.spool_at, queue, key)
    }

    pub fn options(&self) -> &QueueOptions {
        &self.shared.opts
    }

    fn waker(&self, queue: &str) -> Arc<Waker> {
        let mut m = self.shared.wakers.lock();
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
        let all: Vec<Arc<Waker>> = self.shared.wakers.lock().values().cloned().collect();
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
        let job = NewJob::new(queue, key.map(str::to_string), payload.clone());
        check_name(queue)?;
        let ids = self
            .shared
            .engine
            .enqueue(std::slice::from_ref(&job), self.shared.opts.rerun_delay)?;
        self.notify(queue);
        Ok(ids[0])
    }

    /// [`enqueue`](Self::enqueue) several jobs in one transaction (one WAL commit).
    pub fn enqueue_many(&self, jobs: &[NewJob]) -> Result<(), QueueError> {
        for j in jobs {
            check_name(&j.queue)?;
        }
        self.shared
            .engine
            .enqueue(jobs, self.shared.opts.rerun_delay)?;
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
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
        if !self.shared.engine.any_due(queue)? {
            return Ok(None);
        }
        self.shared
            .engine
            .claim(queue, worker, lease, self.shared.opts.max_attempts)
    }

    /// Extend the lease of a job this worker still holds. `false`: the lease ran out and the
    /// job was handed on (or finished elsewhere); the caller must not write anything back.
    pub fn renew(&self, job: &Job, worker: &str, lease: Duration) -> Result<bool, QueueError> {
        self.shared.engine.renew(job, worker, lease)
    }

    /// The job is done: remove it.
    pub fn complete(&self, job: &Job) -> Result<(), QueueError> {
        self.shared.engine.complete(job)
    }

    /// The job failed. `Retry`: pending again after a back-off, or dead once it used its
    /// attempts. `Permanent`: dead at once. `Wait`: pending again later, the attempt given
    /// back. A job whose key was enqueued again meanwhile is dropped instead: the newer job
    /// does its work.
    pub fn fail(&self, job: &Job, err: &JobError) -> Result<(), QueueError> {
        let opts = &self.shared.opts;
        let message = &err.message();
        let failure = match err {
            JobError::Wait(_) => Failure::Wait {
                message,
                after: WAIT_RETRY.min(opts.backoff_max),
            },
            JobError::Permanent(_) => Failure::Dead { message },
            JobError::Retry(_) if job.attempts >= opts.max_attempts => Failure::Dead { message },
            JobError::Retry(_) => {
                let shift = job.attempts.saturating_sub(1).min(30);
                Failure::Retry {
                    message,
                    after: opts
                        .backoff_base
                        .saturating_mul(1u32 << shift)
                        .min(opts.backoff_max),
                }
            }
        };
        self.shared.engine.fail(job, failure)
    }

    /// Hand back a claimed job that was never started (a stopping pool): pending again at
    /// once, the claim not counted as an attempt.
    pub fn release(&self, job: &Job) -> Result<(), QueueError> {
        self.shared.engine.release(job)
    }

    /// May this job write its result back? True while this claim still holds the job and no
    /// newer version of its key was enqueued. Check it right before the write-back (under the
    /// source's lock): a stale job's result would overwrite a newer one.
    pub fn is_current(&self, job: &Job) -> Result<bool, QueueError> {
        self.shared.engine.is_current(job)
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
        self.shared.engine.has_pending(queue, key)
    }

    /// Current version of a key (None when no job for it exists).
    pub fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError> {
        self.shared.engine.key_version(queue, key)
    }

    /// Jobs claimed by a process of this host that has exited (a daemon stopped on a full
    /// disk could not hand its claims back; one killed never did) are claimable at once,
    /// rather than after their lease. A pid in use again keeps its lease: it ends as leases do.
    pub fn end_leases_of_exited(&self) -> Result<usize, QueueError> {
        let gone = |worker: &str| {
            claimant_pid(worker).is_some_and(|pid| {
                pid != std::process::id() && crate::process::running_process_start(pid).is_none()
            })
        };
        let n = self.shared.engine.end_leases_of(&gone)?;
        if n > 0 {
            self.wake_all();
        }
        Ok(n)
    }

    /// The pid of `worker` (a claimant's name) when it is a live process of this host; `None`
    /// when it exited or runs on another host (nothing here can tell).
    pub fn live_claimant(worker: &str) -> Option<u32> {
        claimant_pid(worker).filter(|&pid| crate::process::running_process_start(pid).is_some())
    }

    /// Make dead jobs pending again with fresh attempts (`fsck --repair`). Returns how many.
    pub fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError> {
        if let Some(q) = queue {
            check_name(q)?;
        }
        let n = self.shared.engine.retry_dead(queue)?;
        self.wake_all();
        Ok(n)
    }
}

/// What a claim's `worker` column says for this process's pool of `queue`: which host (a pid
/// alone is ambiguous among the hosts sharing one queue), which process, which queue.
pub(crate) fn worker_name(queue: &str) -> String {
    format!(
        "{}-pid{}/{queue}",
        crate::process::host_id(),
        std::process::id()
    )
}

/// The pid in a [`worker_name`] of this host; `None` for another host's.
fn claimant_pid(worker: &str) -> Option<u32> {
    let rest = worker
        .strip_prefix(crate::process::host_id())?
        .strip_prefix("-pid")?;
    rest.split('/').next()?.parse().ok()
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
    fn the_claims_of_an_exited_process_end_at_once_and_a_live_ones_keep_their_lease() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(&dir);
        let hour = Duration::from_secs(3600);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let host = crate::process::host_id();
        q.enqueue("semantic", Some("a"), &json!(1)).unwrap();
        q.enqueue("semantic", Some("b"), &json!(1)).unwrap();
        q.enqueue("semantic", Some("c"), &json!(1)).unwrap();
        let gone = format!("{host}-pid{dead}/semantic");
        let alive = worker_name("semantic");
        let elsewhere = format!("another-host-pid{dead}/semantic");
        for w in [&gone, &alive, &elsewhere] {
            assert!(q.claim("semantic", w, hour).unwrap().is_some());
        }
        assert!(q.claim("semantic", "w", hour).unwrap().is_none());
        assert_eq!(q.end_leases_of_exited().unwrap(), 1);
        let again = q.claim("semantic", "w", hour).unwrap().unwrap();
        assert_eq!(again.key.as_deref(), Some("a"), "the exited process's job");
        assert_eq!(again.attempts, 2, "its claim counts as an attempt");
        assert!(q.claim("semantic", "w", hour).unwrap().is_none());
        assert_eq!(q.end_leases_of_exited().unwrap(), 0);
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
    fn a_rerun_is_held_back_while_its_key_keeps_coming_up_to_ten_delays() {
        let dir = tempfile::tempdir().unwrap();
        let delay = Duration::from_secs(1);
        let q = Queue::open_with(
            &dir.path().join("q.db"),
            QueueOptions {
                rerun_delay: delay,
                ..QueueOptions::default()
            },
        )
        .unwrap();
        let lease = Duration::from_secs(60);
        q.enqueue("semantic", Some("k"), &json!(0)).unwrap();
        let first = q.claim("semantic", "w", lease).unwrap().unwrap();
        // `rm -rf` of a big directory: its key comes again every few milliseconds.
        let start = std::time::Instant::now();
        let claimed = loop {
            q.enqueue("semantic", Some("k"), &json!(1)).unwrap();
            if q.claim("semantic", "w", lease).unwrap().is_some() {
                break start.elapsed();
            }
            assert!(start.elapsed() < delay * 14, "the re-run never came");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            claimed >= delay * 5,
            "held back while the key kept coming, not run after one delay: {claimed:?}"
        );
        q.complete(&first).unwrap();
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
        rusqlite::Connection::open(dir.path().join("q.db"))
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
