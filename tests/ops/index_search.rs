//! What `find` promises, through the real binary: an exact token finds its file among many
//! near-identical ones, a query that matches nothing answers nothing (exit 1), removed
//! content is never named or summarised, summaries rank below the content they summarise,
//! CJK and identifiers are searchable, and an index of the old format upgrades in place.

use crate::support::{self, ops};

use ops::Env;
use serde_json::Value;
use support::{found_json, token};

fn hits(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["find", "--json"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let v: Value = serde_json::from_str(&found_json(&out)).unwrap();
    v.as_array().unwrap().clone()
}

/// `add-resource LOCAL --to viking://resources/NAME --wait`.
fn add(env: &Env, local: &std::path::Path, name: &str) {
    env.ok(&[
        "add-resource",
        local.to_str().unwrap(),
        "--to",
        &format!("viking://resources/{name}"),
        "--wait",
    ]);
}

/// A local directory of `n` notes `{p}{i:03}.md`, each holding `token("{p}{i}")` (the
/// damage and copy tests' workload).
fn notes(env: &Env, p: &str, n: usize) -> std::path::PathBuf {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| {
            (
                format!("{p}{i:03}.md"),
                format!("note {i}: {}", token(&format!("{p}{i}"))),
            )
        })
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    env.local("docs", &refs)
}

