//! The worker pool: per queue, one dispatcher thread claims a job only when one of that queue's
//! worker threads is idle and hands it over a crossbeam channel; a heartbeat thread renews the
//! lease of every job in hand for [`PoolOptions::max_run`] at most (a job stuck in its worker
//! then loses its claim, which `fsck` names). Any vikingfs process may run a pool on the same
//! database.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::{Cause, Job, JobError, JobHandler, Queue, QueueError};

/// How often a worker tries again to record a job's outcome that a full disk refused.
const FULL_DISK_POLL: Duration = Duration::from_millis(200);

/// What a pool runs for one named queue: its handler, on how many threads.
#[derive(Clone)]
pub struct HandlerSpec {
    pub queue: String,
    pub handler: Arc<dyn JobHandler>,
    /// Worker threads (0: none; the queue is not worked here).
    pub threads: usize,
}

impl HandlerSpec {
    pub fn new(queue: &str, handler: Arc<dyn JobHandler>, threads: usize) -> HandlerSpec {
        HandlerSpec {
            queue: queue.to_string(),
            handler,
            threads,
        }
    }
}

/// `(queue, handler, threads)`, the short form tests write.
impl From<(String, Arc<dyn JobHandler>, usize)> for HandlerSpec {
    fn from((queue, handler, threads): (String, Arc<dyn JobHandler>, usize)) -> HandlerSpec {
        HandlerSpec {
            queue,
            handler,
            threads,
        }
    }
}

/// How a pool claims and keeps its jobs.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Lease of a claim; a job whose worker stops renewing is handed on after this.
    pub lease: Duration,
    /// How often held leases are renewed (a third of the lease leaves two misses of slack).
    pub heartbeat: Duration,
    /// How often an idle dispatcher looks for jobs enqueued by other processes (local
    /// enqueues wake it at once).
    pub poll: Duration,
    /// Nice value of the threads that claim and run jobs (not the heartbeat, which keeps
    /// leases alive). Jobs are background work: under load the syscalls a program is
    /// waiting for through the mount go first, and the jobs catch up when it is idle.
    pub nice: i32,
    /// Foreground work this pool gives way to (the mount's requests), if any.
    pub foreground: Option<Arc<Foreground>>,
    /// How long one run of a job may hold its claim: past it the heartbeat stops renewing
    /// the lease (saying so at WARN), so a job stuck in its worker is no longer a live
    /// claim forever: its lease runs out, `fsck` names it (a lease run out under a live
    /// worker), the next claim takes it, and a job that hangs every time dies after the
    /// queue's most attempts. Long beside any job's honest run.
    pub max_run: Duration,
}

/// [`PoolOptions::max_run`] unless set otherwise.
pub const MAX_RUN: Duration = Duration::from_secs(600);

/// Foreground activity a pool gives way to. The mount marks each request it serves; before
/// claiming a job a dispatcher waits until the foreground has been quiet for [`QUIET`], but
/// never more than [`MAX_GIVE_WAY`] per job, so a steady stream of requests slows the jobs
/// down without stopping them. On a small machine a job running beside a burst of creates
/// or renames contends with them for the queue's and the index's write locks; the files a
/// burst touches are also often renamed or removed before their job would have run.
#[derive(Debug)]
pub struct Foreground {
    epoch: Instant,
    /// When the last request was served, in ns since `epoch` (0: never).
    last_ns: AtomicU64,
}

/// How long the foreground must be idle before a job is claimed.
pub const QUIET: Duration = Duration::from_millis(5);
/// The most a dispatcher waits for quiet before claiming one job anyway.
pub const MAX_GIVE_WAY: Duration = Duration::from_millis(100);

impl Default for Foreground {
    fn default() -> Self {
        Foreground {
            epoch: Instant::now(),
            last_ns: AtomicU64::new(0),
        }
    }
}

impl Foreground {
    /// A foreground request is being served now.
    pub fn touch(&self) {
        let ns = self.epoch.elapsed().as_nanos() as u64;
        self.last_ns.store(ns.max(1), Ordering::Relaxed);
    }

