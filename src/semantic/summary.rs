//! Directory summaries: the local extractive summariser and the length limits every summariser
//! obeys.
//!
//! Pure functions of a [`DirInput`]: no I/O, no clock, no randomness, so that a regeneration of an
//! unchanged directory produces byte-identical `.abstract.md` / `.overview.md` (and the job handler
//! can skip the write-back). Limits are counted in characters (`char`s), never bytes, and cuts
//! only ever happen on char boundaries.

use std::collections::{BTreeMap, BTreeSet};

use super::memory::Message;
use crate::uri::{is_internal_name, is_sidecar_name};

/// The most characters `.abstract.md` may hold.
pub const ABSTRACT_MAX_CHARS: usize = 256;
/// The most characters `.overview.md` may hold.
pub const OVERVIEW_MAX_CHARS: usize = 4000;
/// The most characters of one child's gist in the overview.
const GIST_MAX_CHARS: usize = 160;
/// How many salient keywords the abstract names.
const KEYWORDS: usize = 5;
/// Only this much of each child's text is read: the gist and keywords come from the head.
const TEXT_SCAN_CHARS: usize = 8000;

/// One entry of the directory being summarised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub name: String,
    pub is_dir: bool,
    /// A file's leading content, or a child directory's `.abstract.md` (may be empty).
    pub text: String,
    /// A file that is not text: its kind and size in words ("gzip compressed data, 12 KiB");
    /// its `text` is empty, and it is only ever named, never quoted.
    pub binary: Option<String>,
}

impl Child {
    pub fn file(name: impl Into<String>, text: impl Into<String>) -> Child {
        Child {
            name: name.into(),
            is_dir: false,
            text: text.into(),
            binary: None,
        }
    }

    /// A file that is not text, by its kind (`crate::content::sniff`) and size.
    pub fn binary(name: impl Into<String>, kind: impl Into<String>, size: u64) -> Child {
        Child {
            name: name.into(),
            is_dir: false,
            text: String::new(),
            binary: Some(format!(
                "{}, {}",
                kind.into(),
                crate::content::human_size(size)
            )),
        }
    }

    pub fn dir(name: impl Into<String>, abstract_text: impl Into<String>) -> Child {
        Child {
            name: name.into(),
            is_dir: true,
            text: abstract_text.into(),
            binary: None,
        }
    }
}

/// What a summariser is given: the directory's URI and its children, in any order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirInput {
    pub uri: String,
    pub children: Vec<Child>,
}

impl DirInput {
    /// The children a summary talks about, sorted by name so the input order never matters.
    /// Sidecars and lock/internal files are the directory's machinery, not its content.
    pub fn content_children(&self) -> Vec<&Child> {
        let mut v: Vec<&Child> = self
            .children
            .iter()
            .filter(|c| !is_sidecar_name(&c.name) && !is_internal_name(&c.name))
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name).then(a.is_dir.cmp(&b.is_dir)));
        v
    }

    /// The last component of the URI (`viking://resources/docs` -> `docs`).
    pub fn dir_name(&self) -> &str {
        uri_name(&self.uri)
    }
}

fn uri_name(uri: &str) -> &str {
    let t = uri.trim_end_matches('/');
    let name = t.rsplit('/').next().unwrap_or(t);
    if name.is_empty() || name.ends_with(':') {
        t
    } else {
        name
    }
}

/// The two sidecar texts of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub abstract_md: String,
    pub overview_md: String,
}

impl Summary {
    /// Cut both texts to their limits (a no-op for texts already within them).
    pub fn enforce_limits(self) -> Summary {
        Summary {
            abstract_md: truncate_chars(self.abstract_md.trim(), ABSTRACT_MAX_CHARS),
            overview_md: truncate_chars(&self.overview_md, OVERVIEW_MAX_CHARS),
        }
    }
}

/// The default summariser: extractive, local and deterministic.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSummarizer;

impl LocalSummarizer {
    pub fn summarize(&self, input: &DirInput) -> Summary {
        let children = input.content_children();
        let gists: Vec<String> = children.iter().map(|c| gist(&c.text)).collect();
        let keywords = salient_keywords(&children, KEYWORDS);
        let abstract_md = make_abstract(input.dir_name(), &children, &gists, &keywords);
        let overview_md = make_overview(input.dir_name(), &abstract_md, &children, &gists);
        Summary {
            abstract_md,
            overview_md,
        }
        .enforce_limits()
    }

