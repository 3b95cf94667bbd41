//! The session crash matrix: for every `session.*` crash point, the operation aborts there
//! (like `kill -9`), lines are appended after the crash (by a foreign writer under the EXACT
//! lock, then by `vikingfs session add`), recovery runs, and the checker proves:
//! - every line ever appended is in exactly one place (an archive or the live file), and the
//!   live file holds exactly the lines no archive took;
//! - every archive is complete (`messages.jsonl`, summaries, `memory_diff.json`, `.done`);
//! - every memory exists once, with each fact line once;
//! - no session_commit job is left pending, running or dead, and no lock blocks.
//!
//! Built only with `--features failpoints` (the binary must carry the crash points).

#![cfg(feature = "failpoints")]

use crate::support::{self, session};

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use session::{content_of, Ws};

/// What the session says before the crash (one invalid line among them).
const BEFORE: &[&str] = &[
    "Hello, my name is Ana.",
    "I prefer dark mode.",
    "I live in Lisbon.",
];
const INVALID: &str = "this line is not json";

/// Run `vikingfs ARGS` with `point` armed; it must abort there.
fn crash(ws: &Ws, point: &str, args: &[&str]) {
    let out = ws
        .cmd()
        .env("VIKINGFS_CRASH_AT", point)
        .args(args)
        .output()
        .unwrap();
    support::assert_crashed_at(&out, point, args);
}

/// Recovery after a crash: `vikingfs wait` finishes interrupted commits and drains every queue.
fn recover(ws: &Ws) {
    ws.ok(&["wait", "--timeout", "300"]);
}

fn raw_append(ws: &Ws, line: &str) {
    let file = ws.session_dir("s").join("messages.jsonl");
    let out = ws
        .cmd()
        .args([
            "lock",
            "--timeout",
            "60",
            "viking://session/s/messages.jsonl",
            "--",
        ])
        .args(["sh", "-c", "printf '%s\\n' \"$1\" >> \"$2\"", "sh", line])
        .arg(&file)
        .output()
        .unwrap();
    support::assert_ok(&out, &["lock ... >> messages.jsonl"]);
}

/// Who finishes the interrupted work after the crash.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// The next `session add` (it finishes a pending commit before appending).
    Add,
    /// The next `session commit` of the same session.
    Commit,
    /// `vikingfs wait`.
    Wait,
    /// The queued `session_commit` job, run by a drain that does no recovery pass of its own
    /// (another session's `commit --wait`).
    Job,
}

