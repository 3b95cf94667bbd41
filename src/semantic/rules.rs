//! The local memory extractor: deterministic rules over the user's own sentences.
//!
//! Only `user` messages are read (what an assistant says is not a fact about the user). A sentence
//! is skipped when it is a question or hedged ("if", "maybe", ...). The rules match word sequences
//! on lowercased tokens, and take names from the original tokens, so case-folding never shifts a
//! byte offset.
//!
//! - preferences: "I prefer X", "I like/love/enjoy X", "I don't like / dislike / hate X",
//!   "my favourite T is X" -> `preferences/{user}/{topic}.md`
//! - profile: "my name is N", "call me N", "I work at/for O", "I live in P" -> `profile.md`
//!   (and `entities/organizations/{o}.md` for the employer)
//! - entities: "N is my colleague", "my colleague N" -> `entities/people/{n}.md`
//! - events: a sentence with a date (ISO `2026-11-29`, "December 3", "3 December 2026", "today",
//!   "tomorrow", "yesterday", "on Monday" relative to the message time or the archive date) and a
//!   first-person
//!   or event word -> `events/YYYY/MM/DD/{name}.md`

use super::memory::{
    entity_path, event_path, group_facts, preference_path, Date, ExtractContext, Fact, Memory,
    MemoryCategory, Message, PROFILE_PATH,
};

/// The default extractor.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleExtractor;

impl RuleExtractor {
    pub fn extract(&self, ctx: &ExtractContext, messages: &[Message]) -> Vec<Memory> {
        let mut facts = Vec::new();
        for m in messages {
            if !m.role.eq_ignore_ascii_case("user") {
                continue;
            }
            let base = m.date().or(ctx.archive_date);
            for s in sentences(&m.content) {
                extract_sentence(&s, &ctx.user, base, &mut facts);
            }
        }
        group_facts(facts)
    }
}

/// One word of a sentence.
#[derive(Debug, Clone)]
struct Tok {
    orig: String,
    low: String,
    /// The word ended a clause (a `,`, `;` or `:` followed it).
    brk: bool,
}

/// A sentence: its text, its tokens, and whether it asked something.
struct Sentence {
    text: String,
    toks: Vec<Tok>,
    question: bool,
}

fn sentences(content: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = content.chars().peekable();
    while let Some(c) = chars.next() {
        let ends = match c {
            '\n' | '。' | '！' | '？' => true,
            '.' | '!' | '?' | ';' => chars.peek().is_none_or(|n| n.is_whitespace()),
            _ => false,
        };
        if c != '\n' {
            cur.push(c);
        }
        if ends {
            push_sentence(&mut out, &cur);
            cur.clear();
        }
    }
    push_sentence(&mut out, &cur);
    out
}

fn push_sentence(out: &mut Vec<Sentence>, raw: &str) {
    let text = raw.trim();
    if text.is_empty() {
        return;
    }
    let toks = text
        .split_whitespace()
        .filter_map(|w| {
            let brk = w.ends_with([',', ';', ':']);
            let orig = w
                .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’')
                .trim_matches(['\'', '’'])
                .replace('’', "'");
            (!orig.is_empty()).then(|| Tok {
                low: orig.to_lowercase(),
                orig,
                brk,
            })
        })
        .collect();
    out.push(Sentence {
        text: text.split_whitespace().collect::<Vec<_>>().join(" "),
        toks,
        question: text.ends_with(['?', '？']),
    })
}

/// Words that make a sentence hypothetical or a question rather than a statement.
const HEDGES: &str = "if whether maybe perhaps might wonder suppose imagine pretend unsure doubt";
/// Two-word hedges.
const HEDGE_PAIRS: &[[&str; 2]] = &[["not", "sure"], ["don't", "know"], ["no", "idea"]];
const QUESTION_STARTS: &str = "do does did would could should can what which who why how is are";

fn extract_sentence(s: &Sentence, user: &str, base: Option<Date>, out: &mut Vec<Fact>) {
    let t = &s.toks;
    if s.question || t.is_empty() || listed(QUESTION_STARTS, &t[0].low) {
        return;
    }
    if t.iter().any(|w| listed(HEDGES, &w.low))
        || (0..t.len()).any(|i| HEDGE_PAIRS.iter().any(|p| at(t, i, p)))
    {
        return;
    }
    preferences(t, user, out);
    profile_and_entities(t, out);
    events(s, base, out);
}

