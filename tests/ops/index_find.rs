//! `vikingfs find` through the real binary: ranking, output formats, `--under`, bad input,
//! and the guarantee that it never names a file that is gone (and deletes its records).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use vikingfs::index::{Index, Level, Record};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    ws: Workspace,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let config = dir.path().join("config.json");
        std::fs::write(&config, "{}").unwrap();
        let ws = Workspace::open(&root, "default", "default").unwrap();
        Fixture {
            _dir: dir,
            root,
            config,
            ws,
        }
    }

    /// The index as `find` opens it out of the box (no model: lexical only).
    fn index(&self) -> Index {
        Index::open_lexical(&self.ws.index_db()).unwrap()
    }

    /// Write a file and index its content, as the embedding job would.
    fn add(&self, uri: &str, text: &str) -> VPath {
        let p = VPath::from_rel(uri).unwrap();
        let fs = self.ws.fs_path(&p);
        std::fs::create_dir_all(fs.parent().unwrap()).unwrap();
        std::fs::write(&fs, text).unwrap();
        self.put(&p, Level::Content, text);
        p
    }

    fn put(&self, p: &VPath, level: Level, text: &str) {
        self.index()
            .upsert(&Record {
                uri: p.clone(),
                level,
                text: text.to_string(),
                vector: None,
                snippet: text.chars().take(80).collect(),
                source_version: format!("sha-{}", text.len()),
                partial: false,
            })
            .unwrap();
    }

    fn find(&self, args: &[&str]) -> Output {
        crate::support::vikingfs(self.root.parent().unwrap())
            .arg("--workspace")
            .arg(&self.root)
            .arg("--config")
            .arg(&self.config)
            .arg("find")
            .args(args)
            .output()
            .unwrap()
    }

    fn find_json(&self, args: &[&str]) -> Vec<(String, f64)> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.find(&all);
        let empty = String::from_utf8_lossy(&out.stdout).trim() == "[]";
        assert_eq!(
            out.status.code(),
            Some(if empty { 1 } else { 0 }),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                assert!(h["level"].is_u64() && h["snippet"].is_string(), "{h}");
                (
                    h["uri"].as_str().unwrap().to_string(),
                    h["score"].as_f64().unwrap(),
                )
            })
            .collect()
    }
}

fn exists(ws: &Workspace, uri: &str) -> bool {
    let p = ws.parse_uri(uri).unwrap();
    Path::exists(&ws.fs_path(&p))
}

const TOPICS: [&str; 6] = [
    "penguins huddle on the antarctic ice shelf during winter storms",
    "the rust borrow checker rejects aliasing mutable references",
    "sourdough bread needs a lively starter and a long cold proof",
    "tidal energy turbines spin in strong coastal currents",
    "medieval cathedrals used flying buttresses to carry the roof",
    "a sqlite database in wal mode lets readers run beside one writer",
];

#[test]
fn ranks_the_matching_document_first_in_json_and_plain_output() {
    let f = Fixture::new();
    for (i, t) in TOPICS.iter().enumerate() {
        f.add(&format!("resources/notes/n{i}.md"), t);
    }
    // Only the document holding the words: the others have no evidence, so none is named.
    let hits = f.find_json(&["borrow checker references", "--limit", "3"]);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].0, "viking://resources/notes/n1.md");
    // Ranked by evidence: the document with both words before the ones with one.
    let hits = f.find_json(&["bread cathedrals roof", "--limit", "3"]);
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].0, "viking://resources/notes/n4.md");
    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "{hits:?}");
    assert!(hits[0].1 > hits[1].1, "{hits:?}");

    let out = f.find(&["sourdough starter", "-n", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains("viking://resources/notes/n2.md"),
        "{text}"
    );
}

#[test]
fn under_restricts_to_a_subtree_component_wise() {
    let f = Fixture::new();
    f.add("resources/a/x.md", TOPICS[0]);
    f.add("resources/ab/y.md", TOPICS[0]);
    f.add("resources/a/sub/z.md", TOPICS[1]);
    let hits = f.find_json(&["penguins borrow", "--under", "viking://resources/a"]);
    let mut uris: Vec<&str> = hits.iter().map(|h| h.0.as_str()).collect();
    uris.sort();
    assert_eq!(
        uris,
        ["viking://resources/a/sub/z.md", "viking://resources/a/x.md"]
    );
    let hits = f.find_json(&["penguins", "--under", "viking://resources/ab"]);
    let uris: Vec<&str> = hits.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(uris, ["viking://resources/ab/y.md"]);
}

