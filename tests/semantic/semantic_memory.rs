//! Session messages and memories: parsing, the rule extractor on realistic conversations (and
//! what it must not extract), layout, merge, idempotence and `memory_diff.json`.

use std::collections::BTreeMap;

use vikingfs::semantic::extractor_from_config;
use vikingfs::semantic::memory::{
    apply_diff_entry, merge_memory, parse_messages, plan_memory_writes, Date, ExtractContext,
    Memory, MemoryCategory, MemoryDiff, Merge, Message,
};
use vikingfs::semantic::rules::RuleExtractor;
use vikingfs::uri::VPath;

fn ctx() -> ExtractContext {
    ExtractContext {
        user: "alice".into(),
        archive_date: Date::parse_iso("2026-11-29"),
    }
}

fn user(text: &str) -> Message {
    Message::new("user", text)
}

fn paths(ms: &[Memory]) -> Vec<&str> {
    ms.iter().map(|m| m.rel_path.as_str()).collect()
}

fn find<'a>(ms: &'a [Memory], path: &str) -> &'a Memory {
    ms.iter()
        .find(|m| m.rel_path == path)
        .unwrap_or_else(|| panic!("no memory {path} in {:?}", paths(ms)))
}

#[test]
fn parse_keeps_valid_messages_and_reports_invalid_lines_verbatim() {
    let text = concat!(
        r#"{"role":"user","content":"hi","id":"m1","time":"2026-11-29T10:00:00Z","client":{"v":2}}"#,
        "\n",
        "not json at all\n",
        "\n",
        r#"{"role":"assistant","content":[{"type":"text","text":"hello"},{"type":"image_url"}],"id":7}"#,
        "\r\n",
        r#"{"content":"no role"}"#,
        "\n",
        r#"["an","array"]"#,
        "\n",
        r#"{"role":"user","content":"partial"#,
    );
    let p = parse_messages(text);
    assert_eq!(p.messages.len(), 2);
    let m = &p.messages[0];
    assert_eq!(
        (m.role.as_str(), m.content.as_str(), m.id.as_deref()),
        ("user", "hi", Some("m1"))
    );
    assert_eq!(m.date(), Date::parse_iso("2026-11-29"));
    assert_eq!(p.messages[1].content, "hello");
    assert_eq!(p.messages[1].id.as_deref(), Some("7"));
    let lines: Vec<(usize, &str)> = p
        .invalid
        .iter()
        .map(|l| (l.line, l.text.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (2, "not json at all"),
            (5, r#"{"content":"no role"}"#),
            (6, r#"["an","array"]"#),
            (7, r#"{"role":"user","content":"partial"#),
        ]
    );
    assert!(
        p.invalid[1].error.contains("role"),
        "{}",
        p.invalid[1].error
    );
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    let line = r#"{"role":"user","content":"x","created_at":1795953600,"meta":{"a":[1,2]}}"#;
    let m = Message::parse_line(line).unwrap();
    assert_eq!(
        m.date(),
        Date::parse_iso("2026-11-29"),
        "created_at is a time"
    );
    let via_serde: Message = serde_json::from_str(line).unwrap();
    assert_eq!(via_serde, m);
    let e = serde_json::from_str::<Message>(r#"{"content":"x"}"#).unwrap_err();
    assert!(e.to_string().contains("role"), "{e}");
    let back: serde_json::Value = serde_json::from_str(&m.to_line()).unwrap();
    let orig: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(back, orig);
}

const CONVERSATION: &[(&str, &str)] = &[
    (
        "user",
        "Hi! My name is Alice Martin. I work at Acme Robotics, and I live in Lyon.",
    ),
    (
        "assistant",
        "Nice to meet you, Alice. I prefer concise answers myself.",
    ),
    (
        "user",
        "I prefer dark mode over light mode. I don't like tabs, because they render badly.",
    ),
    (
        "user",
        "My favourite editor is Helix. I love hiking in the Alps.",
    ),
    (
        "user",
        "Bob Stone is my colleague. My manager Carla reviews my code.",
    ),
    ("user", "On 2026-12-03 I have a dentist appointment."),
    ("user", "Tomorrow we have the quarterly planning meeting!"),
    // Negatives: none of these may produce a memory.
    ("user", "Do you prefer vim or emacs?"),
    ("user", "If I liked tea I would say so. Maybe I like jazz."),
    ("user", "I'd like to book a table. I would like a summary."),
    ("user", "I like it. I work at home on Fridays."),
    ("user", "My name is not important here."),
    (
        "user",
        "This is my colleague's laptop. My colleague said hello.",
    ),
    (
        "user",
        "The log file was created on 2026-11-01 by the build.",
    ),
    ("user", "What did we do yesterday?"),
    (
        "assistant",
        "On 2026-12-24 I will remind you. My name is Viking.",
    ),
];

fn conversation() -> Vec<Message> {
    CONVERSATION
        .iter()
        .map(|(r, c)| Message::new(*r, *c))
        .collect()
}

#[test]
fn rules_extract_preferences_entities_profile_and_events() {
    let ms = RuleExtractor.extract(&ctx(), &conversation());
    assert_eq!(
        paths(&ms),
        vec![
            "entities/organizations/acme_robotics.md",
            "entities/people/bob_stone.md",
            "entities/people/carla.md",
            "events/2026/11/30/quarterly_planning_meeting.md",
            "events/2026/12/03/dentist_appointment.md",
            "preferences/alice/dark_mode.md",
            "preferences/alice/editor.md",
            "preferences/alice/hiking.md",
            "preferences/alice/tabs.md",
            "profile.md",
        ]
    );
    let profile: Vec<&str> = find(&ms, "profile.md").facts().collect();
    assert_eq!(
        profile,
        vec![
            "- Name: Alice Martin",
            "- Works at Acme Robotics",
            "- Lives in Lyon"
        ]
    );
    assert_eq!(
        find(&ms, "preferences/alice/dark_mode.md").content,
        "# Preference: dark mode\n\n- Prefers dark mode over light mode\n"
    );
    let tabs: Vec<&str> = find(&ms, "preferences/alice/tabs.md").facts().collect();
    assert_eq!(tabs, vec!["- Dislikes tabs"]);
    let editor: Vec<&str> = find(&ms, "preferences/alice/editor.md").facts().collect();
    assert_eq!(editor, vec!["- Favourite editor: Helix"]);
    let bob: Vec<&str> = find(&ms, "entities/people/bob_stone.md").facts().collect();
    assert_eq!(bob, vec!["- Bob Stone is the user's colleague"]);
    let event = find(&ms, "events/2026/11/30/quarterly_planning_meeting.md");
    assert_eq!(event.category, MemoryCategory::Events);
    assert!(event
        .content
        .contains("Tomorrow we have the quarterly planning meeting!"));
    // Every path is a valid namespace path under memories/.
    let base = VPath::parse_uri("viking://user/alice/memories", "alice").unwrap();
    for m in &ms {
        base.join_rel(&m.rel_path)
            .unwrap_or_else(|e| panic!("{}: {e}", m.rel_path));
    }
}

#[test]
fn relative_days_follow_the_message_time_then_the_archive_date() {
    let mut m = user("Yesterday I moved to Berlin.");
    m.time = Some("2026-03-01T08:00:00Z".into());
    let ms = RuleExtractor.extract(&ctx(), &[m]);
    assert_eq!(paths(&ms), vec!["events/2026/02/28/moved_berlin.md"]);

    let no_time = [user("Tomorrow I fly to Oslo for the conference.")];
    let ms = RuleExtractor.extract(&ctx(), &no_time);
    assert_eq!(paths(&ms), vec!["events/2026/11/30/fly_oslo_conference.md"]);

    let undated = ExtractContext {
        user: "alice".into(),
        archive_date: None,
    };
    assert!(
        RuleExtractor.extract(&undated, &no_time).is_empty(),
        "a relative day with no reference date is not guessed"
    );
    // 2026-11-29 is a Sunday.
    let weekday = [
        user("The design review meeting is on Friday."),
        user("On Sunday I rest."),
    ];
    let ms = RuleExtractor.extract(&ctx(), &weekday);
    assert_eq!(
        paths(&ms),
        vec![
            "events/2026/12/04/design_review_meeting.md",
            "events/2026/12/06/rest.md",
        ]
    );
    let named = [user("My sister's wedding is on 14 February 2027.")];
    let ms = RuleExtractor.extract(&undated, &named);
    assert_eq!(paths(&ms), vec!["events/2027/02/14/sister_s_wedding.md"]);
}

#[test]
fn extraction_is_deterministic_and_a_rerun_writes_nothing() {
    let msgs = conversation();
    let first = RuleExtractor.extract(&ctx(), &msgs);
    assert_eq!(first, RuleExtractor.extract(&ctx(), &msgs));

    let uri = "viking://user/alice/memories";
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    files.insert(
        "profile.md".into(),
        "# Profile\n\n- Name: Alice Martin\n- Speaks French".into(),
    );
    let (writes, diff) = plan_memory_writes(&first, uri, 3, |p| files.get(p).cloned());
    assert_eq!(diff.adds.len(), first.len() - 1);
    assert_eq!(diff.updates.len(), 1);
    assert_eq!(
        diff.updates[0].uri,
        "viking://user/alice/memories/profile.md"
    );
    assert_eq!(
        diff.updates[0].lines,
        vec!["- Works at Acme Robotics", "- Lives in Lyon"]
    );
    assert_eq!(diff.summary.invalid_lines, 3);
    for w in writes {
        files.insert(w.rel_path, w.content);
    }
    assert_eq!(
        files["profile.md"],
        "# Profile\n\n- Name: Alice Martin\n- Speaks French\n- Works at Acme Robotics\n- Lives in Lyon\n"
    );

    let again = RuleExtractor.extract(&ctx(), &msgs);
    let (writes, diff) = plan_memory_writes(&again, uri, 0, |p| files.get(p).cloned());
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(diff.summary.unchanged, first.len());
    assert_eq!(
        (diff.summary.total_adds, diff.summary.total_updates),
        (0, 0)
    );
}

#[test]
fn merge_appends_only_missing_fact_lines() {
    let m = Memory {
        category: MemoryCategory::Preferences,
        rel_path: "preferences/alice/tea.md".into(),
        content: "# Preference: tea\n\n- Likes green tea\n- Dislikes milk in tea\n".into(),
    };
    assert_eq!(merge_memory(None, &m), Merge::Create(m.content.clone()));
    assert_eq!(
        merge_memory(
            Some("# old title\n- Likes green tea  \n- Dislikes milk in tea\n"),
            &m
        ),
        Merge::Unchanged
    );
    assert_eq!(
        merge_memory(Some("# Preference: tea\n\n- Likes green tea"), &m),
        Merge::Append {
            content: "# Preference: tea\n\n- Likes green tea\n- Dislikes milk in tea\n".into(),
            added: vec!["- Dislikes milk in tea".into()],
        }
    );
}

#[test]
fn memory_diff_serialises_and_reapplies_idempotently() {
    let ms = RuleExtractor.extract(&ctx(), &[user("I prefer dark mode.")]);
    let (_, diff) = plan_memory_writes(&ms, "viking://user/alice/memories", 0, |_| None);
    let json = serde_json::to_value(&diff).unwrap();
    assert_eq!(json["summary"]["total_adds"], 1);
    assert_eq!(json["adds"][0]["category"], "preferences");
    assert_eq!(json["adds"][0]["title"], "Preference: dark mode");
    assert_eq!(
        json["adds"][0]["uri"],
        "viking://user/alice/memories/preferences/alice/dark_mode.md"
    );
    assert!(json["updates"].as_array().unwrap().is_empty());
    assert!(json["deletes"].as_array().unwrap().is_empty());
    let back: MemoryDiff = serde_json::from_value(json).unwrap();
    assert_eq!(back, diff);

    let entry = &back.adds[0];
    let written = apply_diff_entry(None, entry).unwrap();
    assert_eq!(written, ms[0].content);
    assert_eq!(apply_diff_entry(Some(&written), entry), None);
}

#[test]
fn hostile_names_become_safe_components() {
    let ms = RuleExtractor.extract(
        &ExtractContext {
            user: "../../etc".into(),
            archive_date: None,
        },
        &[user(
            "I prefer ../../.vikingfs.lock files. My favourite / is //.",
        )],
    );
    for m in &ms {
        assert!(!m.rel_path.contains(".."), "{}", m.rel_path);
        assert!(m.rel_path.starts_with("preferences/etc/"), "{}", m.rel_path);
        VPath::from_rel(&format!("user/u/memories/{}", m.rel_path)).unwrap();
    }
    assert!(!ms.is_empty());
}

#[test]
fn rule_extractor_is_the_default() {
    let e = extractor_from_config(None).unwrap();
    assert_eq!(e.name(), "local");
    let ms = e.extract(&ctx(), &conversation()).unwrap();
    assert_eq!(ms, RuleExtractor.extract(&ctx(), &conversation()));
}

#[test]
fn a_second_conversation_with_mixed_punctuation_and_scripts() {
    let msgs = [
        Message::new(
            "system",
            "You are a helpful assistant. I prefer short answers.",
        ),
        user("hey there — I’m Jo. Call me Jo Ramos.\nI really like Rust; I hate YAML."),
        user("我喜欢绿茶。 I love café crème."),
        user("my friend Zoë Kraus is visiting. We have a team lunch on December 12th."),
        Message::new("assistant", "Noted! I like Rust too."),
        user("Honestly, I don't know. Would you like coffee? I'm not sure I like sushi."),
    ];
    let ms = RuleExtractor.extract(&ctx(), &msgs);
    assert_eq!(
        paths(&ms),
        vec![
            "entities/people/zoë_kraus.md",
            "events/2026/12/12/team_lunch.md",
            "preferences/alice/café_crème.md",
            "preferences/alice/rust.md",
            "preferences/alice/yaml.md",
            "profile.md",
        ]
    );
    assert_eq!(
        find(&ms, "profile.md").facts().collect::<Vec<_>>(),
        vec!["- Name: Jo Ramos"]
    );
    assert_eq!(
        find(&ms, "preferences/alice/rust.md")
            .facts()
            .collect::<Vec<_>>(),
        vec!["- Likes Rust"]
    );
    assert_eq!(
        find(&ms, "entities/people/zoë_kraus.md")
            .facts()
            .collect::<Vec<_>>(),
        vec!["- Zoë Kraus is the user's friend"]
    );
}

proptest::proptest! {
    #[test]
    fn any_conversation_gives_valid_stable_paths(
        texts in proptest::collection::vec(
            proptest::string::string_regex(
                "((I prefer|I like|my favourite|My name is|On 2026-0[1-9]-1[0-9]|Tomorrow I|[A-Z][a-z]+ is my friend|\\.\\./|[a-zA-Zé中 ]{1,12})[ .,!?]{0,2}){1,8}"
            ).unwrap(),
            0..8,
        )
    ) {
        let msgs: Vec<Message> = texts.iter().map(|t| user(t)).collect();
        let a = RuleExtractor.extract(&ctx(), &msgs);
        proptest::prop_assert_eq!(&a, &RuleExtractor.extract(&ctx(), &msgs));
        for m in &a {
            proptest::prop_assert!(
                VPath::from_rel(&format!("user/alice/memories/{}", m.rel_path)).is_ok(),
                "{}", m.rel_path
            );
            proptest::prop_assert!(m.facts().count() >= 1);
        }
    }
}