/// Whether `w` is one of the space-separated words of `list`.
fn listed(list: &str, w: &str) -> bool {
    list.split_ascii_whitespace().any(|x| x == w)
}

fn at(t: &[Tok], i: usize, words: &[&str]) -> bool {
    words.len() <= t.len().saturating_sub(i)
        && words.iter().zip(&t[i..]).all(|(w, tok)| tok.low == *w)
}

// ---- preferences

const LIKES: &[(&[&str], &str)] = &[
    (&["i", "prefer"], "Prefers"),
    (&["i", "really", "prefer"], "Prefers"),
    (&["i", "like"], "Likes"),
    (&["i", "really", "like"], "Likes"),
    (&["i", "love"], "Loves"),
    (&["i", "enjoy"], "Enjoys"),
    (&["i", "don't", "like"], "Dislikes"),
    (&["i", "do", "not", "like"], "Dislikes"),
    (&["i", "dont", "like"], "Dislikes"),
    (&["i", "dislike"], "Dislikes"),
    (&["i", "hate"], "Dislikes"),
    (&["i", "can't", "stand"], "Dislikes"),
];

/// Words that end the object of a preference: what follows is a reason or another clause.
const CLAUSE_ENDS: &str = "because since but when so although though while as and";
/// An object that is only one of these refers to something we cannot see.
const PRONOUNS: &str = "it that this them those these you him her";
/// Leading words dropped from a topic.
const TOPIC_SKIP: &str = "the a an my to using use working with having being it";
/// Words that end a topic: an alternative ("X over Y") or a circumstance ("hiking in the Alps").
const TOPIC_ENDS: &str = "over to than instead rather in on at for during from with";

fn preferences(t: &[Tok], user: &str, out: &mut Vec<Fact>) {
    for i in 0..t.len() {
        for (pat, verb) in LIKES {
            if !at(t, i, pat) {
                continue;
            }
            let obj = object(&t[i + pat.len()..]);
            if obj.is_empty() || (obj.len() == 1 && listed(PRONOUNS, &obj[0].low)) {
                continue;
            }
            let topic = topic_of(obj);
            if topic.is_empty() {
                continue;
            }
            out.push(Fact {
                category: MemoryCategory::Preferences,
                rel_path: preference_path(user, &topic),
                title: format!("Preference: {topic}"),
                text: format!("{verb} {}", join_orig(obj)),
            });
        }
        // "my favourite editor is Helix"
        if at(t, i, &["my", "favourite"]) || at(t, i, &["my", "favorite"]) {
            let rest = &t[i + 2..];
            let Some(is) = rest.iter().position(|w| w.low == "is" || w.low == "are") else {
                continue;
            };
            let topic = &rest[..is];
            let value = object(&rest[is + 1..]);
            if topic.is_empty() || topic.len() > 4 || value.is_empty() {
                continue;
            }
            let topic_words = join_low(topic);
            out.push(Fact {
                category: MemoryCategory::Preferences,
                rel_path: preference_path(user, &topic_words),
                title: format!("Preference: {topic_words}"),
                text: format!("Favourite {topic_words}: {}", join_orig(value)),
            });
        }
    }
}

/// The object of a verb: up to 8 words, ending at a clause break.
fn object(t: &[Tok]) -> &[Tok] {
    let mut n = 0;
    for (k, w) in t.iter().enumerate().take(8) {
        if listed(CLAUSE_ENDS, &w.low) || w.low == "i" {
            break;
        }
        n = k + 1;
        if w.brk {
            break;
        }
    }
    &t[..n]
}

