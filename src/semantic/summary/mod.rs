//! Directory summaries: the local extractive summariser, and the length limits every
//! summariser obeys.
//!
//! This module owns what a summary written without a model says and how it is laid out. The
//! abstract opens with the directory's own words — its README's title and first sentence,
//! else those of its main document — then says what it holds in words ("12 Markdown
//! documents, 3 Rust source files and 1 subdirectory"), then names its keywords, weighted
//! against the rest of the workspace when [`DirInput::weights`] is given. The overview lists
//! each child with its gist: a document's title or first sentence, a code file's own
//! description (doc comments, markers off), a binary's kind and size, a subdirectory's
//! abstract without its keywords. How text is read is in `text`, keywords in `keywords`,
//! kinds of file in `kinds`.
//!
//! Pure functions of a [`DirInput`]: no I/O, no clock, no randomness, so that a regeneration of
//! an unchanged directory produces byte-identical `.abstract.md` / `.overview.md` (and the job
//! handler can skip the write-back; a summary that changed by itself would propagate to every
//! parent again). Limits are counted in characters (`char`s), never bytes, and cuts only ever
//! happen on char boundaries. What is quoted carries no control or replacement characters.

mod keywords;
mod kinds;
mod text;

use std::collections::BTreeMap;

pub use keywords::TermWeights;

use super::memory::Message;
use crate::uri::{is_internal_name, is_sidecar_name};
use keywords::Vocabulary;
use kinds::{kind_of, Kind};
use text::{lead_of, quotable, syntax_of, Lead, Syntax};

/// The most characters `.abstract.md` may hold.
pub const ABSTRACT_MAX_CHARS: usize = 256;
/// The most characters `.overview.md` may hold.
pub const OVERVIEW_MAX_CHARS: usize = 4000;
/// The most characters of one child's gist in the overview.
const GIST_MAX_CHARS: usize = 160;
/// How many keywords the abstract names.
const KEYWORDS: usize = 5;
/// How many words [`DirInput::keyword_candidates`] offers for workspace statistics: enough
/// that a word rare in the workspace but only middling in the directory still gets its chance.
const CANDIDATES: usize = 64;
/// Kinds of file named one by one in the abstract; the rest are "other files".
const KINDS_NAMED: usize = 4;
/// A directory of only subdirectories, and no text of its own, names them up to this many.
const SUBDIRS_NAMED: usize = 6;
/// A lead shorter than this is followed by the next main document's.
const LEAD_SHORT_CHARS: usize = 80;
/// When the abstract must be cut, the lead keeps at least this much.
const LEAD_MIN_CHARS: usize = 140;

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

/// What a summariser is given: the directory's URI and its children, in any order, and
/// optionally how rare the directory's words are in the rest of the workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirInput {
    pub uri: String,
    pub children: Vec<Child>,
    /// Workspace statistics for the words of [`DirInput::keyword_candidates`]; `None`: the
    /// keywords are weighed within the directory alone (the chat summariser ignores this).
    pub weights: Option<TermWeights>,
}

