//! Coalescing across a crash with real processes: versions per key live in the database, so
//! after an enqueuer is killed with SIGKILL and the queue reopened, each key has one pending
//! job at its latest version (OpenViking #3891 lost them and flooded the queue), and a job
//! claimed at an old version is dropped in favour of the new one.

use crate::support::backend::backends;
use crate::support::queue;

use std::collections::BTreeMap;
use std::time::Duration;

use queue::*;
use serde_json::json;

const VERSIONS: i64 = 300;
const PLAIN: usize = 10;

#[test]
fn child() {
    let Some((role, site)) = child_role() else {
        return;
    };
    assert_eq!(role, "enqueuer");
    let q = site.open(5, Duration::from_millis(10));
    for v in 1..=VERSIONS {
        q.enqueue(
            "semantic",
            Some("viking://resources/a.md"),
            &json!({ "v": v }),
        )
        .unwrap();
        if v % 60 == 0 {
            q.enqueue(
                "semantic",
                Some("viking://resources/b.md"),
                &json!({ "v": v / 60 }),
            )
            .unwrap();
        }
    }
    for i in 0..PLAIN {
        q.enqueue("session_commit", None, &json!({ "i": i }))
            .unwrap();
    }
    // A job claimed at version 1, then its key written again while the claim is held.
    q.enqueue("embedding", Some("c"), &json!({ "v": 1 }))
        .unwrap();
    let held = q
        .claim("embedding", "doomed", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    assert_eq!(held.version, 1);
    q.enqueue("embedding", Some("c"), &json!({ "v": 2 }))
        .unwrap();
    say("ready");
    wait_for_stdin_eof();
}

backends!(versions_survive_a_kill_and_one_job_per_key_remains);

fn versions_survive_a_kill_and_one_job_per_key_remains(backend: Backend) {
    let t = QueueTest::new(backend);
    let mut c = t.spawn_child(module_path!(), "enqueuer", &[]);
    wait_child_says(&mut c, "ready");
    kill9(&mut c);

    let q = t.open(5, Duration::from_millis(10));
    let by_queue: BTreeMap<String, (u64, u64)> = q
        .stats()
        .unwrap()
        .into_iter()
        .map(|s| (s.queue.clone(), (s.pending, s.running + s.expired)))
        .collect();
    assert_eq!(
        by_queue["semantic"],
        (2, 0),
        "one pending job per key, not {VERSIONS}"
    );
    assert_eq!(by_queue["session_commit"], (PLAIN as u64, 0));
    assert_eq!(
        by_queue["embedding"],
        (1, 1),
        "v2 pending, the dead worker's v1 claimed"
    );
    assert_eq!(
        q.key_version("semantic", "viking://resources/a.md")
            .unwrap(),
        Some(VERSIONS)
    );

    // Work everything off; the stale v1 claim is dropped once its lease ends, not rerun.
    let mut seen = Vec::new();
    wait_until("the queues to drain", || {
        for name in ["semantic", "embedding", "session_commit"] {
            while let Some(job) = q.claim(name, "checker", Duration::from_secs(60)).unwrap() {
                assert!(q.is_current(&job).unwrap(), "{job:?}");
                q.complete(&job).unwrap();
                seen.push((name, job.key.clone(), job.version, job.payload.clone()));
            }
        }
        q.is_idle().unwrap()
    });
    let keyed: Vec<_> = seen.iter().filter(|s| s.1.is_some()).cloned().collect();
    assert_eq!(keyed.len(), 3, "{keyed:?}");
    assert!(keyed.contains(&(
        "semantic",
        Some("viking://resources/a.md".into()),
        VERSIONS,
        json!({ "v": VERSIONS })
    )));
    assert!(keyed.contains(&(
        "semantic",
        Some("viking://resources/b.md".into()),
        5,
        json!({ "v": 5 })
    )));
    assert!(keyed.contains(&("embedding", Some("c".into()), 2, json!({ "v": 2 }))));
    let mut plain: Vec<i64> = seen
        .iter()
        .filter(|s| s.1.is_none())
        .map(|s| s.3["i"].as_i64().unwrap())
        .collect();
    plain.sort();
    assert_eq!(plain, (0..PLAIN as i64).collect::<Vec<_>>());
    // Done keys are forgotten, so the version table does not grow with every path ever written.
    assert_eq!(
        q.key_version("semantic", "viking://resources/a.md")
            .unwrap(),
        None
    );
    assert_eq!(q.key_version("embedding", "c").unwrap(), None);
}
