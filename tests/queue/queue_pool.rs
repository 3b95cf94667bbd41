//! The worker pool in one process: per-queue concurrency, a clean stop that finishes the job in
//! flight and leaves unclaimed work pending, a panicking handler counted as a retryable failure.

use crate::support::backend::backends;
use crate::support::queue;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use queue::*;
use serde_json::json;
use vikingfs::queue::{drain_with, Job, JobError, JobHandler, PoolOptions, Queue, WorkerPool};

#[test]
fn handles_are_shareable() {
    fn shareable<T: Clone + Send + Sync>() {}
    fn sendable<T: Send>() {}
    shareable::<Queue>();
    sendable::<WorkerPool>();
}

/// Counts handlers running at once and lets them go when told.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, usize, bool)>, // (running now, most at once, open)
    cv: Condvar,
}

impl Gate {
    fn enter_and_wait(&self, release_at: usize) {
        let mut g = self.state.lock();
        g.0 += 1;
        g.1 = g.1.max(g.0);
        // Latch: once enough ran together, everyone may go (they leave one by one).
        g.2 |= g.0 >= release_at;
        self.cv.notify_all();
        let deadline = std::time::Instant::now() + DEADLINE;
        while !g.2 {
            assert!(
                !self.cv.wait_until(&mut g, deadline).timed_out(),
                "gate never opened"
            );
        }
        g.0 -= 1;
    }
    fn wait_running(&self, n: usize) {
        let mut g = self.state.lock();
        let deadline = std::time::Instant::now() + DEADLINE;
        while g.0 < n {
            assert!(
                !self.cv.wait_until(&mut g, deadline).timed_out(),
                "handlers never started"
            );
        }
    }
    fn open(&self) {
        self.state.lock().2 = true;
        self.cv.notify_all();
    }
}

backends!(
    a_queue_runs_as_many_jobs_at_once_as_it_has_threads,
    stop_finishes_the_job_in_flight_and_leaves_the_rest_pending,
    a_panicking_handler_is_a_retryable_failure,
);

fn a_queue_runs_as_many_jobs_at_once_as_it_has_threads(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(3, Duration::ZERO);
    for i in 0..6 {
        q.enqueue("embedding", None, &json!(i)).unwrap();
    }
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    // Each handler waits until three run together: fewer threads would never get there.
    let handler = move |_: &Job| -> Result<(), JobError> {
        g.enter_and_wait(3);
        Ok(())
    };
    let handlers = vec![(
        "embedding".into(),
        Arc::new(handler) as Arc<dyn JobHandler>,
        3,
    )];
    assert!(drain_with(&q, handlers, PoolOptions::default(), DEADLINE, |_| {}).unwrap());
    assert_eq!(gate.state.lock().1, 3);
}

fn stop_finishes_the_job_in_flight_and_leaves_the_rest_pending(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(3, Duration::ZERO);
    q.enqueue("semantic", None, &json!("first")).unwrap();
    q.enqueue("semantic", None, &json!("second")).unwrap();
    let gate = Arc::new(Gate::default());
    let done = Arc::new(Mutex::new(Vec::new()));
    let (g, d) = (gate.clone(), done.clone());
    let handler = move |job: &Job| -> Result<(), JobError> {
        g.enter_and_wait(usize::MAX);
        d.lock().push(job.payload.clone());
        Ok(())
    };
    let pool = WorkerPool::start(
        q.clone(),
        vec![(
            "semantic".into(),
            Arc::new(handler) as Arc<dyn JobHandler>,
            1,
        )],
        PoolOptions::default(),
    );
    gate.wait_running(1);
    pool.begin_stop();
    gate.open();
    pool.stop();

    assert_eq!(*done.lock(), vec![json!("first")]);
    let s = &q.stats().unwrap()[0];
    assert_eq!((s.pending, s.running, s.expired), (1, 0, 0));
    let next = q
        .claim("semantic", "t", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!((next.payload, next.attempts), (json!("second"), 1));
}

fn a_panicking_handler_is_a_retryable_failure(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(2, Duration::ZERO);
    q.enqueue("session_commit", None, &json!({})).unwrap();
    let handler = |_: &Job| -> Result<(), JobError> { panic!("index out of bounds") };
    let handlers = vec![(
        "session_commit".into(),
        Arc::new(handler) as Arc<dyn JobHandler>,
        1,
    )];
    assert!(drain_with(&q, handlers, PoolOptions::default(), DEADLINE, |_| {}).unwrap());
    let s = &q.stats().unwrap()[0];
    assert_eq!(s.dead, 1);
    assert_eq!(s.dead_jobs[0].attempts, 2);
    assert_eq!(
        s.dead_jobs[0].error,
        "handler panicked: index out of bounds"
    );
}