#[test]
fn never_names_a_vanished_file_and_deletes_its_records() {
    let f = Fixture::new();
    // 20 documents about zebras, the lower numbers matching better; 10 about other things.
    let mut zebra = Vec::new();
    for i in 0..20 {
        let text = format!(
            "{} zebra stripes savanna {}",
            "zebra ".repeat(20 - i),
            TOPICS[i % 6]
        );
        zebra.push(f.add(&format!("resources/zoo/z{i:02}.md"), &text));
    }
    for i in 0..10 {
        f.add(&format!("resources/other/o{i}.md"), TOPICS[i % 6]);
    }
    let dir = VPath::from_rel("resources/zoo/gone").unwrap();
    std::fs::create_dir_all(f.ws.fs_path(&dir)).unwrap();
    f.put(&dir, Level::Abstract, "zebra zebra zebra herd summary");
    f.put(&dir, Level::Overview, "zebra zebra zebra herd overview");
    let before = f.find_json(&["zebra", "--limit", "40"]);
    assert!(
        before.iter().any(|h| h.0 == "viking://resources/zoo/gone"),
        "{before:?}"
    );

    // The twelve best matches vanish behind the index's back, and the summarised directory too.
    for z in &zebra[..12] {
        std::fs::remove_file(f.ws.fs_path(z)).unwrap();
    }
    std::fs::remove_dir(f.ws.fs_path(&dir)).unwrap();
    let count_before = f.index().count().unwrap();

    let hits = f.find_json(&["zebra", "--limit", "5"]);
    assert_eq!(hits.len(), 5, "{hits:?}");
    for (uri, _) in &hits {
        assert!(exists(&f.ws, uri), "find named missing {uri}");
    }
    // Only live zebra documents can come first: the others do not contain the word.
    let live: Vec<String> = zebra[12..].iter().map(VPath::uri).collect();
    assert!(hits.iter().all(|h| live.contains(&h.0)), "{hits:?}");

    // The orphans it met are out of the index; the live records are all still there.
    let ix = f.index();
    let left = ix.all_uris().unwrap();
    assert!(ix.count().unwrap() < count_before);
    for (uri, level) in &left {
        let on_disk = f.ws.fs_path(uri);
        assert!(
            on_disk.exists() || !hits.iter().any(|h| h.0 == uri.uri()),
            "{uri} {level}"
        );
    }
    assert!(
        left.iter().all(|(u, _)| u != &dir),
        "summary records of the removed directory remain"
    );
    for z in &zebra[12..] {
        assert!(
            left.iter().any(|(u, _)| u == z),
            "live record {z} was deleted"
        );
    }
    // A wide search cleans up every remaining orphan and returns only live files.
    let all = f.find_json(&["zebra", "--limit", "100"]);
    assert_eq!(
        all.len(),
        8,
        "only the live zebra files have the word: {all:?}"
    );
    assert!(all.iter().all(|(u, _)| exists(&f.ws, u)));
    assert_eq!(f.index().count().unwrap(), 18);
}

#[test]
fn a_file_replaced_by_a_directory_is_not_returned_as_content() {
    let f = Fixture::new();
    let p = f.add("resources/x.md", TOPICS[3]);
    std::fs::remove_file(f.ws.fs_path(&p)).unwrap();
    std::fs::create_dir(f.ws.fs_path(&p)).unwrap();
    assert!(f.find_json(&["tidal turbines"]).is_empty());
    assert_eq!(f.index().count().unwrap(), 0);
}