/// A topic: the object's first three words before an alternative or a circumstance, without
/// leading articles.
fn topic_of(obj: &[Tok]) -> String {
    let head: Vec<&Tok> = obj
        .iter()
        .skip_while(|w| listed(TOPIC_SKIP, &w.low))
        .take_while(|w| !listed(TOPIC_ENDS, &w.low))
        .take(3)
        .collect();
    head.iter()
        .map(|w| w.low.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn join_orig(t: &[Tok]) -> String {
    t.iter()
        .map(|w| w.orig.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn join_low(t: &[Tok]) -> String {
    t.iter()
        .map(|w| w.low.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

// ---- profile and entities

const RELATIONS: &str = concat!(
    "colleague coworker co-worker manager boss friend wife husband partner brother sister ",
    "mother father mom dad son daughter teammate mentor doctor neighbour neighbor cousin ",
    "roommate cofounder co-founder",
);
/// Capitalised words that are not names.
const NOT_NAMES: &str = concat!(
    "i this that it he she they there here today tomorrow yesterday what who the a an my ",
    "our his her their which someone nobody everyone not",
);

/// A proper name: up to three capitalised words starting at `t[0]`.
fn name_at(t: &[Tok]) -> Option<&[Tok]> {
    let n = t.iter().take(3).take_while(|w| is_name_word(w)).count();
    // A name stops at a clause break.
    let n = t[..n].iter().position(|w| w.brk).map_or(n, |p| p + 1);
    (n > 0).then(|| &t[..n])
}

fn is_name_word(w: &Tok) -> bool {
    w.orig.chars().next().is_some_and(char::is_uppercase) && !listed(NOT_NAMES, &w.low)
}

fn profile_and_entities(t: &[Tok], out: &mut Vec<Fact>) {
    let profile = |text: String| Fact {
        category: MemoryCategory::Profile,
        rel_path: PROFILE_PATH.to_string(),
        title: "Profile".into(),
        text,
    };
    for i in 0..t.len() {
        for pat in [
            &["my", "name", "is"][..],
            &["call", "me"],
            &["my", "name's"],
        ] {
            if at(t, i, pat) {
                if let Some(n) = name_at(&t[i + pat.len()..]) {
                    out.push(profile(format!("Name: {}", join_orig(n))));
                }
            }
        }
        for pat in [&["i", "work", "at"][..], &["i", "work", "for"]] {
            if at(t, i, pat) {
                if let Some(org) = name_at(&t[i + pat.len()..]) {
                    let org = join_orig(org);
                    out.push(profile(format!("Works at {org}")));
                    out.push(Fact {
                        category: MemoryCategory::Entities,
                        rel_path: entity_path("organizations", &org),
                        title: org.clone(),
                        text: format!("The user works at {org}"),
                    });
                }
            }
        }
        for pat in [&["i", "live", "in"][..], &["i'm", "based", "in"]] {
            if at(t, i, pat) {
                if let Some(place) = name_at(&t[i + pat.len()..]) {
                    out.push(profile(format!("Lives in {}", join_orig(place))));
                }
            }
        }
        // "Anna is my colleague"
        if at(t, i, &["is", "my"]) && i > 0 {
            if let Some(rel) = t.get(i + 2).filter(|w| listed(RELATIONS, &w.low)) {
                let start = (0..i)
                    .rev()
                    .take_while(|&k| is_name_word(&t[k]) && i - k <= 3)
                    .last();
                if let Some(start) = start {
                    person(&t[start..i], &rel.low, out);
                }
            }
        }
        // "my colleague Anna"
        if at(t, i, &["my"]) {
            if let Some(rel) = t.get(i + 1).filter(|w| listed(RELATIONS, &w.low)) {
                if let Some(n) = t.get(i + 2..).and_then(name_at) {
                    person(n, &rel.low, out);
                }
            }
        }
    }
}

fn person(name: &[Tok], rel: &str, out: &mut Vec<Fact>) {
    let name = join_orig(name);
    out.push(Fact {
        category: MemoryCategory::Entities,
        rel_path: entity_path("people", &name),
        title: name.clone(),
        text: format!("{name} is the user's {rel}"),
    });
}

// ---- events

const FIRST_PERSON: &str = "i we my our i'm i'll i've i'd we're we'll we've me us";
const EVENT_WORDS: &str = concat!(
    "meeting appointment call deadline interview flight trip birthday conference party ",
    "dinner lunch release launch demo exam wedding holiday vacation standup review ",
    "workshop",
);
const MONTHS: &str = concat!(
    "january february march april may june july august september october november ",
    "december",
);
const WEEKDAYS: &str = "monday tuesday wednesday thursday friday saturday sunday";
/// Words left out of an event's file name.
const NAME_SKIP: &str = concat!(
    "on at in the a an is was will be have has had to of and for with we i my our i'm ",
    "i'll i've we're we'll me us am are today tomorrow yesterday st nd rd th",
);

fn events(s: &Sentence, base: Option<Date>, out: &mut Vec<Fact>) {
    let t = &s.toks;
    let cue = t
        .iter()
        .any(|w| listed(FIRST_PERSON, &w.low) || listed(EVENT_WORDS, &w.low));
    if !cue {
        return;
    }
    let Some((date, used)) = find_date(t, base) else {
        return;
    };
    let name_words: Vec<&str> = t
        .iter()
        .enumerate()
        .filter(|(k, w)| {
            !used.contains(k)
                && !listed(NAME_SKIP, &w.low)
                && !w.low.chars().all(|c| c.is_ascii_digit())
        })
        .map(|(_, w)| w.low.as_str())
        .take(5)
        .collect();
    let name = if name_words.is_empty() {
        "event".to_string()
    } else {
        name_words.join(" ")
    };
    out.push(Fact {
        category: MemoryCategory::Events,
        rel_path: event_path(date, &name),
        title: format!("{date}: {name}"),
        text: s.text.clone(),
    });
}

/// The first date of a sentence and the token indexes it spans.
fn find_date(t: &[Tok], base: Option<Date>) -> Option<(Date, Vec<usize>)> {
    for (i, w) in t.iter().enumerate() {
        if let Some(d) = Date::parse_iso(&w.low) {
            return Some((d, vec![i]));
        }
        let rel = match w.low.as_str() {
            "today" => Some(0),
            "tomorrow" => Some(1),
            "yesterday" => Some(-1),
            _ => None,
        };
        if let Some(n) = rel {
            // Without a message time or archive date a relative day cannot be placed.
            return base.and_then(|b| Some((b.add_days(n)?, vec![i])));
        }
        // "on Monday", "next Friday": the next such day after the reference date.
        let after_on = i > 0 && matches!(t[i - 1].low.as_str(), "on" | "next" | "this");
        if let Some(wd) = weekday_of(&w.low).filter(|_| after_on) {
            let b = base?;
            let ahead = (wd - b.weekday()).rem_euclid(7);
            let ahead = if ahead == 0 { 7 } else { ahead };
            return Some((b.add_days(ahead)?, vec![i - 1, i]));
        }
        if let Some(m) = month_of(&w.low) {
            // "December 3[rd][, 2026]"
            if let Some(day) = t.get(i + 1).and_then(|n| day_of(&n.low)) {
                let year = t.get(i + 2).and_then(|n| year_of(&n.low));
                let mut span = vec![i, i + 1];
                if year.is_some() {
                    span.push(i + 2);
                }
                if let Some(d) = year
                    .or(base.map(|b| b.year))
                    .and_then(|y| Date::new(y, m, day))
                {
                    return Some((d, span));
                }
            }
            // "3 December [2026]"
            if let Some(day) = i.checked_sub(1).and_then(|p| day_of(&t[p].low)) {
                let year = t.get(i + 1).and_then(|n| year_of(&n.low));
                let mut span = vec![i - 1, i];
                if year.is_some() {
                    span.push(i + 1);
                }
                if let Some(d) = year
                    .or(base.map(|b| b.year))
                    .and_then(|y| Date::new(y, m, day))
                {
                    return Some((d, span));
                }
            }
        }
    }
    None
}

fn month_of(w: &str) -> Option<u32> {
    // "may" is also a verb: only its capitalised use would be a month, and tokens are lowercase
    // here, so require the full name and leave "may" out.
    (w != "may")
        .then(|| MONTHS.split_ascii_whitespace().position(|m| m == w))
        .flatten()
        .map(|p| p as u32 + 1)
}

/// Monday = 0.
fn weekday_of(w: &str) -> Option<i64> {
    WEEKDAYS
        .split_ascii_whitespace()
        .position(|d| d == w)
        .map(|p| p as i64)
}

fn day_of(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") || digits.is_empty() || digits.len() > 2 {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn year_of(w: &str) -> Option<i32> {
    (w.len() == 4 && w.bytes().all(|c| c.is_ascii_digit()))
        .then(|| w.parse().ok())
        .flatten()
}