    /// How long the foreground has been idle (`None`: never active).
    pub fn idle_for(&self) -> Option<Duration> {
        match self.last_ns.load(Ordering::Relaxed) {
            0 => None,
            last => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(last)),
            ),
        }
    }

    /// Wait for a quiet moment, at most [`MAX_GIVE_WAY`] (or until `stopping`).
    fn give_way(&self, stopping: &AtomicBool) {
        let start = Instant::now();
        while let Some(idle) = self.idle_for() {
            let waited = start.elapsed();
            if idle >= QUIET || waited >= MAX_GIVE_WAY || stopping.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep((QUIET - idle).min(MAX_GIVE_WAY - waited));
        }
    }
}

/// Like a background indexer: a tenth of a foreground thread's CPU share under contention,
/// all of the CPU when nothing else runs.
pub const BACKGROUND_NICE: i32 = 10;

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions::with_lease(Duration::from_secs(30))
    }
}

impl PoolOptions {
    pub fn with_lease(lease: Duration) -> PoolOptions {
        PoolOptions {
            lease,
            heartbeat: lease / 3,
            poll: Duration::from_millis(200),
            nice: BACKGROUND_NICE,
            foreground: None,
            max_run: MAX_RUN,
        }
    }
}

/// What a drain reports while it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Jobs of the drained queues not finished yet (pending or claimed, by anyone).
    pub outstanding: u64,
    /// Jobs this pool completed.
    pub completed: u64,
    /// Failures this pool reported (each retried or made dead).
    pub failed: u64,
    pub elapsed: Duration,
}

/// State shared by the pool's threads.
struct Shared {
    queue: Queue,
    opts: PoolOptions,
    stopping: AtomicBool,
    /// Jobs claimed and not yet finished, keyed by id, with the worker name that claimed them
    /// and when.
    in_hand: Mutex<HashMap<i64, (Job, String, Instant)>>,
    completed: AtomicU64,
    failed: AtomicU64,
    /// Bumped after every finished job, so a drain waits on it instead of sleeping.
    finished: Mutex<u64>,
    finished_cv: Condvar,
}

/// Running worker threads; [`stop`](WorkerPool::stop) (or drop) finishes the jobs in flight
/// and hands back any claimed but unstarted job.
pub struct WorkerPool {
    shared: Arc<Shared>,
    /// Dropped to stop: wakes the dispatchers and the heartbeat at once.
    stop_tx: Mutex<Option<Sender<()>>>,
    dispatchers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    heartbeat: Option<JoinHandle<()>>,
}

impl WorkerPool {
    /// Start the workers of each [`HandlerSpec`] (0 threads: none).
    pub fn start(
        queue: Queue,
        handlers: impl IntoIterator<Item = impl Into<HandlerSpec>>,
        opts: PoolOptions,
    ) -> WorkerPool {
        // What a process of this host that has exited still holds is this pool's to run now.
        match queue.end_leases_of_exited() {
            Ok(0) => {}
            Ok(n) => tracing::info!("{n} jobs claimed by an exited process run again now"),
            Err(e) => tracing::debug!("claims of exited processes not ended: {e}"),
        }
        let shared = Arc::new(Shared {
            queue,
            opts,
            stopping: AtomicBool::new(false),
            in_hand: Mutex::new(HashMap::new()),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            finished: Mutex::new(0),
            finished_cv: Condvar::new(),
        });
        let (stop_tx, stop_rx) = unbounded::<()>();
        let mut pool = WorkerPool {
            shared: shared.clone(),
            stop_tx: Mutex::new(Some(stop_tx)),
            dispatchers: Vec::new(),
            workers: Vec::new(),
            heartbeat: None,
        };
        let specs = handlers.into_iter().map(Into::into);
        for HandlerSpec {
            queue: name,
            handler,
            threads,
        } in specs.filter(|h: &HandlerSpec| h.threads > 0)
        {
            let worker_name = super::store::worker_name(&name);
            let (job_tx, job_rx) = unbounded::<Job>();
            let (ready_tx, ready_rx) = unbounded::<()>();
            for i in 0..threads {
                let (s, h, jr, rt) = (
                    shared.clone(),
                    handler.clone(),
                    job_rx.clone(),
                    ready_tx.clone(),
                );
                let nice = shared.opts.nice;
                pool.workers.push(spawn(format!("vq-{name}-{i}"), move || {
                    set_nice(nice);
                    work(&s, &*h, &jr, &rt)
                }));
            }
            let (s, sr, nice) = (shared.clone(), stop_rx.clone(), shared.opts.nice);
            pool.dispatchers.push(spawn(format!("vq-{name}"), move || {
                set_nice(nice);
                dispatch(&s, &name, &worker_name, &ready_rx, &job_tx, &sr)
            }));
        }
        let s = shared.clone();
        pool.heartbeat = Some(spawn("vq-heartbeat".into(), move || {
            heartbeat(&s, &stop_rx)
        }));
        pool
    }