fn uris(h: &[Value]) -> Vec<String> {
    h.iter()
        .map(|h| h["uri"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_exact_token_ranks_its_file_first_among_near_identical_files() {
    let env = Env::new();
    let files: Vec<(String, String)> = (0..1800)
        .map(|i| {
            (
                format!("d{}/f{i:04}.md", i / 300),
                format!(
                    "Build report for the nightly pipeline. Artifact id r2x{:05}. \
                     All stages passed; the cache was warm and the run took four minutes.",
                    i * 7 + 3
                ),
            )
        })
        .collect();
    let local = env.local(
        "reports",
        &files
            .iter()
            .map(|(p, t)| (p.as_str(), t.clone()))
            .collect::<Vec<_>>(),
    );
    env.ok(&[
        "add-resource",
        local.to_str().unwrap(),
        "--to",
        "viking://resources/reports",
    ]);
    // The terms are searchable once the records are written; `reindex` writes them now.
    env.ok(&["reindex", "--under", "viking://resources/reports"]);
    let picks: Vec<usize> = (0..20).map(|k| (k * 89 + 11) % 1800).collect();
    let qfile = env.dir.path().join("queries.txt");
    let queries: Vec<String> = picks
        .iter()
        .map(|i| format!("r2x{:05}", i * 7 + 3))
        .collect();
    std::fs::write(&qfile, queries.join("\n")).unwrap();
    let out = env.ok(&[
        "find",
        "--json",
        "--mode",
        "lexical",
        "--queries",
        qfile.to_str().unwrap(),
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), picks.len());
    for (line, i) in lines.iter().zip(&picks) {
        let v: Value = serde_json::from_str(line).unwrap();
        let first = v[0]["uri"].as_str().unwrap_or_default();
        let want = format!("viking://resources/reports/{}", files[*i].0);
        assert_eq!(first, want, "query r2x{:05}: {v}", i * 7 + 3);
        // And nothing else has the token.
        assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    }
    // In text, each query's block starts with `# QUERY`, blocks a blank line apart.
    let out = env.ok(&[
        "find",
        "--mode",
        "lexical",
        "--queries",
        qfile.to_str().unwrap(),
    ]);
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(blocks.len(), picks.len(), "{out}");
    for ((block, q), i) in blocks.iter().zip(&queries).zip(&picks) {
        let mut lines = block.lines();
        assert_eq!(lines.next(), Some(format!("# {q}").as_str()), "{block}");
        let hit = lines.next().unwrap_or_default();
        assert!(hit.contains(&files[*i].0), "{q}: {hit}");
        assert_eq!(lines.next(), None, "{block}");
    }
}

#[test]
fn a_query_that_matches_nothing_answers_nothing() {
    let env = Env::new();
    let local = env.local(
        "notes",
        &[
            (
                "a.md",
                "The quarterly budget review moved to Thursday.".into(),
            ),
            ("b.md", "Penguins huddle together on the ice shelf.".into()),
        ],
    );
    add(&env, &local, "notes");
    for dense in [false, true] {
        if dense {
            // A model configured: a vector is always "nearest" to something, the floor
            // keeps it out.
            env.use_dense_model();
            env.ok(&["reindex"]);
            env.drain();
        }
        let out = env.run(&["find", "qzxv wmplrt frobnicatory"]);
        assert_eq!(out.status.code(), Some(1), "dense {dense}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let out = env.run(&["find", "--json", "qzxv wmplrt frobnicatory"]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
        // While a real query still answers.
        let h = hits(&env, &["budget review"]);
        assert_eq!(
            uris(&h)[0],
            "viking://resources/notes/a.md",
            "dense {dense}"
        );
        // Only stopwords: they are searched (nothing else is left), not dropped to nothing.
        let out = env.run(&["find", "the"]);
        assert_eq!(out.status.code(), Some(0), "{:?}", out);
    }
}

#[test]
fn removed_content_is_never_named_or_summarised() {
    let env = Env::new();
    let word = token("removed-content");
    let keep = token("kept-content");
    let local = env.local(
        "docs",
        &[
            ("guide/intro.md", format!("# Intro\n\nThe {word} widget.\n")),
            (
                "guide/usage.md",
                format!("# Usage\n\nUse the {word} widget.\n"),
            ),
            ("other.md", format!("# Other\n\nAbout {keep}.\n")),
        ],
    );
    add(&env, &local, "docs");
    // The summaries of docs/ and guide/ quote the word, and are found by it.
    let before = hits(&env, &[&word, "--limit", "20"]);
    assert!(
        before.iter().any(|h| h["level"] != 2),
        "summaries quote the word: {before:?}"
    );
    // Content ranks above the summaries that describe it.
    assert_eq!(before[0]["level"], 2, "{before:?}");
    assert_eq!(before[1]["level"], 2, "{before:?}");
    env.ok(&["rm", "-r", "viking://resources/docs/guide"]);
    // At once (the parent's refresh still queued): nothing names or summarises it.
    let out = env.run(&["find", "--json", &word]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // After the refresh too, and what stays is still found.
    env.drain();
    let out = env.run(&["find", "--json", &word]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let h = hits(&env, &[&keep]);
    assert_eq!(uris(&h)[0], "viking://resources/docs/other.md");
}

#[test]
fn identifiers_paths_and_cjk_are_searchable() {
    let env = Env::new();
    let local = env.local(
        "code",
        &[
            (
                "lock.rs",
                "pub struct LockGuard { held: bool }\nfn acquire_exact_lock() {}".into(),
            ),
            (
                "notes.md",
                "全文检索支持中文分词，文件删除后不会返回。".into(),
            ),
            (
                "prose.md",
                "A guard stands at the gate of the castle.".into(),
            ),
        ],
    );
    add(&env, &local, "code");
    for (q, want) in [
        ("LockGuard", "lock.rs"),
        ("lock guard", "lock.rs"),
        ("acquire_exact_lock", "lock.rs"),
        ("exact lock", "lock.rs"),
        ("检索", "notes.md"),
        ("中文分词", "notes.md"),
        ("castle gate", "prose.md"),
    ] {
        let h = hits(&env, &[q]);
        let files: Vec<String> = h
            .iter()
            .filter(|h| h["level"] == 2)
            .map(|h| h["uri"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            files.first().map(String::as_str),
            Some(format!("viking://resources/code/{want}").as_str()),
            "{q}: {h:?}"
        );
        // Every result shows why it was returned.
        assert!(h.iter().all(|h| h["evidence"]["bm25"].is_number()), "{h:?}");
    }
}

#[test]
fn an_index_of_the_old_format_upgrades_in_place() {
    let env = Env::new();
    let word = token("upgrade");
    let local = env.local("old", &[("a.md", format!("About {word}."))]);
    add(&env, &local, "old");
    // Make it look like the previous format: schema 1, no lexical table.
    let db = env.ws().join(".vikingfs/index.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("UPDATE meta SET value = '1' WHERE key = 'schema'; DROP TABLE lex;")
        .unwrap();
    drop(conn);
    // The first `find` rebuilds the index from the files, then answers.
    let h = hits(&env, &[&word]);
    assert_eq!(uris(&h)[0], "viking://resources/old/a.md");
    let v: Value = serde_json::from_str(&env.ok(&["status", "--json"])).unwrap();
    assert_eq!(v["index"]["lexical"], v["index"]["records"], "{v}");
    // The summaries were queued by the rebuild.
    env.drain();
    env.check_fsck_clean();
}

#[test]
fn the_local_model_finds_what_shares_no_word_with_the_query() {
    let env = Env::new();
    env.use_dense_model();
    let local = env.local(
        "notes",
        &[
            (
                "penguins.md",
                "Penguins huddle together on the Antarctic ice shelf during winter storms.".into(),
            ),
            (
                "rust.md",
                "The borrow checker rejects programs that alias mutable references.".into(),
            ),
            (
                "bread.md",
                "Sourdough needs a lively starter and a long, cold proof in the fridge.".into(),
            ),
        ],
    );
    add(&env, &local, "notes");
    let v: Value = serde_json::from_str(&env.ok(&["status", "--json"])).unwrap();
    assert_eq!(v["index"]["vectors"], v["index"]["records"], "{v}");
    let q = "flightless seabirds in the frozen far south";
    // No word in common: lexical search rightly answers nothing...
    let out = env.run(&["find", "--mode", "lexical", q]);
    assert_eq!(out.status.code(), Some(1));
    // ...the model finds it, alone and fused, with its cosine as evidence.
    for mode in ["semantic", "hybrid"] {
        let h = hits(&env, &["--mode", mode, q]);
        assert_eq!(
            uris(&h)[0],
            "viking://resources/notes/penguins.md",
            "{mode}: {h:?}"
        );
        let cos = h[0]["evidence"]["cosine"].as_f64().unwrap();
        assert!(cos >= 0.35, "{mode}: {h:?}");
        // Only what the model finds close enough: not the other two notes.
        assert!(
            !uris(&h).iter().any(|u| u.ends_with("rust.md")),
            "{mode}: {h:?}"
        );
    }
    // Nonsense is near nothing: the floor keeps every record out.
    let out = env.run(&["find", "--mode", "semantic", "qzxv wmplrt frobnicatory"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_snippet_shows_the_passage_that_matched() {
    let env = Env::new();
    let word = token("deep-in-the-file");
    let mut text = String::from("# Notes\n\n");
    for i in 0..80 {
        text.push_str(&format!(
            "Line {i} says nothing in particular about anything.\n"
        ));
    }
    text.push_str(&format!("Here the {word} finally appears, near the end.\n"));
    let local = env.local("notes", &[("long.md", text)]);
    add(&env, &local, "notes");
    let h = hits(&env, &[&word]);
    let snippet = h[0]["snippet"].as_str().unwrap();
    assert!(snippet.contains(&word), "{snippet}");
    assert!(snippet.contains("finally appears"), "{snippet}");
    // Not the file's head.
    assert!(!snippet.contains("# Notes"), "{snippet}");
}

#[test]
fn a_name_is_searchable_and_follows_a_move() {
    let env = Env::new();
    let local = env.local(
        "names",
        &[
            (
                "quarterly-report.md",
                "Numbers for the third period.".into(),
            ),
            ("sub/other.md", "Nothing to see.".into()),
        ],
    );
    add(&env, &local, "names");
    // The file's name is part of its record: found by a word only its name holds.
    let h = hits(&env, &["quarterly"]);
    assert_eq!(uris(&h)[0], "viking://resources/names/quarterly-report.md");
    env.ok(&[
        "mv",
        "viking://resources/names/quarterly-report.md",
        "viking://resources/names/sub/annual-summary.md",
    ]);
    // The new name is searchable at once, the old one names nothing.
    let h = hits(&env, &["annual summary"]);
    assert_eq!(
        uris(&h)[0],
        "viking://resources/names/sub/annual-summary.md"
    );
    let out = env.run(&["find", "--json", "quarterly"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A directory's move keeps what lies below it findable under the new path.
    env.ok(&[
        "mv",
        "viking://resources/names/sub",
        "viking://resources/names/moved",
    ]);
    let h = hits(&env, &["annual"]);
    assert_eq!(
        uris(&h)[0],
        "viking://resources/names/moved/annual-summary.md"
    );
    env.check_fsck_clean();
}

/// The index is derived: one cut short (a full disk, a bad copy) or overwritten with garbage
/// is moved aside with a warning and rebuilt from the files by the next command, and `find`
/// answers as before.
#[test]
fn a_damaged_index_is_moved_aside_and_rebuilt() {
    for damage in ["cut", "garbage"] {
        let env = Env::new();
        let local = notes(&env, "n", 300);
        add(&env, &local, "docs");
        let db = env.ws().join(".vikingfs/index.db");
        // Everything in the main file, so that cutting it damages records.
        env.ok(&["fsck"]);
        let len = std::fs::metadata(&db).unwrap().len();
        match damage {
            "cut" => std::fs::OpenOptions::new()
                .write(true)
                .open(&db)
                .unwrap()
                .set_len(len / 2)
                .unwrap(),
            _ => std::fs::write(&db, vec![0xa5u8; len as usize]).unwrap(),
        }
        let _ = std::fs::remove_file(db.with_extension("db-wal"));
        let status = env.ok(&["status"]);
        assert!(status.contains("damaged"), "{damage}: {status}");
        let out = env.run(&["find", "--json", &token("n123")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let found = found_json(&out);
        assert!(found.contains("docs/n123.md"), "{damage}: {found} {stderr}");
        let aside = crate::support::has_damaged_aside(db.parent().unwrap());
        assert!(aside, "{damage}: the damaged file is kept aside");
        env.drain();
        env.check_fsck_clean();
    }
}

/// The queue is derived too: one overwritten with garbage while jobs were pending is moved
/// aside by the next command, and its jobs are queued again from what the files have and the
/// index lacks: everything is found after `wait`.
#[test]
fn a_damaged_queue_is_moved_aside_and_its_jobs_derived_again() {
    let env = Env::new();
    let local = notes(&env, "q", 50);
    // Without --wait: the jobs are only in the queue.
    env.ok(&[
        "add-resource",
        local.to_str().unwrap(),
        "--to",
        "viking://resources/docs",
    ]);
    let db = env.ws().join(".vikingfs/queue.db");
    let len = std::fs::metadata(&db).unwrap().len().max(8192);
    std::fs::write(&db, vec![0x3cu8; len as usize]).unwrap();
    let _ = std::fs::remove_file(db.with_extension("db-wal"));
    let _ = std::fs::remove_file(db.with_extension("db-shm"));
    let status = env.ok(&["status"]);
    assert!(status.contains("damaged"), "{status}");
    env.drain();
    let out = env.run(&["find", "--json", &token("q37")]);
    assert!(
        found_json(&out).contains("docs/q037.md"),
        "{}",
        found_json(&out)
    );
    env.check_fsck_clean();
}

/// The same damage met first by a one-shot locked operation (`write`, which opens no model): the
/// queue it sets aside is healthy when the whole engine reopens it, and the jobs it held are
/// still derived again.
#[test]
fn a_damaged_queue_met_by_a_one_shot_write_still_gets_its_jobs_derived_again() {
    let env = Env::new();
    let local = notes(&env, "r", 50);
    env.ok(&[
        "add-resource",
        local.to_str().unwrap(),
        "--to",
        "viking://resources/docs",
    ]);
    let db = env.ws().join(".vikingfs/queue.db");
    let len = std::fs::metadata(&db).unwrap().len().max(8192);
    std::fs::write(&db, vec![0x3cu8; len as usize]).unwrap();
    let _ = std::fs::remove_file(db.with_extension("db-wal"));
    let _ = std::fs::remove_file(db.with_extension("db-shm"));
    // Outside the resource: its lifecycle lock still holds it while its jobs are pending.
    let note = env.local("one", &[("n.md", "a note outside".to_string())]);
    env.ok(&[
        "write",
        "viking://resources/n.md",
        "--from",
        note.join("n.md").to_str().unwrap(),
    ]);
    env.drain();
    let out = env.run(&["find", "--json", &token("r37")]);
    assert!(
        found_json(&out).contains("docs/r037.md"),
        "{}",
        found_json(&out)
    );
    env.check_fsck_clean();
}

/// A workspace copied whole (`cp -a`) opens as it was: every inode changed, but records whose
/// file differs only in its inode follow it (no "record older than its file", no re-index),
/// and the copy answers `find` at once.
#[test]
fn a_workspace_copied_whole_opens_as_it_was() {
    let env = Env::new();
    let local = notes(&env, "c", 40);
    add(&env, &local, "docs");
    env.check_fsck_clean();
    let copy = env.dir.path().join("copy");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(env.ws())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let run = |args: &[&str]| {
        std::process::Command::new(support::BIN)
            .arg("--workspace")
            .arg(&copy)
            .args(args)
            .env("HOME", env.dir.path())
            .env_remove("VIKINGFS_CONFIG")
            .env_remove("VIKINGFS_WORKSPACE")
            .output()
            .unwrap()
    };
    let out = run(&["fsck", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    let out = run(&["find", "--json", &token("c17")]);
    assert!(
        found_json(&out).contains("docs/c017.md"),
        "{}",
        found_json(&out)
    );
    // The original is untouched by the copy's adoption.
    env.check_fsck_clean();
}

/// The first results of a hybrid search do not depend on `--limit`: the first 10 of
/// `--limit 50` are `--limit 10`'s, in order (and `--limit 3`'s are their first 3), on the
/// 122 paragraphs of the GPL (real text nobody here wrote), with the local model.
#[test]
fn the_first_results_do_not_depend_on_the_limit() {
    let gpl = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap();
    let paras: Vec<String> = gpl
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| p.len() > 80)
        .collect();
    assert!(paras.len() >= 60, "{}", paras.len());
    let env = Env::new();
    env.use_dense_model();
    let files: Vec<(String, String)> = paras
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i:03}.md"), p.clone()))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let local = env.local("gpl", &refs);
    add(&env, &local, "gpl");
    // Queries: six words from every fifth paragraph's middle, as someone half remembering it.
    let queries: Vec<String> = paras
        .iter()
        .step_by(5)
        .map(|p| {
            let w: Vec<&str> = p.split_whitespace().collect();
            let mid = w.len() / 2;
            w[mid.saturating_sub(3)..(mid + 3).min(w.len())].join(" ")
        })
        .collect();
    for q in &queries {
        let q = q.as_str();
        let at = |limit: &str| uris(&hits(&env, &["--mode", "hybrid", "--limit", limit, q]));
        let (three, ten, fifty) = (at("3"), at("10"), at("50"));
        // Fewer than asked when few pass the model's floor; the same ones, in order.
        assert!(ten.len() >= three.len() && fifty.len() >= ten.len(), "{q}");
        assert_eq!(&fifty[..ten.len()], &ten[..], "{q}: the first 10 of 50");
        assert_eq!(&ten[..three.len()], &three[..], "{q}: the first 3 of 10");
    }
}
