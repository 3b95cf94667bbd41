//! Directory summaries: limits, multibyte text, determinism and content of the local summariser,
//! on hand-made inputs and on real text nobody here wrote (`/usr/share/doc/git`, this repo's
//! own `src/lock`).

use std::io::Read;
use std::path::Path;

use proptest::prelude::*;
use vikingfs::content::{human_size, sniff, Content};
use vikingfs::semantic::summarizer_from_config;
use vikingfs::semantic::summary::{
    Child, DirInput, LocalSummarizer, Summary, TermWeights, ABSTRACT_MAX_CHARS, OVERVIEW_MAX_CHARS,
};

/// Words that must never be keywords: function words, summary boilerplate, code keywords and
/// the stemming artefacts of the old summaries.
const NEVER_KEYWORDS: &[&str] = &[
    "file",
    "files",
    "self",
    "let",
    "pub",
    "std",
    "mostly",
    "holds",
    "hold",
    "fixe",
    "fn",
    "use",
    "impl",
    "struct",
    "return",
    "import",
    "const",
    "var",
    "func",
    "def",
    "the",
    "and",
    "since",
    "directory",
    "directories",
    "subdirectory",
    "subdirectories",
    "keywords",
    "about",
    "http",
    "https",
    "www",
    "com",
    "org",
    "mut",
    "crate",
    "documents",
    "readme",
];

fn input(uri: &str, children: Vec<Child>) -> DirInput {
    DirInput {
        uri: uri.into(),
        children,
        weights: None,
    }
}

fn docs() -> DirInput {
    input(
        "viking://resources/docs",
        vec![
            Child::file(
                "locks.md",
                "# Path locks\n\nThe lock engine takes EXACT and TREE locks on paths.",
            ),
            Child::file(
                "queue.md",
                "A durable queue keeps jobs. Workers take jobs from the queue and retry them.",
            ),
            Child::dir(
                "guides",
                "Install guides for the lock engine and the queue. guides holds 3 Markdown \
                 documents. Keywords: install, lock, queue.",
            ),
            Child::file(".abstract.md", "old abstract that must not be summarised"),
            Child::file(".overview.md", "old overview"),
        ],
    )
}

/// The keywords an abstract names ("… Keywords: a, b, c.").
fn keywords(abstract_md: &str) -> Vec<String> {
    match abstract_md.split_once("Keywords: ") {
        Some((_, k)) => k
            .trim_end_matches(['.', '…'])
            .split(", ")
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    }
}

/// Whether `word` is written, as a whole word, in a child's name or text.
fn occurs(word: &str, input: &DirInput) -> bool {
    let whole = |hay: &str| {
        hay.match_indices(word).any(|(i, _)| {
            let before = hay[..i].chars().next_back();
            let after = hay[i + word.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
        })
    };
    input
        .children
        .iter()
        .any(|c| whole(&c.name) || whole(&c.text))
}

/// Everything the brief promises of any summary: limits, clean text, sound keywords, and the
/// same bytes for the same input in any order.
fn check(input: &DirInput, s: &Summary) {
    assert!(
        s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS,
        "{}",
        s.abstract_md
    );
    assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
    for (what, text) in [("abstract", &s.abstract_md), ("overview", &s.overview_md)] {
        assert!(!text.contains('\u{FFFD}'), "{what}: {text}");
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what}: {text:?}"
        );
    }
    assert!(!s.abstract_md.contains('\n'), "{}", s.abstract_md);
    for k in keywords(&s.abstract_md) {
        assert!(
            !NEVER_KEYWORDS.contains(&k.to_lowercase().as_str()),
            "{k} in {}",
            s.abstract_md
        );
        assert!(occurs(&k, input), "{k:?} is not written in the input");
    }
    assert_eq!(
        s,
        &LocalSummarizer.summarize(input),
        "same input, same bytes"
    );
    let mut shuffled = input.clone();
    let n = shuffled.children.len();
    // A fixed permutation that is neither the order given nor its reverse.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (i * 7919 + 13) % n.max(1));
    shuffled.children = order.iter().map(|&i| input.children[i].clone()).collect();
    shuffled.children.rotate_left(n / 3);
    assert_eq!(
        s,
        &LocalSummarizer.summarize(&shuffled),
        "order must not matter"
    );
}

