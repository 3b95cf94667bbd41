//! The crash matrix: for every crash point, run the operation through the real `vikingfs`
//! binary with `VIKINGFS_CRASH_AT` armed, let it abort (like `kill -9`), start again, drain the
//! queues, and check that no source file was lost, every search names an existing file that
//! holds what was searched for, everything is findable again, and no lock blocks. Then
//! `fsck --repair` must leave nothing to report. Every point runs on both backends
//! (`POINT::sqlite`, `POINT::postgres`: the queue, the journal and the index on a real
//! PostgreSQL server).
//!
//! Built only with `--features failpoints` (the README's test command).

#![cfg(feature = "failpoints")]

use crate::support::{self, ops};

use ops::{Backend, Env};
use support::token;

/// What a crash point interrupts.
#[derive(Debug, Clone, Copy)]
enum Op {
    Rm,
    Mv,
    Add,
    Write,
    /// Background jobs: an add without --wait, then a drain that crashes.
    Jobs,
    /// The same with a dense model configured (the built-in `hash` one): the vectors' jobs.
    Dense,
    /// A `.vikingignore` written after the baseline was indexed: its `rederive` job.
    Rederive,
    /// The index lost (deleted) after the baseline was indexed: its rebuild from the files.
    Rebuild,
    /// A removed tree put back from the history.
    Undo,
    /// The recovery of an rm whose intent was spooled (`rm.removed`) crashing in turn.
    Replay,
}

fn op_of(point: &str) -> Op {
    match point.split('.').next().unwrap() {
        "rm" => Op::Rm,
        "mv" => Op::Mv,
        "add" => Op::Add,
        "write" => Op::Write,
        "undo" => Op::Undo,
        "intents" => Op::Replay,
        _ if point.contains("dense") || point.contains("set_vector") => Op::Dense,
        _ if point.contains("rederive") => Op::Rederive,
        "job" | "lifecycle" => Op::Jobs,
        // The index's own points: a rename is an mv's, any other write is first met by a job.
        "index" if point.starts_with("index.rename") => Op::Mv,
        "index" if point.starts_with("index.rebuild") => Op::Rebuild,
        "index" => Op::Jobs,
        other => panic!("crash point {point}: no scenario for {other:?}"),
    }
}

/// The baseline resource: `viking://resources/base` with a nested directory.
fn baseline(env: &Env, wait: bool) -> Vec<(String, String)> {
    let files = [
        ("a.md", "alpha"),
        ("b.md", "bravo"),
        ("sub/c.md", "charlie"),
        ("sub/deep/d.md", "delta"),
    ];
    let content: Vec<(&str, String)> = files
        .iter()
        .map(|(rel, tag)| {
            (
                *rel,
                format!("# {tag}\n\nThis note is about {}.\n", token(tag)),
            )
        })
        .collect();
    let local = env.local("base", &content);
    let mut args = vec![
        "add-resource",
        local.to_str().unwrap(),
        "--to",
        "viking://resources/base",
    ];
    if wait {
        args.push("--wait");
    }
    env.ok(&args);
    files
        .iter()
        .map(|(rel, tag)| (format!("viking://resources/base/{rel}"), token(tag)))
        .collect()
}

/// Run `args` with `point` armed and check that it aborted there.
fn crash(env: &Env, point: &str, args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut c = env.cmd(args);
    c.env("VIKINGFS_CRASH_AT", point)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    support::assert_crashed_at(&out, point, args);
}

/// `rm` of one indexed file crashing at `point`: afterwards the file is either there and
/// findable, or gone and named by no search.
fn rm_file(backend: Backend, point: &str) {
    let env = Env::on(backend);
    let files = baseline(&env, true);
    crash(&env, point, &["rm", "viking://resources/base/a.md"], None);
    env.drain();
    let there = env.data("resources/base/a.md").exists();
    let kept: Vec<_> = files
        .into_iter()
        .filter(|(u, _)| there || !u.ends_with("/a.md"))
        .collect();
    env.check(&kept);
    if !there {
        assert!(env
            .find(&token("alpha"), 5)
            .iter()
            .all(|(u, _)| !u.ends_with("/a.md")));
    }
}

/// Each of `files` (with the baseline's content) either absent or whole: an undo that died
/// never leaves a file partly put back (issue 43: a 0-byte file in place of the whole one).
fn whole_or_absent(env: &Env, files: &[(String, String)]) {
    for (uri, tok) in files {
        let fs = env.fs_of(uri);
        if let Ok(text) = std::fs::read_to_string(&fs) {
            let tag = text
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("# ");
            assert_eq!(
                text,
                format!("# {tag}\n\nThis note is about {tok}.\n"),
                "{uri} partly put back"
            );
        }
    }
}

