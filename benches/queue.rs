//! Queue throughput: enqueue + claim + complete of N jobs (default 10,000; `VQ_BENCH_JOBS`),
//! side by side with a naive baseline SQLite queue (rollback journal, `synchronous=FULL`, one
//! transaction per operation) in the same run, on the same disk. Prints jobs/s and ratios.
//!
//! Run: `cargo bench --bench queue` (set `VQ_BENCH_DIR` to put the databases on another disk;
//! default: a temporary directory under `target/`).
//!
//! With PostgreSQL fetched (`scripts/fetch-postgres.sh`), the same runs follow on a server of
//! this machine, and draining by one "host" against two (two queue handles with their own
//! connections and worker pools, as two daemons would have), each job doing `VQ_BENCH_WORK_MS`
//! (default 5) of waiting, as a remote embedder's call does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::json;
use vikingfs::queue::{Job, JobError, JobHandler, NewJob, PoolOptions, Queue, QueueOptions};

// The tests' PostgreSQL fixture alone (the rest of tests/support is for test binaries).
#[allow(dead_code)]
#[path = "../tests/support/pg.rs"]
mod pg;

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

/// Where the runs keep their queue: SQLite files in a directory, or one PostgreSQL database
/// (emptied before each run).
#[derive(Clone, Copy)]
enum Store<'a> {
    Sqlite(&'a std::path::Path),
    Postgres(&'a str, &'a std::path::Path),
}

impl Store<'_> {
    fn open(&self, name: &str) -> Queue {
        match *self {
            Store::Sqlite(dir) => Queue::open(&dir.join(name)).unwrap(),
            Store::Postgres(dsn, dir) => {
                let mut c = postgres::Client::connect(dsn, postgres::NoTls).unwrap();
                c.batch_execute("DROP TABLE IF EXISTS vq_jobs, vq_key_versions, vikingfs_schema")
                    .unwrap();
                self.attach(dir.join(name).as_path())
            }
        }
    }

    /// Another handle on the same PostgreSQL rows, with its own connections (a second host).
    fn attach(&self, spool_at: &std::path::Path) -> Queue {
        let Store::Postgres(dsn, _) = *self else {
            unreachable!()
        };
        let pg = Arc::new(vikingfs::pg::Pg::connect(dsn).unwrap());
        let engine = vikingfs::queue::postgres::PgEngine::open(pg).unwrap();
        Queue::with_engine(Box::new(engine), spool_at, QueueOptions::default()).unwrap()
    }

    fn label(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(..) => "postgres",
        }
    }
}

fn vikingfs_single(store: Store<'_>, n: usize) -> Figures {
    let q = store.open("single.db");
    let t = Instant::now();
    for i in 0..n {
        q.enqueue("embedding", None, &payload(i)).unwrap();
    }
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: format!("{} enqueue (1 txn/job) + claim/complete", store.label()),
        jobs: n,
        enqueue,
        work,
    }
}

/// Like FUSE threads: `threads` threads enqueue one job per transaction at once.
fn vikingfs_threads(store: Store<'_>, n: usize, threads: usize) -> Figures {
    let q = store.open(&format!("threads{threads}.db"));
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
        name: format!(
            "{} enqueue from {threads} threads + claim/complete",
            store.label()
        ),
        jobs: n,
        enqueue,
        work,
    }
}

fn vikingfs_keyed(store: Store<'_>, n: usize) -> Figures {
    let q = store.open("keyed.db");
    let t = Instant::now();
    for i in 0..n {
        let key = format!("viking://resources/docs/file-{i:05}.md");
        q.enqueue("embedding", Some(&key), &payload(i)).unwrap();
    }
    let enqueue = t.elapsed();
    let work = claim_complete_all(&q, n);
    Figures {
        name: format!("{} keyed enqueue (1 txn/job) + claim/compl.", store.label()),
        jobs: n,
        enqueue,
        work,
    }
}