fn run_point(point: &str, restart: Restart, keep: usize) {
    let ws = Ws::new();
    for m in BEFORE {
        ws.ok(&["session", "add", "s", "user", m]);
    }
    raw_append(&ws, INVALID);
    ws.ok(&["session", "add", "s", "assistant", "Noted."]);
    let mut expected: Vec<String> = BEFORE.iter().map(|s| s.to_string()).collect();
    expected.extend([INVALID.to_string(), "Noted.".to_string()]);

    if point.starts_with("session.add.") {
        crash(
            &ws,
            point,
            &["session", "add", "s", "user", "never acknowledged"],
        );
    } else {
        let keep = keep.to_string();
        crash(
            &ws,
            point,
            &["session", "commit", "s", "--keep", &keep, "--wait"],
        );
    }

    // Appends after the crash: first a writer that knows nothing of sessions (it must not be
    // swallowed by the recovery of the interrupted trim), then the restart, then the CLI.
    raw_append(&ws, r#"{"role":"user","content":"after crash, raw"}"#);
    expected.push("after crash, raw".to_string());
    match restart {
        Restart::Add => {}
        Restart::Commit => {
            ws.ok(&["session", "commit", "s", "--wait"]);
        }
        Restart::Wait => recover(&ws),
        Restart::Job => {
            ws.ok(&["session", "add", "other", "user", "unrelated"]);
            ws.ok(&["session", "commit", "other", "--wait"]);
            // The job of the interrupted commit finished its phase 1 before its phase 2.
            let meta: serde_json::Value = serde_json::from_slice(
                &std::fs::read(ws.session_dir("s").join(".meta.json")).unwrap(),
            )
            .unwrap();
            assert!(meta.get("pending_commit").is_none(), "{point}: {meta}");
        }
    }
    ws.ok(&["session", "add", "s", "user", "after crash, cli"]);
    expected.push("after crash, cli".to_string());

    recover(&ws);
    check(&ws, point, &expected);

    // The session keeps working: one more commit takes the rest, and memories stay single.
    ws.ok(&["session", "commit", "s", "--wait"]);
    // `commit --wait` waits for its own archive; what else is queued comes with `wait`.
    recover(&ws);
    check(&ws, point, &expected);
    assert!(
        ws.live("s").is_empty(),
        "{point}: the last commit took everything"
    );
}

fn check(ws: &Ws, point: &str, expected: &[String]) {
    // Every line exactly once, nothing else.
    let all: Vec<String> = ws.all_lines("s").iter().map(|l| content_of(l)).collect();
    for e in expected {
        let n = all.iter().filter(|c| *c == e).count();
        assert_eq!(n, 1, "{point}: {e:?} appears {n} times in {all:#?}");
    }
    assert_eq!(
        all.len(),
        expected.len(),
        "{point}: unexpected lines in {all:#?}"
    );

    // The live file holds exactly what no archive took.
    let archived: Vec<String> = ws
        .archives("s")
        .values()
        .flatten()
        .map(|l| content_of(l))
        .collect();
    let live: Vec<String> = ws.live("s").iter().map(|l| content_of(l)).collect();
    let not_archived: Vec<String> = expected
        .iter()
        .filter(|e| !archived.contains(e))
        .cloned()
        .collect();
    assert_eq!(live, not_archived, "{point}: live file");

    // Every archive is complete, and no commit is left pending.
    for n in ws.archives("s").keys() {
        let dir = ws.session_dir("s").join(format!("history/archive_{n:03}"));
        for f in [
            "messages.jsonl",
            ".abstract.md",
            ".overview.md",
            "memory_diff.json",
            ".done",
        ] {
            assert!(dir.join(f).is_file(), "{point}: archive_{n:03} lacks {f}");
        }
        assert!(
            !dir.join(".failed.json").exists(),
            "{point}: archive_{n:03} failed"
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.session_dir("s").join(".meta.json")).unwrap())
            .unwrap();
    assert!(meta.get("pending_commit").is_none(), "{point}: {meta}");

    // Memories: once each, each fact once.
    let mems = ws.memories();
    if !ws.archives("s").is_empty() {
        let pref = mems
            .get("preferences/default/dark_mode.md")
            .unwrap_or_else(|| panic!("{point}: no dark mode preference in {mems:?}"));
        assert_eq!(
            pref.matches("dark mode").count(),
            2,
            "{point}: title + one fact: {pref}"
        );
    }
    for (path, text) in &mems {
        let facts: Vec<&str> = text.lines().filter(|l| l.starts_with("- ")).collect();
        let mut uniq = facts.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(
            facts.len(),
            uniq.len(),
            "{point}: repeated fact in {path}: {text}"
        );
    }

    // No job stuck.
    let q = vikingfs::queue::Queue::open(&ws.root().join(".vikingfs/queue.db")).unwrap();
    for st in q.stats().unwrap() {
        assert_eq!(
            st.outstanding(),
            0,
            "{point}: queue {} not drained: {st:?}",
            st.queue
        );
        assert_eq!(st.dead, 0, "{point}: dead jobs in {}: {st:?}", st.queue);
    }

    // What is derived agrees with the files (records, summaries, jobs, locks), and the
    // memory is findable.
    let out = ws.cmd().arg("fsck").output().unwrap();
    support::assert_ok(&out, &["fsck", point]);
    if !ws.archives("s").is_empty() {
        let hits = ws.found(&["find", "dark mode", "--json"]);
        let hits: serde_json::Value = serde_json::from_str(&hits).unwrap();
        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .any(|h| h["uri"]
                    == "viking://user/default/memories/preferences/default/dark_mode.md"),
            "{point}: find does not reach the memory: {hits}"
        );
    }

    // No lock blocks: the session and the memories can be locked at once.
    for uri in ["viking://session/s", "viking://user/default/memories"] {
        let out = ws
            .cmd()
            .args(["lock", "--tree", "--timeout", "0", uri, "--", "true"])
            .output()
            .unwrap();
        support::assert_ok(&out, &["lock --tree --timeout 0", uri]);
    }
}

macro_rules! matrix {
    ($($test:ident => $point:literal, $restart:ident, $keep:literal;)*) => {
        $(
            #[test]
            fn $test() {
                run_point($point, Restart::$restart, $keep);
            }
        )*

        /// The matrix covers every session crash point in the code.
        #[test]
        fn matrix_covers_every_session_point() {
            let mut covered = vec![$($point),*];
            covered.sort();
            covered.dedup();
            let mut all: Vec<&str> = vikingfs::failpoint::ALL
                .iter()
                .copied()
                .filter(|p| p.starts_with("session."))
                .collect();
            all.sort();
            assert_eq!(covered, all);
        }
    };
}