fn run_point(backend: Backend, point: &str) {
    let env = Env::on(backend);
    match op_of(point) {
        Op::Rm => {
            let files = baseline(&env, true);
            crash(
                &env,
                point,
                &["rm", "-r", "viking://resources/base/sub"],
                None,
            );
            // Start again: the next process finishes the rm (or it never began).
            let again = env.run(&["rm", "-r", "viking://resources/base/sub"]);
            let sub_gone = !env.data("resources/base/sub").exists();
            assert!(
                again.status.success() || sub_gone,
                "rm again: {}",
                String::from_utf8_lossy(&again.stderr)
            );
            env.drain();
            assert!(!env.data("resources/base/sub").exists());
            let kept: Vec<_> = files
                .iter()
                .filter(|(u, _)| !u.contains("/sub/"))
                .cloned()
                .collect();
            env.check(&kept);
            assert!(env
                .find(&token("charlie"), 5)
                .iter()
                .all(|(u, _)| !u.contains("/sub")));
            // What the rm kept, recovered or not, puts the tree back whole.
            let out = env.run(&["undo", "viking://resources/base/sub"]);
            support::assert_ok(&out, &["undo after", point]);
            env.drain();
            env.check(&files);
            assert!(env
                .find(&token("charlie"), 5)
                .iter()
                .any(|(u, _)| u.ends_with("/sub/c.md")));
            // And one indexed file (an EXACT lock instead of a TREE, no scratch copy).
            rm_file(backend, point);
        }
        Op::Replay => {
            let files = baseline(&env, true);
            let sub = "viking://resources/base/sub";
            // The tree is in the history, its intent in the dead process's spool...
            crash(&env, "rm.removed", &["rm", "-r", sub], None);
            // ...which the next recovery journals, and dies before deleting the spool.
            crash(&env, point, &["wait", "--timeout", "120"], None);
            // The one after that finishes the rm once: one history entry, not two.
            env.drain();
            assert!(!env.data("resources/base/sub").exists());
            let kept: Vec<_> = files
                .iter()
                .filter(|(u, _)| !u.contains("/sub/"))
                .cloned()
                .collect();
            env.check(&kept);
            let spools = env.ws().join(".vikingfs/intents");
            let left = std::fs::read_dir(&spools).map_or(0, |d| d.count());
            assert_eq!(left, 0, "spool files left in {}", spools.display());
            let h: serde_json::Value =
                serde_json::from_str(&env.ok(&["history", sub, "--json"])).unwrap();
            let rms: Vec<_> = h
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["op"] == "rm" && e["path"] == "resources/base/sub")
                .collect();
            assert_eq!(rms.len(), 1, "{h:#}");
            let out = env.run(&["undo", sub]);
            support::assert_ok(&out, &["undo after", point]);
            env.drain();
            env.check(&files);
        }
        Op::Undo => {
            let files = baseline(&env, true);
            let sub = "viking://resources/base/sub";
            let out = env.run(&["rm", "-r", sub]);
            support::assert_ok(&out, &["rm before undo"]);
            env.drain();
            crash(&env, point, &["undo", sub], None);
            // What the crash left: each file absent or whole, never a part of it.
            whole_or_absent(&env, &files);
            if point == "undo.made" {
                // Every process finishes a dead one's undo when it opens the workspace; one
                // that cannot (here the directory is immutable: EPERM, root or not) leaves
                // it for fsck to name: the undo and its temporary.
                let base = env.data("resources/base");
                let chattr = |flag: &str| {
                    std::process::Command::new("chattr")
                        .arg(flag)
                        .arg(&base)
                        .status()
                        .is_ok_and(|s| s.success())
                };
                if chattr("+i") {
                    let out = env.run(&["fsck"]);
                    assert!(chattr("-i"));
                    let said = String::from_utf8_lossy(&out.stdout);
                    assert!(
                        said.contains(&format!("interrupted operation: undo {sub}"))
                            && said.contains("half-done restore (undo) left: "),
                        "fsck after a crash at {point}: {said}"
                    );
                } else {
                    eprintln!("skipped fsck's view: chattr +i refused on this filesystem");
                }
            }
            // The next start finishes it: every file back, whole, found again.
            env.drain();
            env.check(&files);
            assert!(env
                .find(&token("delta"), 5)
                .iter()
                .any(|(u, _)| u.ends_with("/sub/deep/d.md")));
            // Nothing is left half-done, and an undo again has nothing left to put back.
            let out = env.run(&["fsck"]);
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                !said.contains("undo") && !said.contains("half-done"),
                "{said}"
            );
            let again = env.run(&["undo", sub]);
            assert!(
                matches!(again.status.code(), Some(0 | 1)),
                "undo again: {}",
                String::from_utf8_lossy(&again.stderr)
            );
            env.check(&files);

            // A rewind of two removals (two commands: a file, then a tree), crashing at the
            // same point: between the two versions for `undo.made` and `undo.placed`.
            let env = Env::on(backend);
            let files = baseline(&env, true);
            std::thread::sleep(std::time::Duration::from_millis(20));
            let t = jiff::Timestamp::now().to_string();
            std::thread::sleep(std::time::Duration::from_millis(20));
            env.ok(&["rm", "viking://resources/base/a.md"]);
            env.ok(&["rm", "-r", sub]);
            env.drain();
            let base = "viking://resources/base";
            crash(&env, point, &["undo", "--since", &t, base], None);
            whole_or_absent(&env, &files);
            env.drain();
            env.check(&files);
            let out = env.run(&["fsck"]);
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(!said.contains("undo"), "{said}");
        }
        Op::Mv => {
            let files = baseline(&env, true);
            crash(
                &env,
                point,
                &[
                    "mv",
                    "viking://resources/base/sub",
                    "viking://resources/moved",
                ],
                None,
            );
            env.drain();
            // Either the move happened as a whole, or not at all.
            let (at_src, at_dst) = (
                env.data("resources/base/sub").exists(),
                env.data("resources/moved").exists(),
            );
            assert!(at_src != at_dst, "src {at_src}, dst {at_dst}");
            let files: Vec<_> = files
                .into_iter()
                .map(|(u, t)| {
                    if at_dst && u.contains("/base/sub/") {
                        (u.replace("/base/sub/", "/moved/"), t)
                    } else {
                        (u, t)
                    }
                })
                .collect();
            env.check(&files);
            // And it can be finished or redone.
            if at_src {
                env.ok(&[
                    "mv",
                    "viking://resources/base/sub",
                    "viking://resources/moved",
                ]);
                env.drain();
            }
            let files: Vec<_> = files
                .into_iter()
                .map(|(u, t)| (u.replace("/base/sub/", "/moved/"), t))
                .collect();
            env.check(&files);
        }
        Op::Add => {
            let mut files = baseline(&env, true);
            let local = env.local(
                "fresh",
                &[
                    ("e.md", format!("echo {}", token("echo"))),
                    ("f/g.md", format!("golf {}", token("golf"))),
                ],
            );
            let to = "viking://resources/fresh";
            crash(
                &env,
                point,
                &["add-resource", local.to_str().unwrap(), "--to", to],
                None,
            );
            env.drain();
            // Start again: the add completes (an update when recovery already finished it).
            env.add_waited(&local, to);
            files.push((format!("{to}/e.md"), token("echo")));
            files.push((format!("{to}/f/g.md"), token("golf")));
            env.check(&files);
            env.check_repair();
        }
        Op::Write => {
            let files = baseline(&env, true);
            let uri = "viking://resources/base/a.md";
            let new = format!("rewritten: {}", token("hotel"));
            crash(&env, point, &["write", uri], Some(&new));
            env.drain();
            // The file holds the old or the new content, never a torn one, and is findable
            // by whichever it holds.
            let text = std::fs::read_to_string(env.fs_of(uri)).unwrap();
            let mut now = files.clone();
            if text == new {
                now[0].1 = token("hotel");
            } else {
                assert!(text.contains(&token("alpha")), "torn write: {text:?}");
            }
            env.check(&now);
            let out = {
                use std::io::Write;
                let mut c = env.cmd(&["write", uri]);
                c.stdin(std::process::Stdio::piped());
                let mut ch = c.spawn().unwrap();
                ch.stdin.take().unwrap().write_all(new.as_bytes()).unwrap();
                ch.wait().unwrap()
            };
            assert!(out.success());
            env.drain();
            now[0].1 = token("hotel");
            // `check` found a.md by its new token, and fsck says its record is current.
            env.check(&now);
        }
        Op::Jobs => {
            let files = baseline(&env, false);
            crash(&env, point, &["wait", "--timeout", "120"], None);
            env.drain();
            env.check(&files);
            env.check_repair();
        }
        Op::Rederive => {
            let files = baseline(&env, true);
            let mut c = env.cmd(&["write", "viking://resources/base/.vikingignore"]);
            c.stdin(std::process::Stdio::piped());
            let mut ch = c.spawn().unwrap();
            {
                use std::io::Write;
                ch.stdin.take().unwrap().write_all(b"sub/\n").unwrap();
            }
            assert!(ch.wait().unwrap().success());
            crash(&env, point, &["wait", "--timeout", "120"], None);
            env.drain();
            // What the rule keeps is found; what it ignores is named by no search, and has
            // no summaries left.
            let kept: Vec<_> = files
                .iter()
                .filter(|(u, _)| !u.contains("/sub/"))
                .cloned()
                .collect();
            env.check(&kept);
            for t in ["charlie", "delta"] {
                let hits = env.find(&token(t), 5);
                assert!(hits.iter().all(|(u, _)| !u.contains("/sub")), "{hits:?}");
            }
            assert!(!env.data("resources/base/sub/.abstract.md").exists());
            assert!(!env.data("resources/base/sub/deep/.overview.md").exists());
            env.check_repair();
        }
        Op::Rebuild => {
            let files = baseline(&env, true);
            env.lose_index();
            // The next command to open the engine rebuilds the index, and dies midway.
            crash(&env, point, &["wait", "--timeout", "120"], None);
            // The one after finds the rebuild unfinished and does it again.
            env.drain();
            env.check(&files);
            env.check_repair();
        }
        Op::Dense => {
            env.use_dense_model();
            let files = baseline(&env, false);
            crash(&env, point, &["wait", "--timeout", "120"], None);
            env.drain();
            env.check(&files);
            // Every record got its vector, after all.
            let v: serde_json::Value =
                serde_json::from_str(&env.ok(&["status", "--json"])).unwrap();
            let ix = &v["index"];
            assert!(ix["records"].as_u64().unwrap() > 0, "{ix}");
            assert_eq!(ix["vectors"], ix["records"], "{ix}");
            assert_eq!(ix["lexical"], ix["records"], "{ix}");
            env.check_repair();
        }
    }
}