    /// Jobs completed and failures reported by this pool so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.completed.load(Ordering::Relaxed),
            self.shared.failed.load(Ordering::Relaxed),
        )
    }

    /// Wait until a job finishes here or `timeout` passes.
    fn wait_finished(&self, seen: u64, timeout: Duration) -> u64 {
        let mut g = self.shared.finished.lock();
        if *g == seen {
            self.shared.finished_cv.wait_for(&mut g, timeout);
        }
        *g
    }

    /// Stop claiming, let running jobs finish, hand back claimed unstarted ones, join threads.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Stop claiming new jobs, without waiting (e.g. from a signal handler's thread); the
    /// jobs in flight go on until [`stop`](Self::stop) or drop joins them.
    pub fn begin_stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.stop_tx.lock().take();
        self.shared.queue.wake_all();
    }

    /// Stop, waiting at most `grace` for the jobs in flight: a job stuck on a remote that
    /// never answers must not hold a one-shot command past its `--timeout`. Workers still busy
    /// then are left to finish (or to die with the process: a job cut off is claimed again
    /// once its lease expires, as after a crash).
    pub fn stop_within(mut self, grace: Duration) {
        self.begin_stop();
        let until = Instant::now() + grace;
        let threads = || self.dispatchers.iter().chain(self.workers.iter());
        // A thread's exit has no timed join: look every 20 ms, for `grace` at most.
        while Instant::now() < until && !threads().all(|t| t.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if threads().all(|t| t.is_finished()) {
            return self.shutdown();
        }
        tracing::debug!("leaving jobs in flight to finish on their own");
        self.dispatchers.clear();
        self.workers.clear();
        self.heartbeat.take();
    }

    fn shutdown(&mut self) {
        self.begin_stop();
        for t in self.dispatchers.drain(..).chain(self.workers.drain(..)) {
            let _ = t.join();
        }
        if let Some(t) = self.heartbeat.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .expect("spawning a worker thread")
}

/// Set the calling thread's nice value (Linux: per thread). Best effort: a pool that cannot
/// lower its priority still runs its jobs.
fn set_nice(nice: i32) {
    if nice == 0 {
        return;
    }
    if let Err(e) = crate::sys::set_thread_nice(nice) {
        tracing::debug!("setpriority({nice}): {e}");
    }
}

/// Claim a job each time a worker says it is idle, and pass it on.
fn dispatch(
    s: &Shared,
    queue: &str,
    worker: &str,
    ready: &Receiver<()>,
    jobs: &Sender<Job>,
    stop: &Receiver<()>,
) {
    loop {
        select! {
            recv(ready) -> r => if r.is_err() { return },
            recv(stop) -> _ => return,
        }
        let job = loop {
            if s.stopping.load(Ordering::SeqCst) {
                return;
            }
            let seen = s.queue.wake_counter(queue);
            if let Some(f) = &s.opts.foreground {
                f.give_way(&s.stopping);
            }
            match s.queue.claim(queue, worker, s.opts.lease) {
                Ok(Some(job)) => break job,
                Ok(None) => {}
                Err(e) => tracing::warn!(queue, "claiming a job: {}", crate::error::Chain(&e)),
            }
            s.queue.wait_for_enqueue(queue, seen, s.opts.poll);
        };
        s.in_hand
            .lock()
            .insert(job.id, (job.clone(), worker.to_string(), Instant::now()));
        if s.stopping.load(Ordering::SeqCst) {
            hand_back(s, &job);
            return;
        }
        if let Err(e) = jobs.send(job) {
            hand_back(s, &e.0);
            return;
        }
    }
}

fn hand_back(s: &Shared, job: &Job) {
    s.in_hand.lock().remove(&job.id);
    if let Err(e) = s.queue.release(job) {
        tracing::warn!(
            job = job.id,
            "handing back a claimed job: {}",
            crate::error::Chain(&e)
        );
    }
}

/// Announce idleness, run what comes, until the dispatcher goes away.
fn work(s: &Shared, handler: &dyn JobHandler, jobs: &Receiver<Job>, ready: &Sender<()>) {
    while ready.send(()).is_ok() {
        let Ok(job) = jobs.recv() else { return };
        // One span per job: every line its handler logs names it. At warn, the default
        // filter's level, so that even then a handler's warnings say which job they are of
        // (a debug span, like a FUSE request's, would be filtered out with its fields).
        let _span = tracing::warn_span!(
            "job",
            queue = %job.queue,
            id = job.id,
            key = job.key.as_deref(),
            attempt = job.attempts
        )
        .entered();
        let began = std::time::Instant::now();
        let verdict = catch_unwind(AssertUnwindSafe(|| handler.handle(&job))).unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            // A bug: as loud as it gets.
            Err(JobError::Retry(Cause::message(
                format!("handler panicked: {what}"),
                tracing::Level::ERROR,
            )))
        });
        s.in_hand.lock().remove(&job.id);
        let m = crate::metrics::get();
        m.job_seconds
            .with_label_values(&[&job.queue])
            .observe(began.elapsed().as_secs_f64());
        // A job that waits for something normal (a file still open for writing, a busy lock:
        // its error is quiet) is deferred, not failed: operators alert on failures.
        let how = match &verdict {
            Ok(()) => "done",
            Err(JobError::Permanent(_)) => "failed",
            Err(e) if e.level() >= tracing::Level::INFO => "deferred",
            Err(_) => "failed",
        };
        m.jobs.with_label_values(&[&job.queue, how]).inc();
        if let Err(e) = &verdict {
            // As loud as the error says: a busy lock is retried quietly, a damaged index is
            // an error.
            crate::error::log_at!(e.level(), "job failed: {e}");
        }
        let record = || match &verdict {
            Ok(()) => s.queue.complete(&job),
            Err(e) => s.queue.fail(&job, e),
        };
        let mut outcome = record();
        // A full disk refuses the outcome's write too. Try again while the lease lasts rather
        // than leave the job looking claimed until it runs out: space freed meanwhile (the
        // user's rm) lets the outcome through at once, and the claim's fence makes a write
        // after a hand-on harmless (NotClaimed).
        let until = Instant::now() + s.opts.lease;
        while matches!(&outcome, Err(e) if e.is_disk_full())
            && !s.stopping.load(Ordering::Relaxed)
            && Instant::now() < until
        {
            std::thread::sleep(FULL_DISK_POLL);
            outcome = record();
        }
        match outcome {
            Ok(()) if verdict.is_ok() => s.completed.fetch_add(1, Ordering::Relaxed),
            Ok(()) => s.failed.fetch_add(1, Ordering::Relaxed),
            Err(QueueError::NotClaimed { .. }) => {
                tracing::warn!("job finished after its lease was handed on");
                0
            }
            Err(e) => {
                tracing::error!("recording a job's outcome: {}", crate::error::Chain(&e));
                0
            }
        };
        *s.finished.lock() += 1;
        s.finished_cv.notify_all();
    }
}