/// The gists of the overview's content lines, by child name.
fn gists(overview: &str) -> Vec<(String, String)> {
    overview
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| {
            let (name, rest) = l.split_once('`')?;
            Some((
                name.to_string(),
                rest.strip_prefix(" — ").unwrap_or("").to_string(),
            ))
        })
        .collect()
}

/// A directory read as the `semantic` job reads it: the head of each file, judged text or
/// binary by its bytes, and each subdirectory by the abstract its own summary has.
fn read_tree(path: &Path, uri: &str) -> DirInput {
    let mut children = Vec::new();
    for e in std::fs::read_dir(path).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            let sub = read_tree(&e.path(), &format!("{uri}/{name}"));
            children.push(Child::dir(
                name,
                LocalSummarizer.summarize(&sub).abstract_md,
            ));
        } else if ft.is_file() {
            let mut head = Vec::new();
            let f = std::fs::File::open(e.path()).unwrap();
            f.take(8 * 1024).read_to_end(&mut head).unwrap();
            let size = e.metadata().unwrap().len();
            children.push(match sniff(head) {
                Content::Text(t) => Child::file(name, t),
                Content::Binary(kind) => Child::binary(name, kind, size),
            });
        }
    }
    input(uri, children)
}

#[test]
fn overview_lists_each_child_with_its_gist() {
    let d = docs();
    let s = LocalSummarizer.summarize(&d);
    check(&d, &s);
    assert!(s.overview_md.starts_with("# docs\n"), "{}", s.overview_md);
    assert!(s.overview_md.contains("- `locks.md` — Path locks\n"));
    assert!(s
        .overview_md
        .contains("- `queue.md` — A durable queue keeps jobs.\n"));
    assert!(s.overview_md.contains(
        "- `guides/` — Install guides for the lock engine and the queue. guides holds 3 \
         Markdown documents.\n"
    ));
    assert!(
        !s.overview_md.contains("old abstract"),
        "sidecars are not content"
    );
    // No README: the largest document opens the abstract (its first sentence is short, so
    // the second follows; that lead is short, so the next document's follows), then what the
    // directory holds, in words.
    assert!(
        s.abstract_md.starts_with(
            "A durable queue keeps jobs. Workers take jobs from the queue and retry them. \
             Path locks: The lock engine takes EXACT and TREE locks on paths. docs holds 2 \
             Markdown documents and 1 subdirectory. Keywords: "
        ),
        "{}",
        s.abstract_md
    );
    // "queue" is written in all three children: it must be among the keywords, and so must
    // "lock", shown as a word the text uses (not a stem).
    let k = keywords(&s.abstract_md);
    assert!(k.contains(&"queue".to_string()), "{k:?}");
    assert!(k.contains(&"lock".to_string()), "{k:?}");
}

#[test]
fn a_readme_opens_the_abstract() {
    let d = input(
        "viking://resources/manual",
        vec![
            Child::file("zz-appendix.md", "# Appendix\n\nLong text. ".repeat(50)),
            Child::file(
                "README.md",
                "[![ci](https://x/b.svg)](https://x)\n\nVikingfs manual\n===============\n\n\
                 This manual explains the **lock engine** and the [job queue](q.md). More.\n",
            ),
            Child::file("notes.txt", "Plain notes about the lock engine."),
        ],
    );
    let s = LocalSummarizer.summarize(&d);
    check(&d, &s);
    assert!(
        s.abstract_md.starts_with(
            "Vikingfs manual: This manual explains the lock engine and the job queue. manual \
             holds 2 Markdown documents and 1 text file."
        ),
        "{}",
        s.abstract_md
    );
    // A title the first sentence repeats is not said twice.
    let d = input(
        "viking://resources/g",
        vec![Child::file(
            "readme",
            "Git - fast, distributed\n=======\n\nGit is a fast, distributed system. Yes.\n",
        )],
    );
    let s = LocalSummarizer.summarize(&d);
    assert!(
        s.abstract_md
            .starts_with("Git is a fast, distributed system. Yes. g holds 1 text file."),
        "{}",
        s.abstract_md
    );
}