fn vikingfs_batched(store: Store<'_>, n: usize) -> Figures {
    let q = store.open("batched.db");
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
        name: format!(
            "{} enqueue_many ({BATCH}/txn) + claim/complete",
            store.label()
        ),
        jobs: n,
        enqueue,
        work,
    }
}

/// Drain through the real pool (`drain_with` runs a `WorkerPool`), no-op handler.
fn vikingfs_pool(store: Store<'_>, n: usize, threads: usize) -> Figures {
    let q = store.open(&format!("pool{threads}.db"));
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
        name: format!(
            "{} enqueue_many + WorkerPool {threads} thr drain",
            store.label()
        ),
        jobs: n,
        enqueue,
        work,
    }
}

/// `hosts` queue handles on one PostgreSQL database drain `n` jobs, each pool with 2 threads,
/// each job waiting `work` (a remote call's time).
fn hosts_draining(store: Store<'_>, n: usize, hosts: usize, work: Duration) -> Figures {
    let q = store.open("hosts.db");
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("embedding", None, payload(i)))
        .collect();
    let t = Instant::now();
    for chunk in jobs.chunks(BATCH) {
        q.enqueue_many(chunk).unwrap();
    }
    let enqueue = t.elapsed();
    let Store::Postgres(_, dir) = store else {
        unreachable!()
    };
    let handles: Vec<Queue> = (0..hosts)
        .map(|h| store.attach(&dir.join(format!("host{h}")).join("q.db")))
        .collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for h in &handles {
            s.spawn(move || {
                let job = move |_: &Job| -> Result<(), JobError> {
                    std::thread::sleep(work);
                    Ok(())
                };
                let opts = PoolOptions {
                    poll: Duration::from_millis(20),
                    ..PoolOptions::default()
                };
                vikingfs::queue::drain_with(
                    h,
                    vec![("embedding".into(), Arc::new(job) as Arc<dyn JobHandler>, 2)],
                    opts,
                    Duration::from_secs(3600),
                    |_| {},
                )
                .unwrap();
            });
        }
    });
    let work_time = t.elapsed();
    assert!(q.is_idle().unwrap());
    Figures {
        name: format!(
            "postgres: {hosts} host(s) x 2 thr drain, {} ms/job",
            work.as_millis()
        ),
        jobs: n,
        enqueue,
        work: work_time,
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
    let runs = |store: Store<'_>| {
        for f in [
            vikingfs_single(store, n),
            vikingfs_threads(store, n, 4),
            vikingfs_keyed(store, n),
            vikingfs_batched(store, n),
            vikingfs_pool(store, n, 1),
            vikingfs_pool(store, n, 4),
        ] {
            f.print(Some(&baseline));
        }
    };
    runs(Store::Sqlite(dir.path()));
    let have_pg = std::env::var_os("VIKINGFS_PG_BIN").is_some()
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/postgres/bin/postgres")
            .exists();
    if have_pg {
        let server = pg::PgServer::start();
        let dsn = server.dsn();
        let store = Store::Postgres(&dsn, dir.path());
        runs(store);
        let work = Duration::from_millis(
            std::env::var("VQ_BENCH_WORK_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(5),
        );
        // The whole backlog (10,000 jobs by default), as issue #16's target states it.
        let work_jobs = n;
        let one = hosts_draining(store, work_jobs, 1, work);
        one.print(None);
        let two = hosts_draining(store, work_jobs, 2, work);
        two.print(Some(&one));
        println!(
            "(two hosts drain {:.2}x as fast as one: claim+done rates {:.0} vs {:.0} jobs/s)",
            Figures::rate(two.jobs, two.work) / Figures::rate(one.jobs, one.work),
            Figures::rate(two.jobs, two.work),
            Figures::rate(one.jobs, one.work)
        );
    } else {
        println!("(no PostgreSQL: scripts/fetch-postgres.sh adds the postgres runs)");
    }
    println!("(end-to-end = jobs / (enqueue time + claim/complete time); ratios compare end-to-end rates)");
}