    /// The summary of an archived conversation (a session archive's sidecars): how many
    /// messages, what they are mostly about, the first thing the user said, and a line per
    /// message with its gist.
    pub fn summarize_messages(&self, uri: &str, messages: &[Message]) -> Summary {
        let name = uri_name(uri);
        // Messages as nameless children, so salience works as for files.
        let children: Vec<Child> = messages
            .iter()
            .map(|m| Child::file(String::new(), m.content.clone()))
            .collect();
        let refs: Vec<&Child> = children.iter().collect();
        let keywords = salient_keywords(&refs, KEYWORDS);
        let from_user = messages.iter().filter(|m| m.role == "user").count();
        let mut first = format!(
            "{name}: a conversation of {} ({from_user} from the user)",
            counted(messages.len(), "message", "messages")
        );
        if !keywords.is_empty() {
            first.push_str(&format!(", mostly about {}", keywords.join(", ")));
        }
        first.push('.');
        let opening = messages
            .iter()
            .find(|m| m.role == "user")
            .map(|m| gist(&m.content))
            .filter(|g| !g.is_empty());
        let abstract_md = match opening {
            Some(g) => truncate_words(
                &format!("{first} It opens: {}", sentence(&g)),
                ABSTRACT_MAX_CHARS,
            ),
            None => truncate_words(&first, ABSTRACT_MAX_CHARS),
        };
        let mut overview = format!("# {name}\n\n{abstract_md}\n\n## Messages\n\n");
        let lines: Vec<String> = messages
            .iter()
            .map(|m| format!("- **{}**: {}\n", one_line(&m.role), gist(&m.content)))
            .collect();
        push_lines_within(&mut overview, &lines);
        Summary {
            abstract_md,
            overview_md: overview,
        }
        .enforce_limits()
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Append list lines while they fit in the overview limit, then say how many were left out.
fn push_lines_within(out: &mut String, lines: &[String]) {
    let mut budget = OVERVIEW_MAX_CHARS.saturating_sub(out.chars().count());
    for (i, line) in lines.iter().enumerate() {
        let n = line.chars().count();
        let rest = lines.len() - i - 1;
        // Keep room for the "and N more" line unless this is the last entry.
        let reserve = if rest > 0 { 40 } else { 0 };
        if n + reserve > budget {
            out.push_str(&format!("- … and {} more\n", lines.len() - i));
            break;
        }
        out.push_str(line);
        budget -= n;
    }
}

fn make_abstract(dir: &str, children: &[&Child], gists: &[String], keywords: &[String]) -> String {
    let files = children.iter().filter(|c| !c.is_dir).count();
    let dirs = children.len() - files;
    let mut first = format!("{dir} holds {}", counted(files, "file", "files"));
    if dirs > 0 {
        first.push_str(&format!(
            " and {}",
            counted(dirs, "directory", "directories")
        ));
    }
    if !keywords.is_empty() {
        first.push_str(&format!(", mostly about {}", keywords.join(", ")));
    }
    first.push('.');
    // The second sentence is the most informative single gist: the only child's, or the first
    // non-empty one (children are sorted, so this is stable).
    let second = gists.iter().find(|g| !g.is_empty());
    let text = match second {
        Some(g) => format!("{first} {}", sentence(g)),
        None => first,
    };
    truncate_words(&text, ABSTRACT_MAX_CHARS)
}

fn make_overview(dir: &str, abstract_md: &str, children: &[&Child], gists: &[String]) -> String {
    let mut out = format!("# {dir}\n\n{abstract_md}\n");
    if children.is_empty() {
        out.push_str("\nThis directory is empty.\n");
        return out;
    }
    out.push_str("\n## Contents\n\n");
    let lines: Vec<String> = children
        .iter()
        .zip(gists)
        .map(|(c, g)| {
            let name = if c.is_dir {
                format!("{}/", c.name)
            } else {
                c.name.clone()
            };
            if g.is_empty() {
                format!("- `{name}`\n")
            } else {
                format!("- `{name}`: {g}\n")
            }
        })
        .collect();
    push_lines_within(&mut out, &lines);
    out
}

fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// End a gist as a sentence.
fn sentence(g: &str) -> String {
    if g.ends_with(['.', '!', '?', '…', '。']) {
        g.to_string()
    } else {
        format!("{g}.")
    }
}

/// The gist of a text: its first markdown heading, else its first sentence, as one line of at
/// most 160 characters with markdown markers stripped.
pub fn gist(text: &str) -> String {
    let head: String = text.chars().take(TEXT_SCAN_CHARS).collect();
    let body = strip_front_matter(&head);
    let mut paragraph = String::new();
    for line in body.lines() {
        let t = line.trim();
        if let Some(h) = heading_text(t) {
            if paragraph.is_empty() {
                return finish_gist(h);
            }
            break;
        }
        if t.is_empty() || t.starts_with("```") || t.starts_with("<!--") {
            if !paragraph.is_empty() {
                break;
            }
            continue;
        }
        if !paragraph.is_empty() {
            paragraph.push(' ');
        }
        paragraph.push_str(t.trim_start_matches(['-', '*', '>', '+', ' ']));
    }
    finish_gist(first_sentence(&paragraph))
}

fn finish_gist(s: &str) -> String {
    let clean: String = s
        .chars()
        .filter(|c| !matches!(c, '*' | '`' | '_' | '#'))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let collapsed = clean.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_words(&collapsed, GIST_MAX_CHARS)
}

fn heading_text(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches('#');
    let level = line.len() - rest.len();
    if (1..=6).contains(&level) && (rest.starts_with(' ') || rest.is_empty()) {
        let h = rest.trim();
        (!h.is_empty()).then_some(h)
    } else {
        None
    }
}

fn strip_front_matter(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix("---\n") {
        if let Some(end) = rest.find("\n---") {
            let after = &rest[end + 4..];
            return after.strip_prefix('\n').unwrap_or(after);
        }
    }
    text
}

/// The text up to and including the first sentence end (`.`, `!`, `?` followed by a space or the
/// end, or a CJK full stop).
fn first_sentence(p: &str) -> &str {
    let mut it = p.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let end = i + c.len_utf8();
        match c {
            '。' | '！' | '？' => return &p[..end],
            '.' | '!' | '?' => match it.peek() {
                None => return &p[..end],
                Some((_, n)) if n.is_whitespace() => return &p[..end],
                _ => {}
            },
            _ => {}
        }
    }
    p
}

/// The first `max` characters of `s`; when cut, the last one is `…`.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) => {
            let keep: String = s.chars().take(max - 1).collect();
            format!("{}…", keep.trim_end())
        }
    }
}

