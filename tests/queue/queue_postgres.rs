//! The queue engine's rules (coalescing in place, fenced claims, stale results dropped), one
//! function checked on each backend; and what only a real PostgreSQL server has: two hosts
//! on one database, a server restarted mid-run, and the one-line refusals of a bad DSN, an
//! unreachable server and a schema from a newer vikingfs. The multi-process tests of the
//! other modules run on both backends too (`backends!`: `name::sqlite`, `name::postgres`).

use crate::support::backend::backends;
use crate::support::pg::PgServer;
use crate::support::queue::*;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use vikingfs::pg::Pg;
use vikingfs::queue::postgres::PgEngine;
use vikingfs::queue::{
    Job, JobError, JobHandler, NewJob, PoolOptions, Queue, QueueError, WorkerPool,
};

const LEASE: Duration = Duration::from_secs(60);

backends!(the_engine_rules_hold);

fn the_engine_rules_hold(backend: Backend) {
    let t = QueueTest::new(backend);
    queue_rules_hold(&t.open(3, Duration::ZERO));
}

/// What every engine must do, on a queue opened with 3 attempts and no backoff.
fn queue_rules_hold(q: &Queue) {
    // A pending key takes a new version in place; a claimed one goes stale.
    let a = q.enqueue("semantic", Some("k"), &json!(1)).unwrap();
    let b = q.enqueue("semantic", Some("k"), &json!(2)).unwrap();
    assert_eq!(a, b);
    let job = q.claim("semantic", "w", LEASE).unwrap().unwrap();
    assert_eq!((job.version, job.payload.clone()), (2, json!(2)));
    assert!(q.is_current(&job).unwrap());
    let c = q.enqueue("semantic", Some("k"), &json!(3)).unwrap();
    assert_ne!(c, job.id, "a claimed job is not rewritten under its worker");
    assert!(!q.is_current(&job).unwrap());
    assert!(q.has_pending("semantic", "k").unwrap());
    assert_eq!(q.key_version("semantic", "k").unwrap(), Some(3));
    // A stale failure is dropped, not retried: the newer job does the work.
    q.fail(&job, &JobError::Retry("x".into())).unwrap();
    let s = &q.stats().unwrap()[0];
    assert_eq!((s.pending, s.running, s.dead), (1, 0, 0));
    let next = q.claim("semantic", "w", LEASE).unwrap().unwrap();
    assert_eq!((next.version, next.payload.clone()), (3, json!(3)));
    q.complete(&next).unwrap();
    assert_eq!(
        q.key_version("semantic", "k").unwrap(),
        None,
        "a finished key's version is pruned"
    );

    // A lost claim can neither renew nor complete.
    q.enqueue("semantic", None, &json!({})).unwrap();
    // A zero lease ends at once: the next claim (due <= the server's now) takes it over.
    let first = q.claim("semantic", "a", Duration::ZERO).unwrap().unwrap();
    let second = q.claim("semantic", "b", LEASE).unwrap().unwrap();
    assert_eq!(first.id, second.id);
    assert!(!q.renew(&first, "a", LEASE).unwrap());
    assert!(matches!(
        q.complete(&first),
        Err(QueueError::NotClaimed { .. })
    ));
    q.complete(&second).unwrap();

    // Release gives the attempt back; a permanent failure is dead; retry_dead revives it.
    q.enqueue("semantic", None, &json!(7)).unwrap();
    let job = q.claim("semantic", "a", LEASE).unwrap().unwrap();
    q.release(&job).unwrap();
    let job = q.claim("semantic", "a", LEASE).unwrap().unwrap();
    assert_eq!(job.attempts, 1);
    q.fail(&job, &JobError::Permanent("bad".into())).unwrap();
    assert!(q.claim("semantic", "a", LEASE).unwrap().is_none());
    let s = &q.stats().unwrap()[0];
    assert_eq!(s.dead, 1);
    assert_eq!(s.dead_jobs[0].error, "bad");
    assert_eq!(q.retry_dead(Some("semantic")).unwrap(), 1);
    let job = q.claim("semantic", "a", LEASE).unwrap().unwrap();
    q.complete(&job).unwrap();
    assert!(q.is_idle().unwrap());
}

