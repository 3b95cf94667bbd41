//! Retry limit with a real worker process: a retryable failure backs off and retries until
//! `max_attempts`, then the job is dead with its last error shown in the stats; a permanent
//! failure is dead at once. Neither is retried forever (OpenViking #4919).

use crate::support::backend::backends;
use crate::support::queue;

use std::sync::Arc;
use std::time::Duration;

use queue::*;
use serde_json::json;
use vikingfs::queue::{drain_with, Job, JobError, JobHandler, PoolOptions};

const MAX_ATTEMPTS: u32 = 4;

#[test]
fn child() {
    let Some((role, site)) = child_role() else {
        return;
    };
    assert_eq!(role, "failing");
    let q = site.open(MAX_ATTEMPTS, Duration::from_millis(20));
    let log = site.dir().join("calls");
    let handler = move |job: &Job| -> Result<(), JobError> {
        let name = job.payload["name"].as_str().unwrap().to_string();
        log_line(&log, &format!("{name} {}", job.attempts));
        match name.as_str() {
            "flaky" => Err(JobError::Retry(
                format!("provider unreachable (attempt {})", job.attempts).into(),
            )),
            "broken" => Err(JobError::Permanent("payload names no file".into())),
            "fine" => Ok(()),
            // A late success: fails twice, then works.
            _ if job.attempts < 3 => Err(JobError::Retry("busy".into())),
            _ => Ok(()),
        }
    };
    let handlers = vec![(
        "embedding".into(),
        Arc::new(handler) as Arc<dyn JobHandler>,
        2,
    )];
    let drained = drain_with(&q, handlers, PoolOptions::default(), DEADLINE, |_| {}).unwrap();
    assert!(drained, "dead jobs do not keep a drain waiting");
}

backends!(
    retries_stop_at_the_limit_and_the_last_error_is_kept,
    a_new_version_replaces_a_dead_job,
);

fn retries_stop_at_the_limit_and_the_last_error_is_kept(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(MAX_ATTEMPTS, Duration::from_millis(20));
    for name in ["flaky", "broken", "fine", "late"] {
        q.enqueue("embedding", Some(name), &json!({ "name": name }))
            .unwrap();
    }
    let mut c = t.spawn_child(module_path!(), "failing", &[]);
    assert!(wait_child(&mut c).success());

    let calls = read_lines(&t.dir().join("calls"));
    let count = |n: &str| {
        calls
            .iter()
            .filter(|l| l.split(' ').next() == Some(n))
            .count()
    };
    assert_eq!(count("flaky"), MAX_ATTEMPTS as usize, "{calls:?}");
    assert_eq!(count("broken"), 1, "{calls:?}");
    assert_eq!(count("fine"), 1, "{calls:?}");
    assert_eq!(count("late"), 3, "{calls:?}");

    let stats = q.stats().unwrap();
    assert_eq!(stats.len(), 1);
    let s = &stats[0];
    assert_eq!((s.pending, s.running, s.dead), (0, 0, 2));
    let mut dead: Vec<(String, u32, String)> = s
        .dead_jobs
        .iter()
        .map(|d| (d.key.clone().unwrap(), d.attempts, d.error.clone()))
        .collect();
    dead.sort();
    assert_eq!(
        dead,
        vec![
            ("broken".into(), 1, "payload names no file".into()),
            (
                "flaky".into(),
                MAX_ATTEMPTS,
                format!("provider unreachable (attempt {MAX_ATTEMPTS})")
            ),
        ]
    );
    // Dead jobs stay out of the way until a repair revives them.
    assert!(q.is_idle().unwrap());
    assert_eq!(q.retry_dead(None).unwrap(), 2);
    assert_eq!(q.outstanding(None).unwrap(), 2);
}

fn a_new_version_replaces_a_dead_job(backend: Backend) {
    let t = QueueTest::new(backend);
    let q = t.open(1, Duration::ZERO);
    q.enqueue("semantic", Some("k"), &json!(1)).unwrap();
    let job = q
        .claim("semantic", "w", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    q.fail(&job, &JobError::Retry("down".into())).unwrap();
    assert_eq!(q.stats().unwrap()[0].dead, 1, "one attempt allowed");
    q.enqueue("semantic", Some("k"), &json!(2)).unwrap();
    let s = &q.stats().unwrap()[0];
    assert_eq!((s.pending, s.dead), (1, 0));
}
