//! The spool (jobs the mount queues without waiting for SQLite): every job whose `submit`
//! returned reaches the database, whether its process stops cleanly, is killed while
//! submitting, or dies just before or just after the flusher's commit; no spool file is left
//! behind once a process has reopened the queue; a replayed line never duplicates a job.

use crate::support::backend::backends;
use crate::support::queue;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use queue::*;
use serde_json::json;
use vikingfs::queue::NewJob;

const JOBS: u64 = 300;

#[test]
fn child() {
    let Some((role, site)) = child_role() else {
        return;
    };
    let q = site.open(5, Duration::from_millis(10));
    q.start_spool().unwrap();
    let log = site.dir().join("submitted.log");
    for i in 0..JOBS {
        let key = format!("k{i}");
        q.submit(&[NewJob::new(
            "embedding",
            Some(key.clone()),
            json!({ "i": i }),
        )])
        .unwrap();
        // After submit returned: the parent expects this job in the database.
        log_line(&log, &key);
        if i == JOBS / 2 {
            say("half");
        }
    }
    match role.as_str() {
        "clean" => q.stop_spool(),
        // Stay alive until killed (or until a crash point in the flusher aborts us).
        _ => {
            say("submitted");
            wait_for_stdin_eof();
        }
    }
}

fn spool_files(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir.join("spool")) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

/// Reopen the queue as a new process would; every logged key has exactly one pending job.
fn check_recovered(site: &Site) {
    let dir = site.dir();
    let submitted: BTreeSet<String> = read_lines(&dir.join("submitted.log")).into_iter().collect();
    let q = site.open(5, Duration::from_millis(10));
    assert!(spool_files(dir).is_empty(), "left: {:?}", spool_files(dir));
    for k in &submitted {
        assert!(
            q.key_version("embedding", k).unwrap().is_some(),
            "{k} was submitted but is not in the queue"
        );
    }
    let stats = q.stats().unwrap();
    let pending = stats
        .iter()
        .find(|s| s.queue == "embedding")
        .map_or(0, |s| s.pending);
    // Keys are distinct: a line replayed twice coalesced with itself.
    assert!(
        pending >= submitted.len() as u64 && pending <= JOBS,
        "{pending}"
    );
    assert_eq!(q.outstanding(None).unwrap(), pending);
}

backends!(
    a_clean_stop_moves_everything_and_leaves_no_spool,
    kill9_while_submitting_loses_no_submitted_job,
    a_live_process_spool_is_neither_replayed_nor_lost,
    #[cfg(feature = "failpoints")]
    a_crash_before_or_after_the_flushers_commit_loses_nothing,
);

fn a_clean_stop_moves_everything_and_leaves_no_spool(backend: Backend) {
    let t = QueueTest::new(backend);
    let mut c = t.spawn_child(module_path!(), "clean", &[]);
    assert!(wait_child(&mut c).success());
    assert!(spool_files(t.dir()).is_empty());
    assert_eq!(
        read_lines(&t.dir().join("submitted.log")).len() as u64,
        JOBS
    );
    check_recovered(&t);
}

fn kill9_while_submitting_loses_no_submitted_job(backend: Backend) {
    let t = QueueTest::new(backend);
    let mut c = t.spawn_child(module_path!(), "live", &[]);
    wait_child_says(&mut c, "half");
    kill9(&mut c);
    check_recovered(&t);
}

fn a_live_process_spool_is_neither_replayed_nor_lost(backend: Backend) {
    let t = QueueTest::new(backend);
    let mut c = t.spawn_child(module_path!(), "live", &[]);
    wait_child_says(&mut c, "submitted");
    // Opening the queue beside a live spooler must not take its file.
    let q = t.open(5, Duration::from_millis(10));
    wait_until("the live spooler's flusher to catch up", || {
        q.outstanding(None).unwrap() == JOBS
    });
    assert_eq!(spool_files(t.dir()).len(), 1, "the live spool stays");
    drop(c.stdin.take());
    assert!(wait_child(&mut c).success());
    check_recovered(&t);
}

#[cfg(feature = "failpoints")]
fn a_crash_before_or_after_the_flushers_commit_loses_nothing(backend: Backend) {
    for point in ["spool.flush.before", "spool.flushed"] {
        let t = QueueTest::new(backend);
        let mut c = t.spawn_child(
            module_path!(),
            "live",
            &[("VIKINGFS_CRASH_AT", point.to_string())],
        );
        let status = wait_child(&mut c);
        assert!(!status.success(), "{point}: the child was meant to abort");
        check_recovered(&t);
    }
}