#[test]
fn two_queues_on_one_database_see_one_set_of_rows() {
    let t = QueueTest::new(Backend::Postgres);
    let d2 = tempfile::tempdir().unwrap();
    // Two hosts: their own spool directories, one database.
    let other = Site {
        dir: d2.path().to_path_buf(),
        dsn: t.dsn.clone(),
    };
    let (h1, h2) = (t.open(3, Duration::ZERO), other.open(3, Duration::ZERO));
    let jobs: Vec<NewJob> = (0..50)
        .map(|i| NewJob::new("embedding", Some(format!("k{i}")), json!(i)))
        .collect();
    h1.enqueue_many(&jobs).unwrap();
    assert_eq!(h2.outstanding(None).unwrap(), 50);
    let mut seen = BTreeMap::new();
    loop {
        let a = h1.claim("embedding", "h1", LEASE).unwrap();
        let b = h2.claim("embedding", "h2", LEASE).unwrap();
        if a.is_none() && b.is_none() {
            break;
        }
        for j in [a, b].into_iter().flatten() {
            assert!(seen.insert(j.id, j.key.clone()).is_none(), "claimed twice");
            h2.complete(&j).unwrap();
        }
    }
    assert_eq!(seen.len(), 50);
    assert!(h1.is_idle().unwrap() && h2.is_idle().unwrap());
}

