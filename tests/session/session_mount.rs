//! Appenders through a real vikingfs mount race repeated commits: `echo ... >> messages.jsonl`
//! from several processes, and one process that keeps the file open with `O_APPEND` across
//! every commit. A checker proves every line lands exactly once across the archives and the
//! live file — so commits cut the live file in place (a rename would strand the open
//! descriptor's writes) and the mount appends at the real end of the file, not at the size
//! the kernel cached before a commit shrank it.
//!
//! The appenders are plain shell redirections: the mount takes the file's EXACT lock around
//! each write to a session log itself, so a commit's TREE lock excludes them.

use crate::support::{self, daemon, session};

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use daemon::Mount;
use session::content_of;

const MOUNT_APPENDERS: usize = 3;
const PER_APPENDER: usize = 40;
const HELD_LINES: usize = 40;
const COMMITS: usize = 15;

#[test]
fn mount_appenders_race_commits_and_no_line_is_lost_or_duplicated() {
    let m = Mount::new();
    let cli = |args: &[&str]| {
        let out = support::vikingfs(m.dir.path())
            .arg("--workspace")
            .arg(&m.ws)
            .args(args)
            .output()
            .unwrap();
        support::assert_ok(&out, args);
    };
    cli(&["session", "add", "mnt", "system", "start"]);
    let file = m.mp.join("user/default/sessions/mnt/messages.jsonl");
    assert!(file.is_file(), "the session is visible through the mount");

    let mut children = Vec::new();
    for a in 0..MOUNT_APPENDERS {
        let script = format!(
            "while [ ! -e \"$3\" ]; do sleep 0.01; done; for i in $(seq 0 {}); do printf '%s\\n' \"{{\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"m{a}-$i\\\"}}\" >> \"$0\" || exit 1; done",
            PER_APPENDER - 1
        );
        children.push(spawn(&m, &script, &file));
    }
    let held = format!(
        "exec 3>>\"$0\"; while [ ! -e \"$3\" ]; do sleep 0.01; done; for i in $(seq 0 {}); do printf '%s\\n' \"{{\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"held-$i\\\"}}\" >&3 || exit 1; done",
        HELD_LINES - 1
    );
    children.push(spawn(&m, &held, &file));
    let commits = format!(
        "for i in $(seq 1 {COMMITS}); do \"$0\" --workspace \"$1\" session commit mnt >/dev/null || exit 1; done"
    );
    let mut c = Command::new("sh");
    c.args(["-c", &commits, support::BIN, m.ws.to_str().unwrap()])
        .env("HOME", m.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    children.push(c.spawn().unwrap());
    for c in children {
        let out = c.wait_with_output().unwrap();
        support::assert_ok(&out, &["(racing process)"]);
    }
    cli(&["session", "commit", "mnt", "--wait"]);

    // Read back through the backing files (the truth).
    let sdir = m.ws.join("viking/default/user/default/sessions/mnt");
    let mut all: Vec<String> = Vec::new();
    let mut archives: Vec<_> = std::fs::read_dir(sdir.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("archive_")
        })
        .collect();
    archives.sort();
    for a in &archives {
        all.extend(session::lines(
            &std::fs::read_to_string(a.join("messages.jsonl")).unwrap(),
        ));
    }
    let live = session::lines(&std::fs::read_to_string(sdir.join("messages.jsonl")).unwrap());
    assert!(live.is_empty(), "{live:?}");
    assert!(
        all.iter().all(|l| !l.contains('\0')),
        "no hole from a write at a stale offset"
    );
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in &all {
        *seen.entry(content_of(l)).or_default() += 1;
    }
    let mut expected = vec!["start".to_string()];
    for a in 0..MOUNT_APPENDERS {
        expected.extend((0..PER_APPENDER).map(|i| format!("m{a}-{i}")));
    }
    expected.extend((0..HELD_LINES).map(|i| format!("held-{i}")));
    for e in &expected {
        assert_eq!(seen.get(e), Some(&1), "line {e:?} must appear exactly once");
    }
    assert_eq!(all.len(), expected.len());
    assert!(archives.len() >= 2, "commits interleaved with the appends");
}

/// `sh -c SCRIPT FILE VIKINGFS WORKSPACE FIRST_ARCHIVE`: appenders start once the first commit
/// archived something, so later commits certainly race them.
fn spawn(m: &Mount, script: &str, file: &std::path::Path) -> std::process::Child {
    Command::new("sh")
        .args(["-c", script])
        .arg(file)
        .arg(support::BIN)
        .arg(&m.ws)
        .arg(
            m.ws.join(
                "viking/default/user/default/sessions/mnt/history/archive_001/messages.jsonl",
            ),
        )
        .env("HOME", m.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