macro_rules! matrix {
    ($($test:ident => $point:literal,)*) => {
        // `$test::sqlite` and `$test::postgres`.
        crate::support::backend::backends!(
            $($test => |backend| run_point(backend, $point)),*
        );

        /// The matrix covers exactly the crash points the binary lists.
        #[test]
        fn covers_every_crash_point() {
            let env = Env::new();
            let listed = env.ok(&["debug", "failpoints"]);
            // `session.*` points have their own matrix (tests/session/session_crash.rs),
            // `spool.*` points (the mount daemon's) theirs (tests/queue/queue_spool.rs,
            // tests/mount/mount_crash.rs), `migrate.*` points theirs (tests/ops/migrate.rs:
            // the operation is the move of every store, not one on a workspace's files),
            // `history.kept` and `rollback.*` theirs (tests/ops/ops_write.rs,
            // tests/session/session_extract.rs: an overwrite's kept version, a rollback).
            let mut listed: Vec<&str> = listed
                .lines()
                .filter(|p| {
                    !p.starts_with("session.")
                        && !p.starts_with("spool.")
                        && !p.starts_with("migrate.")
                        && !p.starts_with("history.")
                        && !p.starts_with("rollback.")
                })
                .collect();
            listed.sort();
            let mut tested = vec![$($point),*];
            tested.sort();
            assert_eq!(listed, tested);
        }
    };
}