/// Renew every held lease each `heartbeat` until the pool stops; once a lease (as for a dead
/// worker's claims), take in the spools of dead processes (see `queue::spool`). Opening the
/// queue replays them too, but a daemon opens it once: the spool of another host's daemon
/// that died would wait, its jobs not run, for the next command that opens the queue.
fn heartbeat(s: &Shared, stop: &Receiver<()>) {
    let mut replayed = std::time::Instant::now();
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
        stop.recv_timeout(s.opts.heartbeat)
    {
        if replayed.elapsed() >= s.opts.lease {
            replayed = std::time::Instant::now();
            match s.queue.replay_spools() {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "took in the spooled jobs of a dead process"),
                Err(e) => tracing::warn!(
                    "taking in a dead process's spool: {}",
                    crate::error::Chain(&e)
                ),
            }
        }
        let held: Vec<_> = s.in_hand.lock().values().cloned().collect();
        for (job, worker, since) in held {
            let ran = since.elapsed();
            if ran > s.opts.max_run {
                // Said once: the heartbeat after the one whose renewal would have reached
                // past max_run.
                if ran <= s.opts.max_run + s.opts.heartbeat {
                    tracing::warn!(
                        job = job.id,
                        queue = %job.queue,
                        key = job.key.as_deref(),
                        "job running for {}s, past its {}s: its lease is left to run out \
                         (the next claim takes it)",
                        ran.as_secs(),
                        s.opts.max_run.as_secs()
                    );
                }
                continue;
            }
            match s.queue.renew(&job, &worker, s.opts.lease) {
                Ok(true) => {}
                // Finished between the snapshot and the renewal, or really lost.
                Ok(false) if !s.in_hand.lock().contains_key(&job.id) => {}
                Ok(false) => tracing::warn!(job = job.id, "lease lost; the job was handed on"),
                Err(e) => {
                    tracing::warn!(
                        job = job.id,
                        "renewing a lease: {}",
                        crate::error::Chain(&e)
                    )
                }
            }
        }
    }
}