impl DirInput {
    /// The children a summary talks about, sorted (by name first) so the input order never
    /// matters. Sidecars and lock/internal files are the directory's machinery, not its
    /// content.
    pub fn content_children(&self) -> Vec<&Child> {
        let mut v: Vec<&Child> = self
            .children
            .iter()
            .filter(|c| !is_sidecar_name(&c.name) && !is_internal_name(&c.name))
            .collect();
        v.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(a.is_dir.cmp(&b.is_dir))
                .then_with(|| a.text.cmp(&b.text))
                .then_with(|| a.binary.cmp(&b.binary))
        });
        v
    }

    /// The last component of the URI (`viking://resources/docs` -> `docs`).
    pub fn dir_name(&self) -> &str {
        uri_name(&self.uri)
    }

    /// The words worth workspace statistics, as written in the children: the best keyword
    /// candidates by their weight within the directory. Their document frequencies make the
    /// [`DirInput::weights`].
    pub fn keyword_candidates(&self) -> Vec<String> {
        let children = self.content_children();
        let seen: Vec<Seen> = children.iter().map(|c| Seen::of(c)).collect();
        vocabulary(&seen).keywords(None, CANDIDATES)
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

/// What the summariser read of one child.
struct Seen {
    /// A file's syntax (`None` for a directory or a binary).
    syntax: Option<Syntax>,
    lead: Lead,
    /// A file's kind (`None` for a directory).
    kind: Option<Kind>,
    /// The text its keywords are counted in: its name's words, then its own.
    terms: String,
}

impl Seen {
    fn of(c: &Child) -> Seen {
        let stem = if c.is_dir {
            c.name.as_str()
        } else {
            c.name.rsplit_once('.').map_or(&c.name[..], |(s, _)| s)
        };
        if c.is_dir {
            return Seen {
                syntax: None,
                lead: Lead::default(),
                kind: None,
                terms: format!("{stem}\n{}", strip_own_wording(&c.name, &c.text)),
            };
        }
        if c.binary.is_some() {
            return Seen {
                syntax: None,
                lead: Lead::default(),
                kind: Some(kind_of(c)),
                terms: stem.to_string(),
            };
        }
        let syntax = syntax_of(&c.name, &c.text);
        Seen {
            syntax: Some(syntax),
            lead: lead_of(syntax, &c.text),
            kind: Some(kind_of(c)),
            terms: format!("{stem}\n{}", text::keyword_text(syntax, &c.text)),
        }
    }
}

fn vocabulary(seen: &[Seen]) -> Vocabulary {
    Vocabulary::of(seen.iter().map(|r| r.terms.as_str()))
}

/// A child directory's abstract without the sentence this module writes about every
/// directory ("x holds 3 Rust source files…"): counts and kinds of file, not topics. The
/// keywords after it stay, and so do those of the older wording and of session archives
/// ("x holds 8 files, mostly about a, b.", "x: a conversation of …, mostly about a, b.").
fn strip_own_wording(name: &str, abstract_text: &str) -> String {
    let mut t = quotable(abstract_text);
    for marker in [
        format!("{name} holds "),
        format!("{name} is empty."),
        format!("{name}: a conversation of "),
    ] {
        // Where the sentence starts: the beginning, or after the lead's last sentence.
        let Some(at) = t
            .match_indices(&marker)
            .map(|(i, _)| i)
            .find(|&i| i == 0 || t[..i].ends_with(' '))
        else {
            continue;
        };
        let rest = &t[at..];
        let first_stop = rest.find(". ").map_or(rest.len(), |i| i + 1);
        let sentence = &rest[..first_stop];
        let (end, keep) = match sentence.split_once(", mostly about ") {
            Some((_, k)) => (first_stop, k.to_string()),
            // This wording: the sentence runs to the keywords (kinds may hold dots, names
            // too), or to the end.
            None => (
                rest.find(". Keywords: ").map_or(rest.len(), |i| i + 1),
                String::new(),
            ),
        };
        t = quotable(&format!("{}{keep}{}", &t[..at], &rest[end..]));
    }
    t
}

/// The default summariser: extractive, local and deterministic.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSummarizer;

impl LocalSummarizer {
    pub fn summarize(&self, input: &DirInput) -> Summary {
        let dir = quotable(input.dir_name());
        let children = input.content_children();
        let seen: Vec<Seen> = children.iter().map(|c| Seen::of(c)).collect();
        let keywords = vocabulary(&seen).keywords(input.weights.as_ref(), KEYWORDS);
        let lead = directory_lead(&children, &seen);
        let abstract_md = make_abstract(&dir, &lead, &children, &seen, &keywords);
        let overview_md = make_overview(&dir, &abstract_md, &children, &seen);
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
        let name = quotable(uri_name(uri));
        let keywords =
            Vocabulary::of(messages.iter().map(|m| m.content.as_str())).keywords(None, KEYWORDS);
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
            .map(|m| format!("- **{}**: {}\n", quotable(&m.role), gist(&m.content)))
            .collect();
        push_lines_within(&mut overview, &lines);
        Summary {
            abstract_md,
            overview_md: overview,
        }
        .enforce_limits()
    }
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

/// How a README is ranked: a plain `README` / `README.md` / `README.txt` first, then any
/// other `readme.*` (`README.Debian`), then an `index.md`; `None` for other names.
fn readme_rank(name: &str) -> Option<u8> {
    let lower = name.to_lowercase();
    let (stem, ext) = lower.split_once('.').unwrap_or((&lower, ""));
    match (stem, ext) {
        ("readme", "" | "md" | "markdown" | "txt" | "rst" | "adoc" | "org") => Some(0),
        ("readme", _) => Some(1),
        ("index", "md" | "markdown" | "rst" | "txt" | "adoc") => Some(2),
        _ => None,
    }
}

/// Names that say "this is the main file here": a crate's or package's root module.
fn is_central_name(name: &str) -> bool {
    matches!(
        name.to_lowercase().as_str(),
        "mod.rs"
            | "lib.rs"
            | "main.rs"
            | "__init__.py"
            | "__main__.py"
            | "main.py"
            | "doc.go"
            | "main.go"
            | "index.js"
            | "index.ts"
            | "main.c"
            | "overview.md"
            | "intro.md"
            | "introduction.md"
    )
}

/// `LICENSE`, `COPYING.md`, `LICENSE-MIT`, Debian's `copyright`: a licence says nothing of
/// what the directory is for.
fn is_licence_name(name: &str) -> bool {
    let lower = name.to_lowercase();
    ["license", "licence", "copying", "copyright", "notice"]
        .iter()
        .any(|l| lower.starts_with(l))
}

/// The directory's own words: its README's lead, else its main documents' (the central
/// ones, then the largest), as sentences. Empty when no text file says anything.
fn directory_lead(children: &[&Child], seen: &[Seen]) -> String {
    let texts: Vec<(&Child, &Seen)> = children
        .iter()
        .copied()
        .zip(seen)
        .filter(|(c, r)| {
            !c.is_dir && r.syntax.is_some() && r.lead.gist().is_some() && !is_licence_name(&c.name)
        })
        .collect();
    let readme = texts
        .iter()
        .filter_map(|(c, r)| readme_rank(&c.name).map(|rank| (rank, *c, *r)))
        .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    if let Some((_, _, r)) = readme {
        return lead_sentences(&r.lead);
    }
    let mut main: Vec<&(&Child, &Seen)> = texts.iter().collect();
    main.sort_by(|(a, _), (b, _)| {
        is_central_name(&b.name)
            .cmp(&is_central_name(&a.name))
            .then_with(|| b.text.chars().count().cmp(&a.text.chars().count()))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut lead = String::new();
    for (_, r) in main.into_iter().take(2) {
        let l = lead_sentences(&r.lead);
        if l.is_empty() || lead.contains(&l) {
            continue;
        }
        if !lead.is_empty() {
            lead.push(' ');
        }
        lead.push_str(&l);
        if lead.chars().count() >= LEAD_SHORT_CHARS {
            break;
        }
    }
    lead
}

/// A lead as the abstract's opening: `Title: first sentence.` (the title left out when the
/// sentence says it already), a second sentence when the first is short.
fn lead_sentences(lead: &Lead) -> String {
    let mut body = String::new();
    for s in lead.sentences.iter().take(2) {
        // "For example:" introduces what follows, which the abstract does not quote: under a
        // title it says nothing.
        if lead.title.is_some() && s.ends_with(':') {
            break;
        }
        if !body.is_empty() {
            if body.chars().count() >= LEAD_SHORT_CHARS / 2 {
                break;
            }
            body.push(' ');
        }
        body.push_str(&sentence(s));
    }
    let title = lead
        .title
        .as_deref()
        .filter(|t| !words_within(t, &body))
        .map(str::trim);
    match title {
        None => body,
        Some(t) if body.is_empty() => sentence(t),
        Some(t) if t.ends_with(['.', '!', '?', ':']) => format!("{t} {body}"),
        Some(t) => format!("{t}: {body}"),
    }
}

/// Whether every word of `a` is a word of `b` (case aside).
fn words_within(a: &str, b: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let bw = words(b);
    let aw = words(a);
    !aw.is_empty() && aw.iter().all(|w| bw.contains(w))
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// "x holds 3 Markdown documents, 1 gzip file and 2 subdirectories." (`full`), or only the
/// counts of files and subdirectories (`!full`), or "x is empty.".
fn holds_sentence(
    dir: &str,
    children: &[&Child],
    seen: &[Seen],
    full: bool,
    names: bool,
) -> String {
    if children.is_empty() {
        return format!("{dir} is empty.");
    }
    let dirs: Vec<&Child> = children.iter().copied().filter(|c| c.is_dir).collect();
    let files = children.len() - dirs.len();
    let mut parts: Vec<String> = Vec::new();
    if full {
        let mut by_kind: BTreeMap<&Kind, usize> = BTreeMap::new();
        for r in seen {
            if let Some(k) = &r.kind {
                *by_kind.entry(k).or_default() += 1;
            }
        }
        let mut kinds: Vec<(&Kind, usize)> = by_kind.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let named = if kinds.len() > KINDS_NAMED {
            KINDS_NAMED - 1
        } else {
            kinds.len()
        };
        for (k, n) in &kinds[..named] {
            parts.push(k.counted(*n));
        }
        let others: usize = kinds[named..].iter().map(|(_, n)| n).sum();
        if others > 0 {
            parts.push(counted(others, "other file", "other files"));
        }
    } else if files > 0 {
        parts.push(counted(files, "file", "files"));
    }
    if !dirs.is_empty() {
        parts.push(counted(dirs.len(), "subdirectory", "subdirectories"));
    }
    let mut s = format!("{dir} holds {}", join_and(&parts));
    if names && files == 0 && dirs.len() <= SUBDIRS_NAMED {
        let names: Vec<String> = dirs.iter().map(|d| quotable(&d.name)).collect();
        s.push_str(&format!(": {}", join_and(&names)));
    }
    sentence(&s)
}

/// Lead, what the directory holds, keywords — within [`ABSTRACT_MAX_CHARS`]: a long lead is
/// kept whole at the cost of detail in the rest, and cut only when nothing else makes room.
fn make_abstract(
    dir: &str,
    lead: &str,
    children: &[&Child],
    seen: &[Seen],
    keywords: &[String],
) -> String {
    let no_lead = lead.is_empty();
    let full = holds_sentence(dir, children, seen, true, no_lead);
    let short = holds_sentence(dir, children, seen, false, no_lead);
    let tail = |holds: &str, k: usize| -> String {
        let k = k.min(keywords.len());
        if k == 0 {
            holds.to_string()
        } else {
            format!("{holds} Keywords: {}.", keywords[..k].join(", "))
        }
    };
    let tails: Vec<String> = [
        (&full, 5),
        (&full, 4),
        (&full, 3),
        (&short, 5),
        (&short, 4),
        (&short, 3),
        (&full, 2),
        (&short, 2),
        (&full, 1),
        (&short, 1),
        (&full, 0),
        (&short, 0),
    ]
    .iter()
    .map(|(h, k)| tail(h, *k))
    .collect();
    let len = |s: &str| s.chars().count();
    let joined = |l: &str, t: &str| {
        if l.is_empty() {
            t.to_string()
        } else {
            format!("{l} {t}")
        }
    };
    for t in &tails {
        if len(lead) + len(t) < ABSTRACT_MAX_CHARS || (no_lead && len(t) <= ABSTRACT_MAX_CHARS) {
            return joined(lead, t);
        }
    }
    // The lead alone is too long: cut it, keeping the most of the rest that leaves it enough.
    for t in &tails {
        let room = ABSTRACT_MAX_CHARS.saturating_sub(len(t) + 1);
        if room >= LEAD_MIN_CHARS {
            return joined(&truncate_words(lead, room), t);
        }
    }
    truncate_words(&joined(lead, &short), ABSTRACT_MAX_CHARS)
}

/// One overview line per child: a file's gist (a code file's description, a document's title
/// or first sentence), a binary's kind and size, a subdirectory's abstract without its
/// keywords.
fn make_overview(dir: &str, abstract_md: &str, children: &[&Child], seen: &[Seen]) -> String {
    let mut out = format!("# {dir}\n\n{abstract_md}\n");
    if children.is_empty() {
        return out;
    }
    out.push_str("\n## Contents\n\n");
    let lines: Vec<String> = children
        .iter()
        .zip(seen)
        .map(|(c, r)| {
            let name = quotable(&c.name);
            let (name, gist) = if c.is_dir {
                // What the subdirectory is and holds, not its keywords: those are words of
                // its own children, which this listing does not show (and whose removal it
                // would only hear of once the subdirectory's summary is redone).
                let abs = quotable(&c.text);
                let said = abs.split_once(" Keywords: ").map_or(&abs[..], |(s, _)| s);
                (format!("{name}/"), said.to_string())
            } else if let Some(b) = &c.binary {
                (name, quotable(b))
            } else {
                let g = r.lead.gist().map(str::to_string).unwrap_or_else(|| {
                    // Code that does not describe itself is named by its kind.
                    match (r.syntax, &r.kind) {
                        (Some(s), Some(k)) if s != Syntax::Prose && !c.text.trim().is_empty() => {
                            k.one.clone()
                        }
                        _ => String::new(),
                    }
                });
                (name, g)
            };
            let gist = truncate_words(&gist, GIST_MAX_CHARS);
            if gist.is_empty() {
                format!("- `{name}`\n")
            } else {
                format!("- `{name}` — {gist}\n")
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
    let g = g.trim_end_matches([':', ';', ',', ' ']);
    if g.ends_with(['.', '!', '?', '…', '。', '！', '？']) {
        g.to_string()
    } else {
        format!("{g}.")
    }
}

/// The gist of a prose text: its first heading, else its first sentence, as one line of at
/// most 160 characters with markup taken off.
pub fn gist(text: &str) -> String {
    let lead = lead_of(Syntax::Prose, text);
    truncate_words(lead.gist().unwrap_or(""), GIST_MAX_CHARS)
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
        assert_eq!(gist("version 1.2 is out! More"), "version 1.2 is out!");
        assert_eq!(gist(""), "");
    }

    #[test]
    fn a_child_abstract_loses_its_counts_but_keeps_its_topics() {
        let new = "Release notes of git. notes holds 3 text files, 1.0 KiB. Keywords: fixes, push.";
        assert_eq!(
            strip_own_wording("notes", new),
            "Release notes of git. Keywords: fixes, push."
        );
        let old = "notes holds 8 files, mostly about git, release. GIT v1 Release Notes.";
        assert_eq!(
            strip_own_wording("notes", old),
            "git, release. GIT v1 Release Notes."
        );
        let cut = "A long lead here. notes holds 2 shell scripts and 1 Perl…";
        assert_eq!(strip_own_wording("notes", cut), "A long lead here.");
        assert_eq!(strip_own_wording("e", "e is empty."), "");
        // Another directory's name in the text is not this one's sentence.
        assert_eq!(
            strip_own_wording("x", "box holds 3 files."),
            "box holds 3 files."
        );
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
}
