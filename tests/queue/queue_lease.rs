//! Lease expiry with real processes: a worker process killed with SIGKILL mid-job loses the
//! job to a worker in another process while everything keeps running, and the job completes
//! exactly once. A job that keeps killing its workers ends dead instead of looping forever.

use crate::support::backend::backends;
use crate::support::queue;

use std::sync::Arc;
use std::time::Duration;

use queue::*;
use serde_json::json;
use vikingfs::queue::{drain_with, Job, JobError, JobHandler, PoolOptions, WorkerPool};

const LEASE: Duration = Duration::from_secs(6);

/// Child roles (see `spawn_child`); a plain test run passes trivially.
#[test]
fn child() {
    let Some((role, site)) = child_role() else {
        return;
    };
    let q = site.open(3, Duration::from_millis(10));
    let log = site.dir().join("log");
    let pid = std::process::id();
    match role.as_str() {
        // Takes the job, says so, and never finishes it (renewing its lease all along).
        "hang" => {
            let handler = move |job: &Job| -> Result<(), JobError> {
                log_line(&log, &format!("start {pid} {}", job.id));
                loop {
                    std::thread::park();
                }
            };
            let _pool = WorkerPool::start(
                q,
                vec![(
                    "semantic".into(),
                    Arc::new(handler) as Arc<dyn JobHandler>,
                    1,
                )],
                PoolOptions::with_lease(LEASE),
            );
            wait_for_stdin_eof();
        }
        // Drains the queue in-process, recording each job it completes.
        "finish" => {
            let handler = move |job: &Job| -> Result<(), JobError> {
                log_line(&log, &format!("done {pid} {} {}", job.id, job.attempts));
                Ok(())
            };
            let handlers = vec![(
                "semantic".into(),
                Arc::new(handler) as Arc<dyn JobHandler>,
                2,
            )];
            let drained = drain_with(
                &q,
                handlers,
                PoolOptions::with_lease(LEASE),
                DEADLINE,
                |_| {},
            )
            .unwrap();
            assert!(drained);
        }
        // Dies (like a crash or the OOM killer) in the middle of every job it takes.
        "crash" => {
            let handler = move |job: &Job| -> Result<(), JobError> {
                log_line(&log, &format!("crash {pid} {} {}", job.id, job.attempts));
                std::process::abort();
            };
            let handlers = vec![(
                "semantic".into(),
                Arc::new(handler) as Arc<dyn JobHandler>,
                1,
            )];
            let opts = PoolOptions::with_lease(Duration::from_millis(500));
            assert!(drain_with(&q, handlers, opts, DEADLINE, |_| {}).unwrap());
        }
        other => panic!("unknown role {other}"),
    }
}

backends!(
    a_killed_workers_job_is_handed_on_and_done_exactly_once,
    a_job_that_kills_its_workers_ends_dead_after_max_attempts,
);

/// On PostgreSQL the second worker is another process with its own connections.
fn a_killed_workers_job_is_handed_on_and_done_exactly_once(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(3, Duration::from_millis(10));
    let id = q.enqueue("semantic", None, &json!({"n": 1})).unwrap();
    let log = t.dir().join("log");

    let mut hang = t.spawn_child(module_path!(), "hang", &[]);
    wait_until("the first worker to start the job", || {
        !read_lines(&log).is_empty()
    });
    assert_eq!(read_lines(&log), vec![format!("start {} {id}", hang.id())]);

    // The heartbeat renews the lease while the handler runs: the lease end moves forward.
    let lease_end = || t.lease_end(id);
    let first = lease_end();
    wait_until("a lease renewal", || lease_end() > first);

    // A second worker process runs meanwhile; it cannot take the job while the lease is held.
    let mut finish = t.spawn_child(module_path!(), "finish", &[]);
    let s = &q.stats().unwrap()[0];
    assert_eq!((s.running, s.expired, s.pending), (1, 0, 0));
    assert!(!read_lines(&log).iter().any(|l| l.starts_with("done")));

    kill9(&mut hang);
    assert!(
        wait_child(&mut finish).success(),
        "the second worker drains the queue"
    );

    let lines = read_lines(&log);
    let done: Vec<&String> = lines.iter().filter(|l| l.starts_with("done")).collect();
    assert_eq!(
        done,
        vec![&format!("done {} {id} 2", finish.id())],
        "log: {lines:?}"
    );
    assert!(q.is_idle().unwrap());
    assert!(q.stats().unwrap().iter().all(|s| s.dead == 0));
}

fn a_job_that_kills_its_workers_ends_dead_after_max_attempts(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(3, Duration::from_millis(10));
    let id = q.enqueue("semantic", Some("poison"), &json!({})).unwrap();
    let log = t.dir().join("log");

    // Each crash worker takes the job and dies; the one after the last attempt finds it dead.
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs <= 10, "the poison job never died");
        let mut c = t.spawn_child(module_path!(), "crash", &[]);
        if wait_child(&mut c).success() {
            break;
        }
    }
    let crashes: Vec<String> = read_lines(&log);
    let attempts: Vec<&str> = crashes
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(attempts, vec!["1", "2", "3"], "log: {crashes:?}");
    let s = &q.stats().unwrap()[0];
    assert_eq!((s.pending, s.running, s.expired, s.dead), (0, 0, 0, 1));
    assert_eq!(s.dead_jobs[0].id, id);
    assert!(
        s.dead_jobs[0].error.contains("lease expired on attempt 3"),
        "{:?}",
        s.dead_jobs
    );
}