#[test]
fn a_server_restarted_mid_run_loses_nothing() {
    let t = QueueTest::new(Backend::Postgres);
    let server = t.db.server().unwrap();
    let q = t.open(5, Duration::from_millis(50));
    let done: Arc<Mutex<BTreeMap<i64, u32>>> = Arc::default();
    let d = done.clone();
    let handler = move |job: &Job| -> Result<(), JobError> {
        std::thread::sleep(Duration::from_millis(2));
        *d.lock()
            .unwrap()
            .entry(job.payload["i"].as_i64().unwrap())
            .or_default() += 1;
        Ok(())
    };
    let mut opts = PoolOptions::with_lease(Duration::from_secs(2));
    opts.poll = Duration::from_millis(50);
    let pool = WorkerPool::start(
        q.clone(),
        vec![(
            "embedding".into(),
            Arc::new(handler) as Arc<dyn JobHandler>,
            2,
        )],
        opts,
    );
    let batch = |from: i64| -> Vec<NewJob> {
        (from..from + 100)
            .map(|i| NewJob::new("embedding", None, json!({ "i": i })))
            .collect()
    };
    q.enqueue_many(&batch(0)).unwrap();
    wait_until("some jobs done", || done.lock().unwrap().len() >= 10);
    server.stop();
    // While it is down: a clear error naming the server, never a half-written row.
    let e = vikingfs::error::Chain(&q.enqueue_many(&batch(100)).unwrap_err()).to_string();
    assert!(e.contains("PostgreSQL host=127.0.0.1"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    server.start_again();
    // The pool reconnects by itself; the batch refused while the server was down is queued
    // again by its caller (as the spool's flusher does).
    let start = Instant::now();
    while let Err(e) = q.enqueue_many(&batch(100)) {
        assert!(start.elapsed() < DEADLINE, "never reconnected: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_until("every job done", || {
        done.lock().unwrap().len() == 200 && q.is_idle().unwrap_or(false)
    });
    pool.stop();
    let done = done.lock().unwrap();
    assert_eq!(
        done.keys().copied().collect::<Vec<_>>(),
        (0..200).collect::<Vec<_>>()
    );
    assert!(q.stats().unwrap().iter().all(|s| s.dead == 0));
}

#[test]
fn a_bad_dsn_an_unreachable_server_and_a_newer_schema_are_one_line_each() {
    let one_line = |e: &(dyn std::error::Error + 'static), want: &str| {
        let line = vikingfs::error::Chain(e).to_string();
        assert!(line.contains(want), "{line:?} should say {want:?}");
        assert!(!line.contains('\n'), "{line:?}");
    };
    let e = Pg::connect("host=127.0.0.1 port=notaport").err().unwrap();
    one_line(&e, "bad PostgreSQL DSN");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = Pg::connect(&format!(
        "host=127.0.0.1 port={port} user=x dbname=y connect_timeout=2"
    ))
    .err()
    .unwrap();
    one_line(
        &e,
        &format!("PostgreSQL host=127.0.0.1 port={port} dbname=y user=x"),
    );

    let server = PgServer::start();
    let pg = Arc::new(Pg::connect(&server.dsn()).unwrap());
    PgEngine::open(pg.clone()).unwrap();
    server
        .client()
        .execute(
            "UPDATE vikingfs_schema SET version = 99 WHERE store = 'queue'",
            &[],
        )
        .unwrap();
    let e = PgEngine::open(pg).err().unwrap();
    one_line(
        &e,
        "schema queue is version 99, newer than this vikingfs understands",
    );
}

backends!(a_failing_job_and_a_new_version_of_its_key_never_make_two_pending_rows);

/// Two hosts: one keeps enqueuing a key while the other claims its job and fails it back to
/// pending (a retry) or hands it back (a stopping pool). A failure that put its row back
/// while the enqueue of a newer version was inserting one made two pending rows of one key:
/// PostgreSQL refused it (`duplicate key … vq_jobs_pending_key`) and the worker's failure or
/// the enqueue was lost. Every call must succeed, and the key's newest version is the one
/// left to run.
fn a_failing_job_and_a_new_version_of_its_key_never_make_two_pending_rows(backend: Backend) {
    let t = QueueTest::new(backend);
    let d2 = tempfile::tempdir().unwrap();
    // On PostgreSQL the other host has its own spool directory; on SQLite it shares the file.
    let other = Site {
        dir: match &t.dsn {
            Some(_) => d2.path().to_path_buf(),
            None => t.dir().to_path_buf(),
        },
        dsn: t.dsn.clone(),
    };
    let (h1, h2) = (
        t.open(1000, Duration::ZERO),
        other.open(1000, Duration::ZERO),
    );
    let job = |i: i64| NewJob::new("semantic", Some("dir".to_string()), json!({ "i": i }));
    h1.enqueue_many(&[job(0)]).unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let (mut enqueued, mut failed) = (0i64, 0u64);
    std::thread::scope(|s| {
        let enqueuer = s.spawn(|| {
            let mut n = 0i64;
            while Instant::now() < until {
                n += 1;
                h1.enqueue_many(&[job(n)])
                    .expect("enqueue beside a failing claim");
            }
            n
        });
        while Instant::now() < until {
            if let Some(j) = h2.claim("semantic", "h2", LEASE).unwrap() {
                let r = if failed % 2 == 0 {
                    h2.fail(&j, &JobError::Retry("again".into()))
                } else {
                    h2.release(&j)
                };
                r.expect("a failure beside an enqueue of the same key");
                failed += 1;
            }
        }
        enqueued = enqueuer.join().unwrap();
    });
    assert!(failed > 10, "the race was hardly run: {failed} failures");
    // One job of the key is left, and it carries the last version enqueued.
    let j = h2
        .claim("semantic", "h2", LEASE)
        .unwrap()
        .expect("the key's job");
    assert_eq!(
        j.payload["i"], enqueued,
        "the newest version is the one left"
    );
    h2.complete(&j).unwrap();
    assert!(h1.is_idle().unwrap(), "one pending row of the key, no more");
}
