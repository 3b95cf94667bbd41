//! Directory summaries: limits, multibyte text, determinism and content of the local summariser.

use proptest::prelude::*;
use vikingfs::semantic::summarizer_from_config;
use vikingfs::semantic::summary::{
    Child, DirInput, LocalSummarizer, ABSTRACT_MAX_CHARS, OVERVIEW_MAX_CHARS,
};

fn docs() -> DirInput {
    DirInput {
        uri: "viking://resources/docs".into(),
        children: vec![
            Child::file(
                "locks.md",
                "# Path locks\n\nThe lock engine takes EXACT and TREE locks on paths.",
            ),
            Child::file(
                "queue.md",
                "A durable queue keeps jobs. Workers take jobs from the queue and retry them.",
            ),
            Child::dir("guides", "guides holds 3 files about install, lock, queue."),
            Child::file(".abstract.md", "old abstract that must not be summarised"),
            Child::file(".overview.md", "old overview"),
        ],
    }
}

#[test]
fn overview_lists_each_child_with_its_gist() {
    let s = LocalSummarizer.summarize(&docs());
    assert!(s.overview_md.starts_with("# docs\n"), "{}", s.overview_md);
    assert!(s.overview_md.contains("- `locks.md`: Path locks\n"));
    assert!(s
        .overview_md
        .contains("- `queue.md`: A durable queue keeps jobs.\n"));
    assert!(s.overview_md.contains("- `guides/`: guides holds 3 files"));
    assert!(
        !s.overview_md.contains("old abstract"),
        "sidecars are not content"
    );
    assert!(
        s.abstract_md
            .starts_with("docs holds 2 files and 1 directory"),
        "{}",
        s.abstract_md
    );
    // "queue" appears in three children: it must be among the salient words.
    assert!(s.abstract_md.contains("queue"), "{}", s.abstract_md);
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
    let s = LocalSummarizer.summarize(&DirInput {
        uri: "viking://resources/empty/".into(),
        children: vec![],
    });
    assert_eq!(s.abstract_md, "empty holds 0 files.");
    assert!(s.overview_md.contains("empty"));
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
    let s = LocalSummarizer.summarize(&DirInput {
        uri: "viking://resources/big".into(),
        children,
    });
    assert!(s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS);
    assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
    assert!(s.overview_md.contains("- `file-0000-"));
    assert!(s.overview_md.contains("more\n"), "the cut is said");
    assert!(s.abstract_md.starts_with("big holds 500 files"));
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
    let s = LocalSummarizer.summarize(&DirInput {
        uri: "viking://resources/中文".into(),
        children,
    });
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
    assert!(s.abstract_md.starts_with("中文 holds 81 files"));
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
        names in proptest::collection::vec("[a-zA-Z0-9_ .\u{4e00}-\u{4e20}-]{1,40}", 0..20),
    ) {
        let children: Vec<Child> = names
            .iter()
            .zip(texts.iter().cycle())
            .enumerate()
            .map(|(i, (n, t))| Child { name: n.clone(), is_dir: i % 3 == 0, text: t.clone(), binary: None })
            .collect();
        let input = DirInput { uri: "viking://resources/p".into(), children };
        let s = LocalSummarizer.summarize(&input);
        prop_assert!(s.abstract_md.chars().count() <= ABSTRACT_MAX_CHARS);
        prop_assert!(s.overview_md.chars().count() <= OVERVIEW_MAX_CHARS);
        prop_assert_eq!(s, LocalSummarizer.summarize(&input));
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
        assert!(s.abstract_md.contains("lisbon"), "{}", s.abstract_md);
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
