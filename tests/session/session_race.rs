//! Appenders in several processes race repeated commits of the same session; a checker proves
//! that every line ends up exactly once across the archives and the live file, in each
//! appender's order.
//!
//! Appenders: `vikingfs session add` processes, and a foreign writer — a shell that opened the
//! backing file once with `O_APPEND` (`exec 3>>`) and writes each line through that descriptor
//! while `vikingfs lock` holds the file's EXACT lock (valid and invalid lines), as the mount's
//! write path does. Its lines survive only if commits cut the live file in place: a file
//! replaced by rename would swallow them into an unlinked inode.

use crate::support::{self, session};

use std::collections::BTreeMap;
use std::process::Stdio;

use session::{content_of, Ws};

const CLI_APPENDERS: usize = 3;
const PER_APPENDER: usize = 40;
const RAW_LINES: usize = 30;
const COMMITS: usize = 20;

#[test]
fn appenders_race_commits_and_no_line_is_lost_or_duplicated() {
    let ws = Ws::new();
    ws.ok(&["session", "add", "race", "system", "start"]);
    let live_file = ws.session_dir("race").join("messages.jsonl");

    let mut children = Vec::new();
    for a in 0..CLI_APPENDERS {
        // One shell loop per appender: its lines are sent in order, each by its own process.
        let script = format!(
            "for i in $(seq 0 {}); do \"$0\" --config \"$1\" --workspace \"$2\" session add race user \"a{a}-$i\" || exit 1; done",
            PER_APPENDER - 1
        );
        children.push(spawn_sh(&ws, &script));
    }
    let raw = format!(
        "exec 3>>\"{file}\"; for i in $(seq 0 {last}); do \
           if [ $((i % 5)) -eq 4 ]; then line=\"not json raw-$i\"; else line=\"{{\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"raw-$i\\\"}}\"; fi; \
           \"$0\" --config \"$1\" --workspace \"$2\" lock --timeout 60 viking://session/race/messages.jsonl -- sh -c 'printf \"%s\\n\" \"$1\" >&3' sh \"$line\" || exit 1; \
         done",
        last = RAW_LINES - 1,
        file = live_file.display()
    );
    children.push(spawn_sh(&ws, &raw));
    let commits = format!(
        "for i in $(seq 1 {COMMITS}); do \"$0\" --config \"$1\" --workspace \"$2\" session commit race || exit 1; done"
    );
    children.push(spawn_sh(&ws, &commits));

    for c in children {
        let out = c.wait_with_output().unwrap();
        support::assert_ok(&out, &["(racing process)"]);
    }
    // One last commit with nobody appending, then phase 2 for every archive.
    ws.ok(&["session", "commit", "race", "--wait"]);
    // `commit --wait` is for its own archive; the racers' commits' phase 2 runs in `wait`.
    ws.ok(&["wait", "--timeout", "300"]);

    let all = ws.all_lines("race");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in &all {
        *seen.entry(content_of(l)).or_default() += 1;
    }
    let mut expected = vec!["start".to_string()];
    for a in 0..CLI_APPENDERS {
        expected.extend((0..PER_APPENDER).map(|i| format!("a{a}-{i}")));
    }
    for i in 0..RAW_LINES {
        expected.push(if i % 5 == 4 {
            format!("not json raw-{i}")
        } else {
            format!("raw-{i}")
        });
    }
    for e in &expected {
        assert_eq!(seen.get(e), Some(&1), "line {e:?} must appear exactly once");
    }
    assert_eq!(
        all.len(),
        expected.len(),
        "no line appears that nobody wrote"
    );
    assert!(
        ws.live("race").is_empty(),
        "the last commit archived everything"
    );

    // Each appender's lines keep their order across archives.
    for a in 0..CLI_APPENDERS {
        let order: Vec<usize> = all
            .iter()
            .map(|l| content_of(l))
            .filter_map(|c| {
                c.strip_prefix(&format!("a{a}-"))
                    .map(|n| n.parse().unwrap())
            })
            .collect();
        assert_eq!(order, (0..PER_APPENDER).collect::<Vec<_>>(), "appender {a}");
    }

    // Several commits really interleaved with the appends, and every archive finished phase 2.
    let archives = ws.archives("race");
    assert!(archives.len() >= 2, "commits ran while appenders appended");
    for n in archives.keys() {
        let dir = ws
            .session_dir("race")
            .join(format!("history/archive_{n:03}"));
        for f in [".done", ".abstract.md", ".overview.md", "memory_diff.json"] {
            assert!(dir.join(f).is_file(), "archive_{n:03} lacks {f}");
        }
    }
    let invalid: u64 = archives
        .keys()
        .map(|n| {
            let d: serde_json::Value = serde_json::from_slice(
                &std::fs::read(
                    ws.session_dir("race")
                        .join(format!("history/archive_{n:03}/memory_diff.json")),
                )
                .unwrap(),
            )
            .unwrap();
            d["summary"]["invalid_lines"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        invalid as usize,
        RAW_LINES / 5,
        "invalid lines are reported, never dropped"
    );
}

fn spawn_sh(ws: &Ws, script: &str) -> std::process::Child {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(support::BIN)
        .arg(&ws.config)
        .arg(ws.root())
        .env("HOME", ws.dir.path())
        .env_remove("VIKINGFS_CRASH_AT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