#[test]
fn binaries_are_named_by_kind_and_size_never_quoted() {
    let mut odd = Child::binary("blob.bin", "binary data", 3 * 1024 * 1024);
    odd.text = "SECRET \u{FFFD}\u{1} bytes".into(); // a hand-made child: still never quoted
    let d = input(
        "viking://resources/pkg",
        vec![
            Child::binary("changelog.gz", "gzip compressed data", 12 * 1024),
            Child::binary("NEWS.Debian.gz", "gzip compressed data", 1053),
            Child::binary("logo.png", "PNG image", 2048),
            odd,
            Child::file("copyright", "Format: https://example.org/x\nUpstream: y\n"),
        ],
    );
    let s = LocalSummarizer.summarize(&d);
    check(&d, &s);
    assert!(s
        .overview_md
        .contains("- `changelog.gz` — gzip compressed data, 12 KiB\n"));
    assert!(s
        .overview_md
        .contains("- `NEWS.Debian.gz` — gzip compressed data, 1.0 KiB\n"));
    assert!(s
        .overview_md
        .contains("- `logo.png` — PNG image, 2.0 KiB\n"));
    assert!(s
        .overview_md
        .contains("- `blob.bin` — binary data, 3.0 MiB\n"));
    assert!(!s.overview_md.contains("SECRET") && !s.abstract_md.contains("SECRET"));
    assert!(
        s.abstract_md
            .contains("pkg holds 2 gzip files, 1 PNG image, 1 binary file and 1 licence text."),
        "{}",
        s.abstract_md
    );
}

