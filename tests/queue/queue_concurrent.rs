//! Several enqueuer processes and several worker processes on one queue database at once:
//! a checker finds every enqueued job done exactly once, and concurrent enqueues of one key
//! coalesced into one pending job carrying the total count of versions.

use crate::support::backend::backends;
use crate::support::queue;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use queue::*;
use serde_json::json;
use vikingfs::queue::{Job, JobError, JobHandler, NewJob, PoolOptions, WorkerPool};

const ENQUEUERS: u64 = 4;
const WORKERS: usize = 2;
const JOBS_EACH: u64 = 300;
const BATCH: u64 = 10;
/// Every this many jobs an enqueuer also writes the shared key.
const SHARED_EVERY: u64 = 5;

#[test]
fn child() {
    let Some((role, site)) = child_role() else {
        return;
    };
    let q = site.open(5, Duration::from_millis(10));
    let pid = std::process::id();
    match role.as_str() {
        // Alternates single enqueues and batches; half the batches also touch the shared key.
        "enqueuer" => {
            let me = env_u64("VQ_INDEX", 0);
            let mut seq = 0;
            while seq < JOBS_EACH {
                if (seq / BATCH).is_multiple_of(2) {
                    q.enqueue("embedding", None, &json!({ "p": me, "s": seq }))
                        .unwrap();
                    if seq % SHARED_EVERY == 0 {
                        q.enqueue("semantic", Some("shared"), &json!({ "p": me, "s": seq }))
                            .unwrap();
                    }
                    seq += 1;
                } else {
                    let mut batch = Vec::new();
                    for s in seq..seq + BATCH {
                        batch.push(NewJob::new("embedding", None, json!({ "p": me, "s": s })));
                        if s % SHARED_EVERY == 0 {
                            batch.push(NewJob::new(
                                "semantic",
                                Some("shared".to_string()),
                                json!({ "p": me, "s": s }),
                            ));
                        }
                    }
                    q.enqueue_many(&batch).unwrap();
                    seq += BATCH;
                }
            }
        }
        // Works the embedding queue until the parent closes stdin.
        "worker" => {
            let log = site.dir().join(format!("done.{pid}"));
            let handler = move |job: &Job| -> Result<(), JobError> {
                log_line(&log, &format!("{} {}", job.payload["p"], job.payload["s"]));
                Ok(())
            };
            let pool = WorkerPool::start(
                q,
                vec![(
                    "embedding".into(),
                    Arc::new(handler) as Arc<dyn JobHandler>,
                    2,
                )],
                PoolOptions::default(),
            );
            say("ready");
            wait_for_stdin_eof();
            pool.stop();
        }
        other => panic!("unknown role {other}"),
    }
}

backends!(concurrent_enqueuers_and_workers_lose_nothing);

fn concurrent_enqueuers_and_workers_lose_nothing(backend: Backend) {
    let t = QueueTest::new(backend);
    // Everyone starts at once on a database that does not exist yet: creation and schema
    // setup race too.
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|_| t.spawn_child(module_path!(), "worker", &[]))
        .collect();
    let mut enqueuers: Vec<_> = (0..ENQUEUERS)
        .map(|i| t.spawn_child(module_path!(), "enqueuer", &[("VQ_INDEX", i.to_string())]))
        .collect();
    for w in &mut workers {
        wait_child_says(w, "ready");
    }
    for e in &mut enqueuers {
        assert!(wait_child(e).success());
    }
    let q = t.open(5, Duration::from_millis(10));
    wait_until("the workers to drain the embedding queue", || {
        q.outstanding(Some(&["embedding"])).unwrap() == 0
    });
    for mut w in workers {
        drop(w.stdin.take());
        assert!(wait_child(&mut w).success());
    }

    // Checker: every (enqueuer, seq) done exactly once, across all worker processes.
    let mut done: BTreeMap<(u64, u64), usize> = BTreeMap::new();
    for entry in std::fs::read_dir(t.dir()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("done.")
        {
            for line in read_lines(&path) {
                let (p, s) = line.split_once(' ').unwrap();
                *done
                    .entry((p.parse().unwrap(), s.parse().unwrap()))
                    .or_default() += 1;
            }
        }
    }
    let expected: Vec<(u64, u64)> = (0..ENQUEUERS)
        .flat_map(|p| (0..JOBS_EACH).map(move |s| (p, s)))
        .collect();
    assert_eq!(
        done.keys().copied().collect::<Vec<_>>(),
        expected,
        "lost or invented jobs"
    );
    let twice: Vec<_> = done.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "jobs done more than once: {twice:?}");

    // Nobody works `semantic` here: the shared key's enqueues became one pending job whose
    // version counts them all.
    let shared = ENQUEUERS * JOBS_EACH / SHARED_EVERY;
    let s = q
        .stats()
        .unwrap()
        .into_iter()
        .find(|s| s.queue == "semantic")
        .unwrap();
    assert_eq!((s.pending, s.running), (1, 0));
    assert_eq!(
        q.key_version("semantic", "shared").unwrap(),
        Some(shared as i64)
    );
}
