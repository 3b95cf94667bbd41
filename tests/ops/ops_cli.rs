//! rm, mv, add-resource, write and fsck through the real `vikingfs` binary.

use crate::support::{self, ops};

use std::os::unix::fs::MetadataExt;

use ops::Env;
use support::{files_under, token};

fn note(tag: &str) -> String {
    format!("# {tag}\n\nThis note is about {}.\n", token(tag))
}

/// A resource `viking://resources/base` (a.md, b.md, sub/c.md), processed.
fn base(env: &Env) -> Vec<(String, String)> {
    let local = env.local(
        "base",
        &[
            ("a.md", note("alpha")),
            ("b.md", note("bravo")),
            ("sub/c.md", note("charlie")),
        ],
    );
    env.add_waited(&local, "viking://resources/base");
    ["a.md:alpha", "b.md:bravo", "sub/c.md:charlie"]
        .iter()
        .map(|s| {
            let (rel, tag) = s.split_once(':').unwrap();
            (format!("viking://resources/base/{rel}"), token(tag))
        })
        .collect()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn rm_removes_records_and_files() {
    let env = Env::new();
    let files = base(&env);
    env.check(&files);

    let out = env.run(&["rm", "viking://resources/base/sub"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("is a directory"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(stderr_of(&out).lines().count(), 1);

    env.ok(&["rm", "viking://resources/base/a.md"]);
    assert!(!env.data("resources/base/a.md").exists());
    env.ok(&["rm", "-r", "viking://resources/base/sub"]);
    assert!(!env.data("resources/base/sub").exists());
    env.drain();
    for (_, t) in &files[..1] {
        assert!(env.find(t, 5).iter().all(|(u, _)| !u.ends_with("a.md")));
    }
    env.check(&files[1..2]);

    for (args, msg) in [
        (
            vec!["rm", "viking://resources/base/nope.md"],
            "no such file",
        ),
        (vec!["rm", "-r", "viking://resources"], "scope root"),
        (
            vec!["rm", "viking://resources/base/.abstract.md"],
            "derived",
        ),
        (vec!["rm", "viking://resources/../etc"], ".."),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert!(err.contains(msg), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn rm_of_a_resource_being_processed_is_busy() {
    let env = Env::new();
    let local = env.local("res", &[("x.md", note("xray")), ("y/z.md", note("zulu"))]);
    let uri = env.ok(&["add-resource", local.to_str().unwrap()]);
    assert_eq!(uri.trim(), "viking://resources/res");
    // The lifecycle lock outlives the CLI that took it.
    let out = env.run(&["rm", "-r", "viking://resources/res"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("busy"));
    let out = env.run(&["rm", "viking://resources/res/x.md"]);
    assert_eq!(out.status.code(), Some(75));
    assert!(env.data("resources/res/x.md").exists());
    // Once every summary and embedding is done, the lock is gone.
    env.drain();
    env.check(&[
        ("viking://resources/res/x.md".into(), token("xray")),
        ("viking://resources/res/y/z.md".into(), token("zulu")),
    ]);
    env.ok(&["rm", "-r", "viking://resources/res"]);
}

#[test]
fn add_names_with_suffixes_when_taken() {
    let env = Env::new();
    let dir = env.local("docs", &[("d.md", note("delta"))]);
    let file = env.dir.path().join("local/one.md");
    std::fs::write(&file, note("oscar")).unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            env.ok(&["add-resource", dir.to_str().unwrap()])
                .trim()
                .to_string(),
        );
    }
    for _ in 0..2 {
        got.push(
            env.ok(&["add-resource", file.to_str().unwrap()])
                .trim()
                .to_string(),
        );
    }
    assert_eq!(
        got,
        [
            "viking://resources/docs",
            "viking://resources/docs_1",
            "viking://resources/docs_2",
            "viking://resources/one.md",
            "viking://resources/one_1.md",
        ]
    );
    env.drain();
    assert_eq!(
        std::fs::read_to_string(env.data("resources/one_1.md")).unwrap(),
        note("oscar")
    );
    // A new name is said, with OpenViking's warning and tip; the first add says nothing.
    let out = env.run(&["add-resource", dir.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "'viking://resources/docs' already exists. Creating 'viking://resources/docs_3'. \
             Tip: Use --to <path> to specify exact target."
        ),
        "{err}"
    );
    let fresh = env.local("fresh", &[("f.md", note("foxtrot"))]);
    let out = env.run(&["add-resource", fresh.to_str().unwrap()]);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.drain();
    env.check_no_lock_blocks();
}

#[test]
fn add_updates_incrementally() {
    let env = Env::new();
    let files = base(&env);
    let b_ino = std::fs::metadata(env.data("resources/base/b.md"))
        .unwrap()
        .ino();
    let local = env.dir.path().join("local/base");
    std::fs::write(local.join("a.md"), note("amended")).unwrap();
    std::fs::remove_dir_all(local.join("sub")).unwrap();
    std::fs::write(local.join("new.md"), note("novel")).unwrap();
    env.add_waited(&local, "viking://resources/base");

    assert_eq!(
        files_under(&env.data("resources/base")),
        files_under(&local)
    );
    // Unchanged files are left alone (same inode: not rewritten, not re-embedded).
    assert_eq!(
        std::fs::metadata(env.data("resources/base/b.md"))
            .unwrap()
            .ino(),
        b_ino
    );
    env.check(&[
        ("viking://resources/base/a.md".into(), token("amended")),
        files[1].clone(),
        ("viking://resources/base/new.md".into(), token("novel")),
    ]);
    assert!(env
        .find(&token("charlie"), 10)
        .iter()
        .all(|(u, _)| !u.contains("/sub")));
}

#[test]
fn add_refuses_bad_sources_and_adds_nothing() {
    let env = Env::new();
    let bad = env.local(
        "bad",
        &[("ok.md", note("okay")), (".path.ovlock", "x".into())],
    );
    let missing = env.dir.path().join("nope");
    for (path, msg) in [
        (bad.to_str().unwrap().to_string(), "internal name"),
        (missing.to_str().unwrap().to_string(), "No such file"),
    ] {
        let out = env.run(&["add-resource", &path]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr_of(&out);
        assert!(err.contains(msg), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert!(files_under(&env.data("resources")).is_empty());
    assert!(std::fs::read_dir(env.ws().join(".vikingfs/tmp"))
        .unwrap()
        .next()
        .is_none());
    env.check_no_lock_blocks();
}

#[test]
fn mv_moves_files_and_records_without_copying() {
    let env = Env::new();
    let files = base(&env);
    let ino = std::fs::metadata(env.data("resources/base/sub/c.md"))
        .unwrap()
        .ino();
    env.ok(&[
        "mv",
        "viking://resources/base/sub",
        "viking://resources/elsewhere",
    ]);
    assert_eq!(
        std::fs::metadata(env.data("resources/elsewhere/c.md"))
            .unwrap()
            .ino(),
        ino,
        "rename(2), not a copy"
    );
    // Findable at the new name at once (records moved with the files), before any job runs.
    let hits = env.find(&token("charlie"), 5);
    assert_eq!(
        hits.iter().find(|h| h.1 == 2).unwrap().0,
        "viking://resources/elsewhere/c.md"
    );
    env.ok(&[
        "mv",
        "viking://resources/base/a.md",
        "viking://resources/elsewhere",
    ]);
    env.drain();
    env.check(&[
        (
            "viking://resources/elsewhere/a.md".into(),
            files[0].1.clone(),
        ),
        files[1].clone(),
        (
            "viking://resources/elsewhere/c.md".into(),
            files[2].1.clone(),
        ),
    ]);
    for (args, msg) in [
        (
            vec![
                "mv",
                "viking://resources/elsewhere",
                "viking://resources/elsewhere/x",
            ],
            "into itself",
        ),
        (
            vec!["mv", "viking://resources/nope", "viking://resources/x"],
            "no such file",
        ),
        (
            vec![
                "mv",
                "viking://resources/base/b.md",
                "viking://resources/elsewhere/a.md",
            ],
            "already exists",
        ),
        (
            vec!["mv", "viking://resources", "viking://agent/r"],
            "scope root",
        ),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr_of(&out).contains(msg),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
}

#[test]
fn write_indexes_the_new_content() {
    let env = Env::new();
    let files = base(&env);
    let mut c = env.cmd(&["write", "viking://resources/base/sub/new.md"]);
    c.stdin(std::process::Stdio::piped());
    let mut ch = c.spawn().unwrap();
    use std::io::Write;
    ch.stdin
        .take()
        .unwrap()
        .write_all(note("whiskey").as_bytes())
        .unwrap();
    assert!(ch.wait().unwrap().success());
    // Rewritten, not yet re-indexed: missed, never found for the words it lost.
    let mut c = env.cmd(&["write", "viking://resources/base/a.md"]);
    c.stdin(std::process::Stdio::piped());
    let mut ch = c.spawn().unwrap();
    ch.stdin
        .take()
        .unwrap()
        .write_all(note("yankee").as_bytes())
        .unwrap();
    assert!(ch.wait().unwrap().success());
    assert!(env
        .find(&token("alpha"), 10)
        .iter()
        .all(|(u, _)| u != "viking://resources/base/a.md"));
    let out = env.run(&["write", "viking://resources/nodir/x.md"]);
    assert!(
        stderr_of(&out).contains("no such file"),
        "{}",
        stderr_of(&out)
    );
    env.drain();
    let mut all = files.clone();
    all[0].1 = token("yankee");
    all.push((
        "viking://resources/base/sub/new.md".into(),
        token("whiskey"),
    ));
    env.check(&all);
    // The directory's summary was regenerated and names the new file.
    let ov = std::fs::read_to_string(env.data("resources/base/sub/.overview.md")).unwrap();
    assert!(ov.contains("new.md"), "{ov}");
}

#[test]
fn summaries_are_written_bounded_and_indexed() {
    let env = Env::new();
    let long = format!("# Long\n\n{}", "words and more words. ".repeat(2000));
    let local = env.local(
        "sum",
        &[
            ("long.md", long),
            ("d1/x.md", note("x1")),
            ("d1/d2/y.md", note("y2")),
        ],
    );
    env.ok(&["add-resource", local.to_str().unwrap(), "--wait"]);
    for dir in [
        "resources",
        "resources/sum",
        "resources/sum/d1",
        "resources/sum/d1/d2",
    ] {
        let abs = std::fs::read_to_string(env.data(dir).join(".abstract.md"))
            .unwrap_or_else(|e| panic!("{dir}/.abstract.md: {e}"));
        let ov = std::fs::read_to_string(env.data(dir).join(".overview.md")).unwrap();
        assert!(
            !abs.is_empty() && abs.chars().count() <= 256,
            "{dir}: {abs:?}"
        );
        assert!(
            !ov.is_empty() && ov.chars().count() <= 4000,
            "{dir}: {}",
            ov.len()
        );
    }
    // The parent's summary talks about its child directory (propagation).
    let ov = std::fs::read_to_string(env.data("resources/sum/d1/.overview.md")).unwrap();
    assert!(ov.contains("d2"), "{ov}");
    let out = env.run(&["fsck", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn summary_keywords_are_weighed_against_the_workspace() {
    let env = Env::new();
    let (common, rare) = (token("common-word"), token("rare-word"));
    // Elsewhere in the workspace, every file speaks of `common`.
    let elsewhere: Vec<(String, String)> = (0..12)
        .map(|i| (format!("n{i}.md"), format!("# Note {i}\n\nOn {common}.\n")))
        .collect();
    let refs: Vec<(&str, String)> = elsewhere
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let other = env.local("other", &refs);
    env.ok(&["add-resource", other.to_str().unwrap(), "--wait"]);
    // Here `common` is written more often than `rare`: alone, it would be the first keyword.
    let text = format!("{common} {common} {common} and {rare} {rare}.\n");
    let local = env.local("topic", &[("a.md", text.clone()), ("b.md", text)]);
    env.ok(&["add-resource", local.to_str().unwrap(), "--wait"]);
    let abs = std::fs::read_to_string(env.data("resources/topic/.abstract.md")).unwrap();
    let keywords = abs.split_once("Keywords: ").map_or("", |(_, k)| k);
    assert!(keywords.contains(&rare), "{abs}");
    assert!(
        !keywords.contains(&common),
        "common in the workspace: {abs}"
    );
}

#[test]
fn fsck_finds_and_repairs_derived_state_only() {
    let env = Env::new();
    let files = base(&env);
    // Behind vikingfs's back: a file removed, a file added, a dead owner's lock, a leftover
    // staging directory and temp file.
    std::fs::remove_file(env.data("resources/base/b.md")).unwrap();
    std::fs::write(env.data("resources/base/sub/extra.md"), note("extra")).unwrap();
    std::fs::write(
        env.data("resources/base/.exact.ovlock.a.md.0123456789abcdef"),
        "vfs-000000000000-999999-1-1:1:E",
    )
    .unwrap();
    std::fs::create_dir_all(env.ws().join(".vikingfs/tmp/add-999999999-dead/data")).unwrap();
    let before = files_under(&env.data("resources"));

    let out = env.run(&["fsck"]);
    assert_eq!(out.status.code(), Some(4));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    for want in [
        "record without its source: viking://resources/base/b.md",
        "file without a record: viking://resources/base/sub/extra.md",
        "stale lock",
        "leftover scratch",
    ] {
        assert!(report.contains(want), "missing {want:?} in:\n{report}");
    }
    env.check_repair();
    assert_eq!(
        files_under(&env.data("resources")),
        before,
        "repair never touches sources"
    );
    env.check(&[
        files[0].clone(),
        files[2].clone(),
        (
            "viking://resources/base/sub/extra.md".into(),
            token("extra"),
        ),
    ]);
}

#[test]
fn concurrent_adds_of_one_name_get_distinct_targets() {
    let env = Env::new();
    let local = env.local(
        "same",
        &[("s.md", note("sierra")), ("t/u.md", note("uniform"))],
    );
    env.ok(&["config", "show"]);
    let children: Vec<_> = (0..4)
        .map(|_| {
            env.cmd(&["add-resource", local.to_str().unwrap()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut targets: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", stderr_of(&out));
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            "viking://resources/same",
            "viking://resources/same_1",
            "viking://resources/same_2",
            "viking://resources/same_3",
        ]
    );
    for t in &targets {
        assert_eq!(files_under(&env.fs_of(t)), files_under(&local), "{t}");
    }
    env.drain();
    env.check_no_lock_blocks();
    env.check_fsck_clean();
}

#[test]
fn several_worker_processes_share_one_lifecycle() {
    let env = Env::new();
    let files: Vec<(String, String)> = (0..30)
        .map(|i| (format!("d{}/n{i}.md", i % 3), note(&format!("kilo{i}"))))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(r, t)| (r.as_str(), t.clone())).collect();
    let local = env.local("shared", &refs);
    env.ok(&["add-resource", local.to_str().unwrap()]);
    let workers: Vec<_> = (0..3)
        .map(|_| {
            env.cmd(&["wait", "--timeout", "120"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
    }
    env.drain();
    let want: Vec<(String, String)> = (0..30)
        .map(|i| {
            (
                format!("viking://resources/shared/d{}/n{i}.md", i % 3),
                token(&format!("kilo{i}")),
            )
        })
        .collect();
    env.check(&want);
    env.ok(&["rm", "-r", "viking://resources/shared"]);
}

/// `vikingfs write` replaces a file whole and keeps its mode (it went 600 → 644 when the
/// temporary was made with the default mode); a new file gets 0666 less the caller's umask.
#[test]
fn write_keeps_the_mode_of_the_file_it_replaces() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    base(&env);
    let a = env.data("resources/base/a.md");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
    let write = |uri: &str, text: &str| {
        let mut c = env.cmd(&["write", uri]);
        c.stdin(std::process::Stdio::piped());
        let mut ch = c.spawn().unwrap();
        ch.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(ch.wait().unwrap().success());
    };
    write("viking://resources/base/a.md", "new content\n");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "new content\n");
    assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o7777, 0o600);
    write("viking://resources/base/fresh.md", "fresh\n");
    let mode = std::fs::metadata(env.data("resources/base/fresh.md"))
        .unwrap()
        .mode();
    // SAFETY: umask is read and put back at once; the test's other threads create no files.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    assert_eq!(mode & 0o7777, 0o666 & !umask);
    let leftovers: Vec<_> = std::fs::read_dir(env.data("resources/base"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".vikingfs.tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A one-shot locked operation runs on the stores as they are: `vikingfs rm` from a shell
/// whose configuration names no model (or another one) neither loads a model nor drops the
/// vectors the workspace's model made (it used to open the whole engine with its own
/// configuration, and re-derive every vector of the workspace).
#[test]
fn a_one_shot_rm_keeps_the_vectors_another_configuration_made() {
    let env = Env::new();
    env.use_dense_model();
    base(&env);
    let index =
        || vikingfs::index::Index::open_lexical(&env.ws().join(".vikingfs/index.db")).unwrap();
    let model = index().stored_model().unwrap();
    assert!(!model.is_empty(), "the model made no vectors");
    assert!(index().missing_vectors().unwrap().is_empty());

    env.merge_config(
        serde_json::json!({"embedding": {"dense": {"provider": "local", "model": ""}}}),
    );
    env.ok(&["rm", "viking://resources/base/a.md"]);
    assert!(!env.data("resources/base/a.md").exists());
    assert_eq!(index().stored_model().unwrap(), model);
    let missing = index().missing_vectors().unwrap();
    assert!(missing.is_empty(), "vectors dropped: {missing:?}");
}

/// Without a daemon, a command never re-derives the workspace because of its own
/// environment: `wait`, `fsck` and `add-resource --wait` from a shell whose configuration
/// names no model refuse in one line naming the index's model and theirs, and keep every
/// vector; `reindex` re-derives, saying so in its log and in `status`.
#[test]
fn a_one_shot_command_with_another_model_refuses_and_reindex_rederives() {
    let env = Env::new();
    env.use_dense_model();
    base(&env);
    let index =
        || vikingfs::index::Index::open_lexical(&env.ws().join(".vikingfs/index.db")).unwrap();
    let model = index().stored_model().unwrap();
    assert!(model.starts_with("bert:"), "{model}");

    env.merge_config(
        serde_json::json!({"embedding": {"dense": {"provider": "local", "model": ""}}}),
    );
    let extra = env.local("extra", &[("e.md", note("echo"))]);
    for args in [
        vec!["wait", "--timeout", "30"],
        vec!["fsck"],
        vec!["add-resource", extra.to_str().unwrap(), "--wait"],
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("the index was built with model {model}"))
                && err.contains("this command's configuration names none (lexical only)")
                && err.contains("vikingfs reindex"),
            "{args:?}: {err}"
        );
    }
    assert!(!env.data("resources/extra").exists());
    assert_eq!(index().stored_model().unwrap(), model);
    assert!(index().missing_vectors().unwrap().is_empty());
    // Reading and the locked operations still work as the stores are.
    assert_eq!(
        env.find(&token("alpha"), 3)[0].0,
        "viking://resources/base/a.md"
    );
    env.ok(&["rm", "viking://resources/base/b.md"]);
    assert!(index().missing_vectors().unwrap().is_empty());

    // `reindex` is how a configuration change re-derives: it says so.
    let out = env.run(&["reindex"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(err.contains("re-deriving") && err.contains(&model), "{err}");
    assert_eq!(index().stored_model().unwrap(), "");
    let status = env.ok(&["status"]);
    assert!(
        status.contains(&format!("re-derived: the vectors of {model} were dropped")),
        "{status}"
    );
    // Now built as configured: the commands work again.
    env.ok(&["wait", "--timeout", "60"]);
}

/// The other way round: a workspace built without a model, and a command configured with
/// one, refuses rather than embed every record; `reindex` claims the index for the model and
/// `status` shows the re-derivation until every record has its vector.
#[test]
fn a_one_shot_command_with_a_new_model_refuses_until_reindex() {
    let env = Env::new();
    base(&env);
    env.use_dense_model();
    let out = env.run(&["wait", "--timeout", "30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("the index was built with model none (lexical only), this command's configuration names bert:"),
        "{err}"
    );
    let index =
        || vikingfs::index::Index::open_lexical(&env.ws().join(".vikingfs/index.db")).unwrap();
    assert_eq!(index().stored_model().unwrap(), "");
    env.ok(&["reindex"]);
    assert!(index().stored_model().unwrap().starts_with("bert:"));
    let status = env.ok(&["status"]);
    assert!(
        status.contains("re-deriving: the index was built without a model; every record is embedded with local "),
        "{status}"
    );
    env.ok(&["wait", "--timeout", "120"]);
    assert!(index().missing_vectors().unwrap().is_empty());
    let status = env.ok(&["status"]);
    assert!(!status.contains("re-deriving"), "{status}");
}

/// A command whose configuration names another storage backend than the workspace's stores
/// are on refuses in one line naming both, before it dials anything or creates a store.
#[test]
fn a_one_shot_command_on_another_backend_refuses() {
    let env = Env::new();
    base(&env);
    env.merge_config(serde_json::json!({
        "storage": {"backend": "postgres", "postgres": {"dsn": "postgresql://nobody@127.0.0.1:1/none"}}
    }));
    for args in [
        vec!["wait", "--timeout", "5"],
        vec!["status"],
        vec!["find", "alpha"],
        vec!["rm", "viking://resources/base/a.md"],
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr_of(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("the workspace's stores are on sqlite")
                && err.contains("this command's configuration names postgres"),
            "{args:?}: {err}"
        );
    }
    assert!(env.data("resources/base/a.md").exists());
}

/// `vikingfs generate` (hidden, for packagers): man pages and completions from the command
/// line's own definition, so they name what the binary takes.
#[test]
fn man_pages_and_completions_follow_the_command_line() {
    let d = tempfile::tempdir().unwrap();
    let man = d.path().join("man");
    let out = support::vikingfs(d.path())
        .args(["generate", "man"])
        .arg(&man)
        .output()
        .unwrap();
    support::assert_ok(&out, &["generate", "man"]);
    let mount = std::fs::read_to_string(man.join("vikingfs-mount.1")).unwrap();
    assert!(mount.contains("log\\-file"), "{mount}");
    assert!(man.join("vikingfs.1").exists() && man.join("vikingfs-session-commit.1").exists());
    assert!(
        !man.join("vikingfs-generate.1").exists(),
        "hidden commands have no page"
    );
    for (shell, file) in [
        ("bash", "vikingfs.bash"),
        ("zsh", "_vikingfs"),
        ("fish", "vikingfs.fish"),
    ] {
        let dir = d.path().join(shell);
        let out = support::vikingfs(d.path())
            .args(["generate", "completions", shell])
            .arg(&dir)
            .output()
            .unwrap();
        support::assert_ok(&out, &["generate", "completions", shell]);
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            text.contains("umount") && text.contains("add-resource"),
            "{shell}"
        );
    }
    let out = support::vikingfs(d.path())
        .args(["generate", "completions", "tcsh"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("bash"),
        "names the shells it knows"
    );
    let help = support::vikingfs(d.path()).arg("--help").output().unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains("generate"));
    // umount takes a mount point and nothing else: its help names no global option.
    let help = support::vikingfs(d.path())
        .args(["umount", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("MOUNTPOINT") && !help.contains("--workspace"),
        "{help}"
    );
}

/// `vikingfs --workspace A mount B MNT` names two workspaces: refused in one line, nothing
/// created or mounted.
#[test]
fn mount_refuses_two_different_workspaces() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, mnt) = (d.path().join("a"), d.path().join("b"), d.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let out = support::vikingfs(d.path())
        .arg("--workspace")
        .arg(&a)
        .arg("mount")
        .arg(&b)
        .arg(&mnt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = stderr_of(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("--workspace") && e.contains("differ"), "{e}");
    assert!(!a.exists() && !b.exists(), "a workspace was created");
}

/// A reader that went away (`vikingfs … | head`) ends the command quietly by SIGPIPE, as
/// ls(1) ends, never with a panic's backtrace.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let d = tempfile::tempdir().unwrap();
    let script = format!(
        "(sleep 0.3; {} config show; echo \"rc=$?\" >&2) | true",
        support::BIN
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("HOME", d.path())
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(err.contains("rc=141"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// README's two commands come first and are what they say: the quick start script, and the
/// test set-up followed by exactly the test command `.ci/run` runs.
#[test]
fn the_readmes_two_commands_are_the_scripts_and_cis_test_command() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let commands: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("    ") && !l.trim().is_empty())
        .map(str::trim)
        .take(2)
        .collect();
    assert_eq!(
        commands,
        [
            "scripts/quickstart.sh",
            "scripts/test-setup.sh && cargo nextest run --features failpoints --no-fail-fast"
        ]
    );
    let test = commands[1].split_once(" && ").unwrap().1;
    assert!(
        ci.lines()
            .any(|l| l.trim() == format!("timeout 2400 {test}")),
        ".ci/run does not run {test:?}"
    );
    assert!(
        ci.contains("scripts/test-setup.sh"),
        ".ci/run does not run the set-up"
    );
    assert!(
        readme.len() <= 15 * 1024,
        "README is {} bytes",
        readme.len()
    );
    for s in ["scripts/quickstart.sh", "scripts/test-setup.sh"] {
        assert!(root.join(s).is_file(), "{s}");
    }
}