#[test]
fn code_is_described_by_its_doc_comments() {
    let d = input(
        "viking://resources/src",
        vec![
            Child::file(
                "lib.rs",
                "//! Path locks shared on disk.\n//!\n//! More text.\n\npub mod x;\n",
            ),
            Child::file("item.rs", "use std::x;\n\n/// Takes the lock.\npub fn f() {}\n"),
            Child::file(
                "tool.py",
                "#!/usr/bin/env python3\n\"\"\"Sync the lock mirrors.\n\nDetails.\n\"\"\"\nimport os\n",
            ),
            Child::file("a.js", "/**\n * Parses a lock query.\n * @param q the query\n */\nexport function p(q) {}\n"),
            Child::file("walk.go", "// Package walk visits lock trees.\npackage walk\n"),
            Child::file("run.sh", "#!/bin/sh\n# Runs the lock tests.\nset -e\n"),
            Child::file("bare.c", "int main(void) { return 0; }\n"),
        ],
    );
    let s = LocalSummarizer.summarize(&d);
    check(&d, &s);
    let g = gists(&s.overview_md);
    let want = [
        ("a.js", "Parses a lock query."),
        ("bare.c", "C source file"),
        ("item.rs", "Takes the lock."),
        ("lib.rs", "Path locks shared on disk."),
        ("run.sh", "Runs the lock tests."),
        ("tool.py", "Sync the lock mirrors."),
        ("walk.go", "Package walk visits lock trees."),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(g, want, "{}", s.overview_md);
    // lib.rs is the crate's root: its description opens the abstract.
    assert!(
        s.abstract_md.starts_with("Path locks shared on disk."),
        "{}",
        s.abstract_md
    );
    assert_eq!(keywords(&s.abstract_md)[0], "lock", "{}", s.abstract_md);
}

#[test]
fn workspace_weights_decide_between_keywords() {
    let d = input(
        "viking://resources/notes",
        (0..6)
            .map(|i| {
                Child::file(
                    format!("{i}.txt"),
                    format!("Git release notes {i}: fixes to git push and git fetch."),
                )
            })
            .collect(),
    );
    let plain = LocalSummarizer.summarize(&d);
    assert_eq!(
        keywords(&plain.abstract_md)[0],
        "git",
        "{}",
        plain.abstract_md
    );
    // In a workspace where nearly every file speaks of git, git is no keyword here.
    let cands = d.keyword_candidates();
    assert!(cands.contains(&"git".to_string()), "{cands:?}");
    let freq: Vec<(&str, u64)> = cands
        .iter()
        .map(|t| (t.as_str(), if t == "git" { 900 } else { 3 }))
        .collect();
    let mut weighted = d.clone();
    weighted.weights = Some(TermWeights::from_doc_freq(1000, freq.iter().copied()));
    let s = LocalSummarizer.summarize(&weighted);
    check(&weighted, &s);
    let k = keywords(&s.abstract_md);
    assert!(!k.contains(&"git".to_string()), "{k:?}");
    assert!(k.contains(&"release".to_string()), "{k:?}");
    // A few more files elsewhere move no keyword.
    let later: Vec<(&str, u64)> = cands
        .iter()
        .map(|t| (t.as_str(), if t == "git" { 903 } else { 3 }))
        .collect();
    weighted.weights = Some(TermWeights::from_doc_freq(1004, later));
    assert_eq!(LocalSummarizer.summarize(&weighted), s);
}

#[test]
fn git_documentation_reads_well() {
    let root = Path::new("/usr/share/doc/git");
    if !root.join("README.md").is_file() {
        crate::support::skip("/usr/share/doc/git (the git package's docs) is not installed");
        return;
    }
    let d = read_tree(root, "viking://resources/gitdocs");
    let s = LocalSummarizer.summarize(&d);
    println!("{}\n---\n{}", s.abstract_md, s.overview_md);
    check(&d, &s);
    // The README's first sentence, as the file has it, opens the abstract.
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat.find("Git is a fast").expect("README.md opens with it");
    let end = start + flat[start..].find(". ").unwrap() + 1;
    let first = &flat[start..end];
    assert!(
        s.abstract_md.starts_with(first),
        "{}\n{first}",
        s.abstract_md
    );
    // Compressed files are named by kind and size.
    let gz = std::fs::metadata(root.join("changelog.gz")).unwrap().len();
    let line = format!(
        "- `changelog.gz` — gzip compressed data, {}\n",
        human_size(gz)
    );
    assert!(s.overview_md.contains(&line), "{}", s.overview_md);
    assert!(!keywords(&s.abstract_md).is_empty(), "{}", s.abstract_md);

    // The release notes: hundreds of files that all say "release notes" and "fixes".
    let rel = read_tree(
        &root.join("RelNotes"),
        "viking://resources/gitdocs/RelNotes",
    );
    let s = LocalSummarizer.summarize(&rel);
    println!("{}\n---\n{}", s.abstract_md, s.overview_md);
    check(&rel, &s);
    assert!(
        s.abstract_md.contains("RelNotes holds"),
        "{}",
        s.abstract_md
    );
    // Titles are setext headings: the gist is the title, without its underline.
    for (name, gist) in gists(&s.overview_md) {
        assert!(!gist.contains("==="), "{name}: {gist}");
    }

    let contrib = read_tree(&root.join("contrib"), "viking://resources/gitdocs/contrib");
    let s = LocalSummarizer.summarize(&contrib);
    println!("{}\n---\n{}", s.abstract_md, s.overview_md);
    check(&contrib, &s);
    assert!(
        s.abstract_md.starts_with("Contributed Software: "),
        "{}",
        s.abstract_md
    );
}

#[test]
fn this_repos_lock_module_reads_well() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lock");
    let d = read_tree(&dir, "viking://resources/lock");
    let s = LocalSummarizer.summarize(&d);
    println!("{}\n---\n{}", s.abstract_md, s.overview_md);
    check(&d, &s);
    let rs = d
        .children
        .iter()
        .filter(|c| c.name.ends_with(".rs"))
        .count();
    assert!(
        s.abstract_md
            .contains(&format!("lock holds {rs} Rust source files")),
        "{}",
        s.abstract_md
    );
    // mod.rs is the module's root: its doc's first words open the abstract.
    let m = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let first = m.lines().next().unwrap().trim_start_matches("//!").trim();
    let opening: String = first
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        s.abstract_md.starts_with(&opening),
        "{}\n{opening}",
        s.abstract_md
    );
    // Every file is described by its own doc comment, markers off: its first line's words.
    let g = gists(&s.overview_md);
    assert_eq!(g.len(), d.children.len(), "{}", s.overview_md);
    for (name, gist) in &g {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let doc = text
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("//!")
            .replace('`', "");
        let opening: Vec<&str> = doc.split_whitespace().take(2).collect();
        assert!(
            gist.starts_with(&opening.join(" ")),
            "{name}: {gist} / {doc}"
        );
        for marker in ["//", "///", "//!", "/*", "*/", "\"\"\""] {
            assert!(!gist.contains(marker), "{name}: {gist}");
        }
        assert!(
            !gist.starts_with('#') && !gist.starts_with('!'),
            "{name}: {gist}"
        );
    }
    let k = keywords(&s.abstract_md);
    assert!(
        k.iter().any(|w| w.to_lowercase().starts_with("lock")),
        "{k:?}"
    );
}