matrix! {
    index_rename_between_passes => "index.rename.between_passes",
    index_write_before_commit => "index.write.before_commit",
    index_set_vector_before_commit => "index.set_vector.before_commit",
    job_dense_computed => "job.dense.computed",
    job_dense_record_written => "job.dense.record_written",
    index_rebuild_file => "index.rebuild.file",
    add_staged => "add.staged",
    add_locked => "add.locked",
    add_synced => "add.synced",
    add_enqueued => "add.enqueued",
    add_unstaged => "add.unstaged",
    job_embed_start => "job.embed.start",
    job_embed_computed => "job.embed.computed",
    job_embed_indexed => "job.embed.indexed",
    job_semantic_start => "job.semantic.start",
    job_rederive_start => "job.rederive.start",
    job_rederive_underived => "job.rederive.underived",
    job_semantic_computed => "job.semantic.computed",
    job_semantic_written => "job.semantic.written",
    job_semantic_propagated => "job.semantic.propagated",
    job_semantic_indexed => "job.semantic.indexed",
    lifecycle_before_release => "lifecycle.before_release",
    mv_locked => "mv.locked",
    mv_intent => "mv.intent",
    mv_renamed => "mv.renamed",
    mv_indexed => "mv.indexed",
    rm_locked => "rm.locked",
    rm_intent => "rm.intent",
    rm_index_deleted => "rm.index_deleted",
    rm_removed => "rm.removed",
    intents_replayed => "intents.replayed",
    write_locked => "write.locked",
    write_enqueued => "write.enqueued",
    write_written => "write.written",
    undo_planned => "undo.planned",
    undo_made => "undo.made",
    undo_placed => "undo.placed",
    undo_restored => "undo.restored",
}