#[test]
fn bad_input_gets_one_clear_line() {
    let f = Fixture::new();
    f.add("resources/a.md", TOPICS[0]);
    for (args, needle) in [
        (vec!["   "], "empty"),
        (vec!["penguins", "--limit", "0"], "--limit"),
        (vec!["penguins", "--under", "http://x"], "viking://"),
        (
            vec!["penguins", "--under", "viking://resources/../etc"],
            "..",
        ),
    ] {
        let out = f.find(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    // Nothing was lost on the way.
    assert_eq!(f.index().count().unwrap(), 1);
}

/// An error deep in a store reaches the CLI with its whole chain on one line, each cause
/// once: the command, the index file, then what SQLite said.
#[test]
fn a_store_error_prints_its_cause_on_the_one_line() {
    let f = Fixture::new();
    f.add("resources/a.md", TOPICS[0]);
    // Not damage (that is moved aside and rebuilt): an index missing its full-text table.
    let db = f.ws.index_db();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("DROP TABLE lex")
        .unwrap();
    let out = f.find(&["penguins"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let want = format!("vikingfs: find: index {}: no such table: lex", db.display());
    assert_eq!(err.trim_end(), want);
}

#[test]
fn an_index_from_another_model_is_reported_not_mixed() {
    let f = Fixture::new();
    f.add("resources/a.md", TOPICS[0]);
    // Vectors of another model...
    let (ix, _) = Index::open_or_reset(&f.ws.index_db(), 384, "another-model").unwrap();
    ix.upsert(&Record {
        uri: VPath::from_rel("resources/a.md").unwrap(),
        level: Level::Content,
        text: TOPICS[0].to_string(),
        vector: Some(vec![0.5; 384]),
        snippet: String::new(),
        source_version: "v".into(),
        partial: false,
    })
    .unwrap();
    drop(ix);
    // ...searched with the local model: never compared, searched by its terms only.
    let model = std::env::var_os("VIKINGFS_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        });
    std::fs::write(
        &f.config,
        serde_json::json!({"embedding": {"dense": {"provider": "local", "model": model}}})
            .to_string(),
    )
    .unwrap();
    let out = f.find(&["penguins", "--json"]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("another-model") && err.contains("lexically"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hits = v.as_array().unwrap();
    assert_eq!(hits.len(), 1);
    assert!(hits[0]["evidence"]["bm25"].is_number());
    assert!(hits[0]["evidence"].get("cosine").is_none(), "{v}");
    assert_eq!(f.index().count().unwrap(), 1);
}

/// The query syntax: `"phrase"` (in order), `-word` (absent as a word), `path:GLOB` and
/// `ext:EXT` filter what the words rank, on every mode; a `path:` that is no glob is one line.
#[test]
fn phrases_exclusions_and_path_filters_say_what_a_query_wants() {
    let env = crate::support::ops::Env::new();
    let src = env.local(
        "repo",
        &[
            (
                "src/lock.rs",
                "/// Takes the lock guard.\nfn lock_guard() {}\n".to_string(),
            ),
            (
                "tools/guard.py",
                "# lock guard with tokio\nimport os\n".to_string(),
            ),
            (
                "docs/notes.md",
                "# Notes\n\nThe guard keeps the lock.\n".to_string(),
            ),
            (
                "docs/gpg.md",
                "gpgconf --apply-defaults writes the global defaults\n".to_string(),
            ),
        ],
    );
    // The same line gzip'd: the index reads what it decompresses to, and so do the filters.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, b"# lock guard with tokio\nimport os\n").unwrap();
    std::fs::write(src.join("tools/guard.py.gz"), gz.finish().unwrap()).unwrap();
    env.add_waited(&src, "viking://resources/repo");
    let files = |q: &str| -> Vec<String> {
        let mut v: Vec<String> = env
            .find(q, 10)
            .into_iter()
            .filter(|(_, level)| *level == 2)
            .map(|(u, _)| u.rsplit('/').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        files("lock guard"),
        ["guard.py", "guard.py.gz", "lock.rs", "notes.md"]
    );
    // A dash inside a word, or in a sentence, is text: the one page that answers is found.
    assert_eq!(
        files("Run gpgconf --apply-defaults for all users."),
        ["gpg.md"]
    );
    assert_eq!(files("gpgconf --apply-defaults"), ["gpg.md"]);
    // Operators that leave nothing: the words are run again as text (the path filter kept).
    let all = ["guard.py", "guard.py.gz", "lock.rs", "notes.md"];
    assert_eq!(files("\"guard lock\""), all);
    assert_eq!(files("lock -guard"), all);
    assert_eq!(files("\"guard lock\" path:docs/*"), ["notes.md"]);
    // A phrase and an exclusion judge a compressed file by its text, as the index reads it.
    assert_eq!(
        files("\"lock guard\""),
        ["guard.py", "guard.py.gz", "lock.rs"]
    );
    assert_eq!(files("\"lock guard\" -tokio"), ["lock.rs"]);
    assert_eq!(files("\"guard with tokio\""), ["guard.py", "guard.py.gz"]);
    assert_eq!(files("lock ext:py"), ["guard.py"]);
    assert_eq!(files("lock ext:.RS ext:md"), ["lock.rs", "notes.md"]);
    assert_eq!(files("lock path:docs/*"), ["notes.md"]);
    assert_eq!(files("lock path:/resources/repo/src/**"), ["lock.rs"]);
    assert_eq!(files("lock path:*.py"), ["guard.py"]);
    // Summaries are not judged on a phrase: none is shown for one.
    let all = env.find("\"lock guard\"", 10);
    assert!(all.iter().all(|(_, level)| *level == 2), "{all:?}");
    let out = env.run(&["find", "lock path:["]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("path:[ is not a glob"), "{err}");
}

/// An identifier query (`OrderedDict`, `fg_wait`: camel or snake case) ranks the file that
/// defines it first, measured on real code nobody here wrote: 400 files of this machine's
/// Python standard library, with each identifier defined (`class` or `def`) in exactly one of
/// them and used in at least two others.
#[test]
fn an_identifier_query_ranks_its_definition_first() {
    let root = crate::support::python_stdlib();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "py") && p.is_file())
        .collect();
    files.sort();
    files.truncate(400);
    let texts: Vec<(String, String)> = files
        .iter()
        .filter_map(|p| {
            let t = std::fs::read_to_string(p).ok()?;
            Some((p.file_name()?.to_string_lossy().into_owned(), t))
        })
        .collect();
    // Identifiers defined once and used elsewhere, camel or snake case.
    let def = regex::Regex::new(r"(?m)^\s*(?:class|def)\s+([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let shaped = |id: &str| {
        let b = id.as_bytes();
        b.windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
            || id.trim_matches('_').contains('_')
    };
    let mut defined: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for (i, (_, t)) in texts.iter().enumerate() {
        for c in def.captures_iter(t) {
            let v = defined.entry(c[1].to_string()).or_default();
            if !v.contains(&i) {
                v.push(i);
            }
        }
    }
    let word = |id: &str| regex::Regex::new(&format!(r"\b{}\b", regex::escape(id))).unwrap();
    let mut cases: Vec<(String, String)> = defined
        .iter()
        .filter(|(id, at)| at.len() == 1 && shaped(id) && !id.starts_with('_'))
        .filter(|(id, at)| {
            let w = word(id);
            texts
                .iter()
                .enumerate()
                .filter(|(i, (_, t))| *i != at[0] && w.is_match(t))
                .count()
                >= 2
        })
        .map(|(id, at)| (id.clone(), texts[at[0]].0.clone()))
        .collect();
    cases.truncate(40);
    assert!(
        cases.len() >= 15,
        "only {} identifiers: {cases:?}",
        cases.len()
    );

    let env = crate::support::ops::Env::new();
    let refs: Vec<(&str, String)> = texts.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let local = env.local("stdlib", &refs);
    env.add_waited(&local, "viking://resources/stdlib");
    let mut first = 0;
    let mut missed = Vec::new();
    for (id, file) in &cases {
        let top = env
            .find(id, 5)
            .into_iter()
            .find(|(_, level)| *level == 2)
            .map(|(u, _)| u);
        if top
            .as_deref()
            .is_some_and(|u| u.ends_with(&format!("/{file}")))
        {
            first += 1;
        } else {
            missed.push((id, file, top));
        }
    }
    // The definition first nearly always (one outside the first 50 candidates cannot be
    // found); BM25 alone put it first for 18 of these 40.
    eprintln!("definition first: {first}/{}", cases.len());
    assert!(
        first * 100 >= cases.len() * 95,
        "{first}/{}: {missed:?}",
        cases.len()
    );
}