#[test]
fn same_input_in_any_order_gives_identical_bytes() {
    let a = docs();
    let mut b = docs();
    b.children.reverse();
    let sa = LocalSummarizer.summarize(&a);
    assert_eq!(sa, LocalSummarizer.summarize(&b));
    assert_eq!(sa, LocalSummarizer.summarize(&a));
}

#[test]
fn empty_directory_is_described() {
    let s = LocalSummarizer.summarize(&input("viking://resources/empty/", vec![]));
    assert_eq!(s.abstract_md, "empty is empty.");
    assert_eq!(s.overview_md, "# empty\n\nempty is empty.\n");
}

#[test]
fn many_long_children_stay_within_limits() {
    let children = (0..500)
        .map(|i| {
            Child::file(
                format!("file-{i:04}-{}.md", "x".repeat(100)),
                format!("# {}\n", "Heading word ".repeat(60)),
            )
        })
        .collect();
    let s = LocalSummarizer.summarize(&input("viking://resources/big", children));
    assert!(s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS);
    assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
    assert!(s.overview_md.contains("- `file-0000-"));
    assert!(s.overview_md.contains("more\n"), "the cut is said");
    assert!(
        s.abstract_md.contains("big holds 500 Markdown documents."),
        "{}",
        s.abstract_md
    );
}

#[test]
fn multibyte_text_is_cut_by_characters() {
    let children = (0..80)
        .map(|i| {
            Child::file(
                format!("文档{i}.md"),
                "这是一个很长的句子没有空格".repeat(40),
            )
        })
        .chain([Child::file("emoji.md", "🦀".repeat(1000))])
        .collect();
    let s = LocalSummarizer.summarize(&input("viking://resources/中文", children));
    let (a, o) = (s.abstract_md.chars().count(), s.overview_md.chars().count());
    assert!(
        a <= ABSTRACT_MAX_CHARS && o <= OVERVIEW_MAX_CHARS,
        "{a} {o}"
    );
    // The limits were reached in characters, not bytes: the texts hold far more bytes.
    assert!(
        s.overview_md.len() > OVERVIEW_MAX_CHARS,
        "{}",
        s.overview_md.len()
    );
    assert!(
        s.abstract_md.len() > ABSTRACT_MAX_CHARS,
        "{}",
        s.abstract_md
    );
    assert!(
        s.abstract_md.contains("中文 holds 81 Markdown documents"),
        "{}",
        s.abstract_md
    );
}

#[test]
fn local_is_the_default() {
    let s = summarizer_from_config(None).unwrap();
    assert_eq!(s.name(), "local");
    assert_eq!(
        s.summarize(&docs()).unwrap(),
        LocalSummarizer.summarize(&docs())
    );
}