matrix! {
    add_before_write => "session.add.before_write", Wait, 0;
    commit_locked_then_add => "session.commit.locked", Add, 0;
    commit_locked_then_commit => "session.commit.locked", Commit, 0;
    commit_locked_then_wait => "session.commit.locked", Wait, 0;
    commit_marked_preparing_then_add => "session.commit.marked_preparing", Add, 0;
    commit_marked_preparing_then_commit => "session.commit.marked_preparing", Commit, 0;
    commit_marked_preparing_then_wait => "session.commit.marked_preparing", Wait, 0;
    commit_archive_written_then_add => "session.commit.archive_written", Add, 0;
    commit_archive_written_then_commit => "session.commit.archive_written", Commit, 0;
    commit_archive_written_then_wait => "session.commit.archive_written", Wait, 0;
    commit_enqueued_then_add => "session.commit.enqueued", Add, 0;
    commit_enqueued_then_commit => "session.commit.enqueued", Commit, 0;
    commit_enqueued_then_wait => "session.commit.enqueued", Wait, 0;
    commit_enqueued_then_job => "session.commit.enqueued", Job, 0;
    commit_marked_trimming_then_add => "session.commit.marked_trimming", Add, 0;
    commit_marked_trimming_then_commit => "session.commit.marked_trimming", Commit, 0;
    commit_marked_trimming_then_wait => "session.commit.marked_trimming", Wait, 0;
    commit_marked_trimming_then_job => "session.commit.marked_trimming", Job, 0;
    commit_trim_copied_then_add => "session.commit.trim_copied", Add, 0;
    commit_trim_copied_then_commit => "session.commit.trim_copied", Commit, 0;
    commit_trim_copied_then_wait => "session.commit.trim_copied", Wait, 0;
    commit_trim_copied_then_job => "session.commit.trim_copied", Job, 0;
    commit_trimmed_then_add => "session.commit.trimmed", Add, 0;
    commit_trimmed_then_commit => "session.commit.trimmed", Commit, 0;
    commit_trimmed_then_wait => "session.commit.trimmed", Wait, 0;
    commit_trimmed_then_job => "session.commit.trimmed", Job, 0;
    commit_ready_then_add => "session.commit.ready", Add, 0;
    commit_ready_then_commit => "session.commit.ready", Commit, 0;
    commit_ready_then_wait => "session.commit.ready", Wait, 0;
    commit_ready_then_job => "session.commit.ready", Job, 0;
    job_started_then_wait => "session.job.started", Wait, 0;
    job_started_then_commit => "session.job.started", Commit, 0;
    job_summarized_then_wait => "session.job.summarized", Wait, 0;
    job_summarized_then_commit => "session.job.summarized", Commit, 0;
    job_diff_written_then_wait => "session.job.diff_written", Wait, 0;
    job_diff_written_then_commit => "session.job.diff_written", Commit, 0;
    job_memory_written_then_wait => "session.job.memory_written", Wait, 0;
    job_memory_written_then_commit => "session.job.memory_written", Commit, 0;
    job_indexed_then_wait => "session.job.indexed", Wait, 0;
    job_indexed_then_commit => "session.job.indexed", Commit, 0;
    job_done_then_wait => "session.job.done", Wait, 0;
    job_done_then_commit => "session.job.done", Commit, 0;

    commit_locked_keeping_2_then_wait => "session.commit.locked", Wait, 2;
    commit_marked_preparing_keeping_2_then_wait => "session.commit.marked_preparing", Wait, 2;
    commit_archive_written_keeping_2_then_wait => "session.commit.archive_written", Wait, 2;
    commit_enqueued_keeping_2_then_wait => "session.commit.enqueued", Wait, 2;
    commit_marked_trimming_keeping_2_then_wait => "session.commit.marked_trimming", Wait, 2;
    commit_trim_copied_keeping_2_then_wait => "session.commit.trim_copied", Wait, 2;
    commit_trimmed_keeping_2_then_wait => "session.commit.trimmed", Wait, 2;
    commit_ready_keeping_2_then_wait => "session.commit.ready", Wait, 2;
}

#[test]
fn a_crash_point_really_aborts_the_process() {
    // Guards the matrix against a binary built without the feature (every crash would be a
    // silent success and every check trivially true).
    let ws = Ws::new();
    ws.ok(&["session", "add", "s", "user", "x"]);
    let out = Command::new(support::BIN)
        .args(["--config"])
        .arg(&ws.config)
        .arg("--workspace")
        .arg(ws.root())
        .args(["session", "commit", "s"])
        .env("VIKINGFS_CRASH_AT", "session.commit.locked")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
}