/// Like [`truncate_chars`], but prefers to cut at a word boundary when one is near.
pub fn truncate_words(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let hard = truncate_chars(s, max);
    let body = hard.trim_end_matches('…');
    match body.rfind(char::is_whitespace) {
        // Only back up to a space within the last fifth; CJK text may have none at all.
        Some(i) if body[..i].chars().count() >= max * 4 / 5 => {
            format!("{}…", body[..i].trim_end_matches([',', ';', ':', ' ']))
        }
        _ => hard,
    }
}

/// Words of a text for salience: lowercase alphanumeric runs of at least 3 characters that are
/// not stop words or numbers.
pub fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .map(|w| fold_plural(w.to_lowercase()))
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
}

/// `locks` and `lock` are one keyword: drop a plural `s` (but not from `-ss`, `-us`, `-is`).
fn fold_plural(mut w: String) -> String {
    if w.chars().count() >= 5
        && w.ends_with('s')
        && !["ss", "us", "is"].iter().any(|e| w.ends_with(e))
    {
        w.pop();
    }
    w
}

/// Keywords salient across the children: a term scores its number of children times the log of
/// its total count, so a word shared by several files beats one repeated in a single file.
/// Ties break alphabetically, so the result is a pure function of the input.
pub fn salient_keywords(children: &[&Child], n: usize) -> Vec<String> {
    let mut tf: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for c in children {
        let head: String = c.text.chars().take(TEXT_SCAN_CHARS).collect();
        let name_terms = terms(c.name.rsplit_once('.').map_or(&c.name[..], |(s, _)| s));
        let mut seen = BTreeSet::new();
        for t in terms(&head).chain(name_terms) {
            let e = tf.entry(t.clone()).or_insert((0, 0));
            e.1 += 1;
            if seen.insert(t) {
                e.0 += 1;
            }
        }
    }
    let mut scored: Vec<(f64, String)> = tf
        .into_iter()
        .filter(|(_, (df, total))| *df >= 2 || *total >= 2 || children.len() == 1)
        .map(|(t, (df, total))| (df as f64 * (1.0 + (total as f64).ln()), t))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, t)| t).collect()
}

const STOP_WORDS: &[&str] = &[
    "about", "after", "all", "also", "and", "any", "are", "because", "been", "before", "being",
    "but", "can", "could", "did", "does", "doing", "each", "for", "from", "had", "has", "have",
    "her", "here", "him", "his", "how", "into", "its", "just", "may", "more", "most", "must",
    "not", "now", "only", "other", "our", "out", "over", "own", "same", "she", "should", "some",
    "such", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
    "those", "through", "too", "under", "until", "use", "used", "using", "very", "was", "were",
    "what", "when", "where", "which", "while", "who", "why", "will", "with", "would", "you",
    "your", "http", "https", "www", "com", "md", "txt",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gist_prefers_heading_then_first_sentence() {
        assert_eq!(gist("# Install guide\n\nRun make."), "Install guide");
        assert_eq!(
            gist("Locks keep paths safe. They expire after 30 s."),
            "Locks keep paths safe."
        );
        assert_eq!(gist("---\ntitle: x\n---\n## Real *title*\n"), "Real title");
        assert_eq!(gist("version 1.2 is out! more"), "version 1.2 is out!");
        assert_eq!(gist(""), "");
    }

    #[test]
    fn truncation_counts_chars_and_keeps_utf8() {
        let s = "日本語".repeat(200);
        let t = truncate_chars(&s, 256);
        assert_eq!(t.chars().count(), 256);
        assert!(t.ends_with('…'));
        assert_eq!(truncate_chars("short", 256), "short");
        let w = truncate_words(&"word ".repeat(100), 50);
        assert!(w.chars().count() <= 50 && w.ends_with("word…"), "{w:?}");
    }

    #[test]
    fn keywords_favour_terms_shared_by_children() {
        let a = Child::file("a.md", "The lock engine takes path locks. Lock files.");
        let b = Child::file("b.md", "A queue with lock tokens and queue rows.");
        let kids = [&a, &b];
        let k = salient_keywords(&kids, 3);
        assert_eq!(k[0], "lock");
        assert!(k.contains(&"queue".to_string()), "{k:?}");
    }
}