proptest! {
    #[test]
    fn limits_hold_and_output_is_stable_for_any_text(
        texts in proptest::collection::vec(any::<String>(), 0..20),
        names in proptest::collection::vec("[a-zA-Z0-9_ .\u{4e00}-\u{4e20}\u{1}\u{fffd}-]{1,40}", 0..20),
    ) {
        let children: Vec<Child> = names
            .iter()
            .zip(texts.iter().cycle())
            .enumerate()
            .map(|(i, (n, t))| Child { name: n.clone(), is_dir: i % 3 == 0, text: t.clone(), binary: None })
            .collect();
        let input = input("viking://resources/p", children);
        let s = LocalSummarizer.summarize(&input);
        prop_assert!(s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS);
        prop_assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
        let replacement = '\u{FFFD}';
        prop_assert!(!s.abstract_md.contains(replacement) && !s.overview_md.contains(replacement));
        prop_assert!(!s.abstract_md.chars().any(char::is_control));
        prop_assert!(!s.overview_md.chars().any(|c| c.is_control() && c != '\n'));
        prop_assert_eq!(&s, &LocalSummarizer.summarize(&input));
        let mut reversed = input.clone();
        reversed.children.reverse();
        prop_assert_eq!(s, LocalSummarizer.summarize(&reversed));
    }
}

mod conversation {
    use super::*;
    use vikingfs::semantic::memory::Message;

    fn talk() -> Vec<Message> {
        vec![
            Message::new(
                "user",
                "Can you help me plan the Lisbon trip? I fly on Friday.",
            ),
            Message::new(
                "assistant",
                "Sure. The Lisbon trip needs a hotel and a flight.",
            ),
            Message::new("user", "Book the hotel near the river.\nThanks!"),
        ]
    }

    #[test]
    fn archive_summary_names_counts_topic_and_messages() {
        let uri = "viking://user/alice/sessions/s1/history/archive_001";
        let s = LocalSummarizer.summarize_messages(uri, &talk());
        assert!(
            s.abstract_md
                .starts_with("archive_001: a conversation of 3 messages (2 from the user)"),
            "{}",
            s.abstract_md
        );
        // Keywords are shown as written.
        assert!(s.abstract_md.contains("Lisbon"), "{}", s.abstract_md);
        assert!(s
            .abstract_md
            .contains("It opens: Can you help me plan the Lisbon trip?"));
        assert!(s.overview_md.contains("- **assistant**: Sure.\n"));
        assert!(s
            .overview_md
            .contains("- **user**: Book the hotel near the river.\n"));
        assert_eq!(s, LocalSummarizer.summarize_messages(uri, &talk()));
    }

    #[test]
    fn a_parent_of_archives_is_not_about_conversations() {
        let uri = "viking://user/alice/sessions/s1/history/archive_001";
        let a = LocalSummarizer.summarize_messages(uri, &talk());
        let d = input(
            "viking://user/alice/sessions/s1/history",
            vec![
                Child::dir("archive_001", a.abstract_md.clone()),
                Child::dir(
                    "archive_002",
                    a.abstract_md.replace("archive_001", "archive_002"),
                ),
            ],
        );
        let s = LocalSummarizer.summarize(&d);
        check(&d, &s);
        let k = keywords(&s.abstract_md);
        assert!(k.contains(&"Lisbon".to_string()), "{k:?}");
        for w in ["conversation", "messages", "user", "opens"] {
            assert!(!k.contains(&w.to_string()), "{w} in {k:?}");
        }
    }

    #[test]
    fn a_long_multibyte_archive_stays_within_limits() {
        let msgs: Vec<Message> = (0..2000)
            .map(|i| {
                Message::new(
                    ["user", "assistant"][i % 2],
                    "会话内容很长没有空格。".repeat(50),
                )
            })
            .collect();
        let s = LocalSummarizer
            .summarize_messages("viking://user/u/sessions/s/history/archive_002", &msgs);
        assert!(s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS);
        assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
        assert!(s.overview_md.contains("more\n"));
        let empty = LocalSummarizer.summarize_messages("viking://x/archive_003", &[]);
        assert_eq!(
            empty.abstract_md,
            "archive_003: a conversation of 0 messages (0 from the user)."
        );
    }
}
