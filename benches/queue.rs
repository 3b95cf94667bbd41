//! Queue throughput: enqueue + claim + complete of N jobs (default 10,000; `VQ_BENCH_JOBS`),
//! side by side with a naive baseline SQLite queue (rollback journal, `synchronous=FULL`, one
//! transaction per operation) in the same run, on the same disk. Prints jobs/s and ratios.
//!
//! Run: `cargo bench --bench queue` (set `VQ_BENCH_DIR` to put the databases on another disk;
//! default: a temporary directory under `target/`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::json;
use vikingfs::queue::{Job, JobError, JobHandler, NewJob, PoolOptions, Queue};

const BATCH: usize = 100;

fn payload(i: usize) -> serde_json::Value {
    json!({ "uri": format!("viking://resources/docs/file-{i:05}.md"), "op": "embed" })
}

struct Figures {
    name: String,
    jobs: usize,
    enqueue: Duration,
    work: Duration,
}

impl Figures {
    fn rate(n: usize, d: Duration) -> f64 {
        n as f64 / d.as_secs_f64()
    }
    fn total_rate(&self) -> f64 {
        Figures::rate(self.jobs, self.enqueue + self.work)
    }
    fn print(&self, baseline: Option<&Figures>) {
        let ratio = baseline
            .map(|b| format!("{:>7.1}x", self.total_rate() / b.total_rate()))
            .unwrap_or_else(|| "       -".into());
        println!(
            "{:<52} {:>7} {:>12.0} {:>10.1} {:>12.0} {:>12.0} {ratio}",
            self.name,
            self.jobs,
            Figures::rate(self.jobs, self.enqueue),
            self.enqueue.as_secs_f64() * 1e6 / self.jobs as f64,
            Figures::rate(self.jobs, self.work),
            self.total_rate(),
        );
    }
}

fn claim_complete_all(q: &Queue, n: usize) -> Duration {
    let t = Instant::now();
    let mut done = 0;
    while let Some(job) = q
        .claim("embedding", "bench", Duration::from_secs(60))
        .unwrap()
    {
        q.complete(&job).unwrap();
        done += 1;
    }
    assert_eq!(done, n, "every enqueued job claimed once");
    t.elapsed()
}

fn vikingfs_single(dir: &std::path::Path, n: usize) -> Figures {
    let q = Queue::open(&dir.join("single.db")).unwrap();
    let t = Instant::now();
    for i in 0..n {
        q.enqueue("embedding", None, &payload(i)).unwrap();
    }
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: "vikingfs enqueue (1 txn/job) + claim/complete".into(),
        jobs: n,
        enqueue,
        work,
    }
}

/// Like FUSE threads: `threads` threads enqueue one job per transaction at once.
fn vikingfs_threads(dir: &std::path::Path, n: usize, threads: usize) -> Figures {
    let q = Queue::open(&dir.join(format!("threads{threads}.db"))).unwrap();
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            let q = q.clone();
            s.spawn(move || {
                for i in (k..n).step_by(threads) {
                    q.enqueue("embedding", None, &payload(i)).unwrap();
                }
            });
        }
    });
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: format!("vikingfs enqueue from {threads} threads + claim/complete"),
        jobs: n,
        enqueue,
        work,
    }
}

fn vikingfs_keyed(dir: &std::path::Path, n: usize) -> Figures {
    let q = Queue::open(&dir.join("keyed.db")).unwrap();
    let t = Instant::now();
    for i in 0..n {
        let key = format!("viking://resources/docs/file-{i:05}.md");
        q.enqueue("embedding", Some(&key), &payload(i)).unwrap();
    }
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: "vikingfs keyed enqueue (1 txn/job) + claim/compl.".into(),
        jobs: n,
        enqueue,
        work,
    }
}

fn vikingfs_batched(dir: &std::path::Path, n: usize) -> Figures {
    let q = Queue::open(&dir.join("batched.db")).unwrap();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("embedding", None, payload(i)))
        .collect();
    let t = Instant::now();
    for chunk in jobs.chunks(BATCH) {
        q.enqueue_many(chunk).unwrap();
    }
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: format!("vikingfs enqueue_many ({BATCH}/txn) + claim/complete"),
        jobs: n,
        enqueue,
        work,
    }
}