/// Run `handlers` in this process until their queues have no pending or claimed job, or
/// `timeout` passes (`Ok(false)`). For `--wait` commands when no daemon works the queue.
pub fn drain(
    queue: &Queue,
    handlers: impl IntoIterator<Item = impl Into<HandlerSpec>>,
    timeout: Duration,
    progress: impl FnMut(&Progress),
) -> Result<bool, QueueError> {
    drain_with(queue, handlers, PoolOptions::default(), timeout, progress)
}

/// [`drain`] with explicit pool options.
pub fn drain_with(
    queue: &Queue,
    handlers: impl IntoIterator<Item = impl Into<HandlerSpec>>,
    opts: PoolOptions,
    timeout: Duration,
    mut progress: impl FnMut(&Progress),
) -> Result<bool, QueueError> {
    let handlers: Vec<HandlerSpec> = handlers.into_iter().map(Into::into).collect();
    let names: Vec<String> = handlers.iter().map(|h| h.queue.clone()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let start = Instant::now();
    let pool = WorkerPool::start(queue.clone(), handlers, opts);
    loop {
        let seen = *pool.shared.finished.lock();
        let outstanding = queue.outstanding(Some(&names))?;
        let (completed, failed) = pool.counts();
        let elapsed = start.elapsed();
        progress(&Progress {
            outstanding,
            completed,
            failed,
            elapsed,
        });
        if outstanding == 0 {
            pool.stop();
            return Ok(true);
        }
        if elapsed >= timeout {
            pool.stop_within(Duration::from_secs(2));
            return Ok(false);
        }
        // Jobs finished by other processes are only seen by polling.
        pool.wait_finished(seen, (timeout - elapsed).min(Duration::from_millis(200)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn give_way_waits_for_quiet_but_not_forever() {
        let f = Arc::new(Foreground::default());
        let stop = AtomicBool::new(false);
        // Never active: no wait at all.
        assert_eq!(f.idle_for(), None);
        f.give_way(&stop);
        // One request just now: returns once the foreground has been quiet for QUIET.
        f.touch();
        f.give_way(&stop);
        assert!(f.idle_for().unwrap() >= QUIET);
        // A steady stream of requests: returns anyway, after at most MAX_GIVE_WAY (plus
        // scheduling slack on a loaded machine), with the stream still going.
        let (busy, quit) = (f.clone(), Arc::new(AtomicBool::new(false)));
        let q = quit.clone();
        let toucher = std::thread::spawn(move || {
            while !q.load(Ordering::Relaxed) {
                busy.touch();
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        while f.idle_for().unwrap() > QUIET / 2 {
            std::thread::yield_now();
        }
        let start = Instant::now();
        f.give_way(&stop);
        let waited = start.elapsed();
        quit.store(true, Ordering::Relaxed);
        toucher.join().unwrap();
        assert!(waited < MAX_GIVE_WAY * 50, "gave way for {waited:?}");
    }
}