/// Drain through the real pool (`drain_with` runs a `WorkerPool`), no-op handler.
fn vikingfs_pool(dir: &std::path::Path, n: usize, threads: usize) -> Figures {
    let q = Queue::open(&dir.join(format!("pool{threads}.db"))).unwrap();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("embedding", None, payload(i)))
        .collect();
    let t = Instant::now();
    for chunk in jobs.chunks(BATCH) {
        q.enqueue_many(chunk).unwrap();
    }
    let enqueue = t.elapsed();
    let noop = |_: &Job| -> Result<(), JobError> { Ok(()) };
    let t = Instant::now();
    let drained = vikingfs::queue::drain_with(
        &q,
        vec![(
            "embedding".into(),
            Arc::new(noop) as Arc<dyn JobHandler>,
            threads,
        )],
        PoolOptions::default(),
        Duration::from_secs(3600),
        |_| {},
    )
    .unwrap();
    assert!(drained);
    let work = t.elapsed();
    Figures {
        name: format!("vikingfs enqueue_many + WorkerPool {threads} thr drain"),
        jobs: n,
        enqueue,
        work,
    }
}

/// The naive queue: what a first SQLite queue looks like (rollback journal, FULL sync, one
/// transaction per operation, no prepared-statement cache beyond rusqlite's default).
fn naive(dir: &std::path::Path, n: usize) -> Figures {
    let mut c = Connection::open(dir.join("naive.db")).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;
         CREATE TABLE jobs (id INTEGER PRIMARY KEY, queue TEXT, payload TEXT, state INTEGER, worker TEXT);
         CREATE INDEX jobs_q ON jobs(queue, state, id);",
    )
    .unwrap();
    let t = Instant::now();
    for i in 0..n {
        c.execute(
            "INSERT INTO jobs (queue, payload, state) VALUES ('embedding', ?1, 0)",
            [payload(i).to_string()],
        )
        .unwrap();
    }
    let enqueue = t.elapsed();
    let t = Instant::now();
    let mut done = 0;
    loop {
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        let row: Option<(i64, String)> = tx
            .query_row(
                "SELECT id, payload FROM jobs WHERE queue = 'embedding' AND state = 0 ORDER BY id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .unwrap();
        let Some((id, body)) = row else { break };
        let _: serde_json::Value = serde_json::from_str(&body).unwrap();
        tx.execute(
            "UPDATE jobs SET state = 1, worker = 'bench' WHERE id = ?1",
            params![id],
        )
        .unwrap();
        tx.commit().unwrap();
        c.execute("DELETE FROM jobs WHERE id = ?1", [id]).unwrap();
        done += 1;
    }
    assert_eq!(done, n);
    Figures {
        name: "baseline: naive (DELETE journal, sync=FULL)".into(),
        jobs: n,
        enqueue,
        work: t.elapsed(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; no other arguments are understood.
    let n: usize = std::env::var("VQ_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let base = std::env::var_os("VQ_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "queue benchmark: {n} jobs per run, databases in {}",
        base.display()
    );
    println!(
        "{:<52} {:>7} {:>12} {:>10} {:>12} {:>12} {:>8}",
        "run", "jobs", "enqueue/s", "us/enq", "claim+done/s", "end-to-end/s", "vs base"
    );
    let baseline = naive(dir.path(), n);
    baseline.print(None);
    for f in [
        vikingfs_single(dir.path(), n),
        vikingfs_threads(dir.path(), n, 4),
        vikingfs_keyed(dir.path(), n),
        vikingfs_batched(dir.path(), n),
        vikingfs_pool(dir.path(), n, 1),
        vikingfs_pool(dir.path(), n, 4),
    ] {
        f.print(Some(&baseline));
    }
    println!("(end-to-end = jobs / (enqueue time + claim/complete time); ratios compare end-to-end rates)");
}
