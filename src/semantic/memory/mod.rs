//! Session messages and the memories extracted from them, laid out as OpenViking lays them out
//! under `viking://user/{uid}/memories/`.
//!
//! Owns: the `messages.jsonl` line format ([`Message`], [`parse_messages`]), the memory layout
//! ([`preference_path`], [`entity_path`], [`event_path`], [`PROFILE_PATH`]), grouping facts into
//! files, the merge rule for an existing memory file and the `memory_diff.json` types. The
//! extractors live in `rules` (local) and `chat`. Everything here is pure: the session job reads
//! and writes the files.
//!
//! A memory file is a markdown title line followed by one `- fact` line per fact, and maybe
//! its fields last ([`fields`]: the commits its facts came from). Merging only ever appends
//! fact lines that are not already present (before the fields), which makes applying the same
//! memories twice a no-op: a resumed commit job writes every memory exactly once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::uri::check_component;

mod date;
pub mod fields;
mod message;

pub use date::Date;
pub use message::{parse_messages, InvalidLine, Message, ParsedMessages};

/// `memories/profile.md`, relative to `viking://user/{uid}/memories/`.
pub const PROFILE_PATH: &str = "profile.md";
/// The longest file-name stem a memory gets (before `.md`).
const NAME_MAX_CHARS: usize = 64;

// ---------------------------------------------------------------------------------------------
// Memories and their layout

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryCategory {
    Preferences,
    Entities,
    Events,
    Profile,
}

/// One memory file's worth of facts. `rel_path` is relative to `viking://user/{uid}/memories/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub category: MemoryCategory,
    pub rel_path: String,
    /// The whole file for a new memory: `# title`, a blank line, then `- fact` lines.
    pub content: String,
}

impl Memory {
    /// The `- fact` lines of the content.
    pub fn facts(&self) -> impl Iterator<Item = &str> {
        fact_lines(&self.content)
    }

    /// The title line without its `# ` marker.
    pub fn title(&self) -> &str {
        let first = self.content.lines().next().unwrap_or("");
        first.strip_prefix("# ").unwrap_or("").trim()
    }
}

fn fact_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with("- "))
}

/// Turn free text into one safe path component: lowercase letters and digits (any script), other
/// runs turned into `_`, at most 64 characters, never empty, never hidden or internal.
pub fn sanitize_name(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let cut: String = out.trim_matches('_').chars().take(NAME_MAX_CHARS).collect();
    let cut = cut.trim_end_matches('_').to_string();
    if cut.is_empty() || check_component(&cut, &cut).is_err() {
        "unnamed".to_string()
    } else {
        cut
    }
}

/// `preferences/{user}/{topic}.md`
pub fn preference_path(user: &str, topic: &str) -> String {
    format!(
        "preferences/{}/{}.md",
        sanitize_name(user),
        sanitize_name(topic)
    )
}

/// `entities/{category}/{name}.md`
pub fn entity_path(category: &str, name: &str) -> String {
    format!(
        "entities/{}/{}.md",
        sanitize_name(category),
        sanitize_name(name)
    )
}

/// `events/YYYY/MM/DD/{name}.md`
pub fn event_path(date: Date, name: &str) -> String {
    format!(
        "events/{:04}/{:02}/{:02}/{}.md",
        date.year,
        date.month,
        date.day,
        sanitize_name(name)
    )
}

/// One extracted fact, before facts about the same file are grouped into a [`Memory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub category: MemoryCategory,
    pub rel_path: String,
    pub title: String,
    /// The fact, one line, without the `- ` marker.
    pub text: String,
}

/// Group facts by file: one [`Memory`] per path, sorted by path, facts in first-seen order and
/// without duplicates. The title of a file is that of its first fact.
pub fn group_facts(facts: Vec<Fact>) -> Vec<Memory> {
    let mut files: BTreeMap<String, (MemoryCategory, String, Vec<String>)> = BTreeMap::new();
    for f in facts {
        let line = one_line(&f.text);
        if line.is_empty() {
            continue;
        }
        let e = files
            .entry(f.rel_path)
            .or_insert_with(|| (f.category, one_line(&f.title), Vec::new()));
        if !e.2.contains(&line) {
            e.2.push(line);
        }
    }
    files
        .into_iter()
        .map(|(rel_path, (category, title, lines))| {
            let mut content = format!("# {title}\n\n");
            for l in lines {
                content.push_str(&format!("- {l}\n"));
            }
            Memory {
                category,
                rel_path,
                content,
            }
        })
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// Merge and memory_diff.json

/// What to do with one memory file given what is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Every fact is already there: write nothing.
    Unchanged,
    /// No file yet: write this.
    Create(String),
    /// Append fact lines: the new full content and the lines it adds.
    Append { content: String, added: Vec<String> },
}

/// The merge rule: a fact line is appended only when no identical line (ignoring trailing
/// spaces) is present; nothing is ever removed or reordered.
pub fn merge_memory(existing: Option<&str>, new: &Memory) -> Merge {
    let Some(old) = existing else {
        return Merge::Create(new.content.clone());
    };
    // Facts go after the facts, before the fields block (which stays last).
    let (old, kept) = fields::split(old);
    let present: Vec<&str> = old.lines().map(str::trim_end).collect();
    let added: Vec<String> = new
        .facts()
        .filter(|f| !present.contains(f))
        .map(str::to_string)
        .collect();
    if added.is_empty() {
        return Merge::Unchanged;
    }
    let mut content = old.to_string();
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    for l in &added {
        content.push_str(l);
        content.push('\n');
    }
    if let Some(f) = kept {
        content = fields::join(&content, &f);
    }
    Merge::Append { content, added }
}

/// `memory_diff.json` of an archive: what its commit changed under `memories/`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryDiff {
    pub adds: Vec<DiffEntry>,
    pub updates: Vec<DiffEntry>,
    pub deletes: Vec<DiffEntry>,
    pub summary: DiffSummary,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffEntry {
    /// `viking://user/{uid}/memories/{rel_path}`
    pub uri: String,
    pub rel_path: String,
    pub category: MemoryCategory,
    /// The file's title (its first line without `# `), so an entry can be re-applied alone.
    pub title: String,
    /// The fact lines added (for an add, every fact line of the new file).
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffSummary {
    pub total_adds: usize,
    pub total_updates: usize,
    pub total_deletes: usize,
    /// Memories whose facts were all present already.
    pub unchanged: usize,
    /// Lines of the archive that were not valid messages.
    pub invalid_lines: usize,
}

/// A file the commit job should write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWrite {
    pub rel_path: String,
    pub content: String,
}

/// Decide every write for `memories`, reading current files through `read(rel_path)`, and the
/// diff describing them. `memories_uri` is `viking://user/{uid}/memories`.
///
/// For a resumable job, persist the returned diff before writing: re-applying its entries with
/// [`apply_diff_entry`] is idempotent, and it stays the true record even if the extractor (a chat
/// model) would answer differently on a rerun.
pub fn plan_memory_writes(
    memories: &[Memory],
    memories_uri: &str,
    invalid_lines: usize,
    mut read: impl FnMut(&str) -> Option<String>,
) -> (Vec<MemoryWrite>, MemoryDiff) {
    let mut writes = Vec::new();
    let mut diff = MemoryDiff::default();
    let base = memories_uri.trim_end_matches('/');
    for m in memories {
        let entry = |lines: Vec<String>| DiffEntry {
            uri: format!("{base}/{}", m.rel_path),
            rel_path: m.rel_path.clone(),
            category: m.category,
            title: m.title().to_string(),
            lines,
        };
        match merge_memory(read(&m.rel_path).as_deref(), m) {
            Merge::Unchanged => diff.summary.unchanged += 1,
            Merge::Create(content) => {
                diff.adds
                    .push(entry(m.facts().map(str::to_string).collect()));
                writes.push(MemoryWrite {
                    rel_path: m.rel_path.clone(),
                    content,
                });
            }
            Merge::Append { content, added } => {
                diff.updates.push(entry(added));
                writes.push(MemoryWrite {
                    rel_path: m.rel_path.clone(),
                    content,
                });
            }
        }
    }
    diff.summary.total_adds = diff.adds.len();
    diff.summary.total_updates = diff.updates.len();
    diff.summary.invalid_lines = invalid_lines;
    (writes, diff)
}

/// Re-apply one add or update of a persisted diff: the new content, or `None` when every line is
/// present already.
pub fn apply_diff_entry(existing: Option<&str>, entry: &DiffEntry) -> Option<String> {
    let mut content = format!("# {}\n\n", one_line(&entry.title));
    for l in &entry.lines {
        content.push_str(l);
        content.push('\n');
    }
    let m = Memory {
        category: entry.category,
        rel_path: entry.rel_path.clone(),
        content,
    };
    match merge_memory(existing, &m) {
        Merge::Unchanged => None,
        Merge::Create(c) | Merge::Append { content: c, .. } => Some(c),
    }
}

/// What an extractor needs besides the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractContext {
    /// The user id: `preferences/{user}/...`.
    pub user: String,
    /// The archive's date: resolves "tomorrow" in messages that carry no time of their own.
    pub archive_date: Option<Date>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_makes_safe_components() {
        assert_eq!(sanitize_name("Dark Mode"), "dark_mode");
        assert_eq!(sanitize_name("../../etc/passwd"), "etc_passwd");
        assert_eq!(sanitize_name(".vikingfs.x"), "vikingfs_x");
        assert_eq!(sanitize_name("///"), "unnamed");
        assert_eq!(sanitize_name("Café Zürich"), "café_zürich");
        assert_eq!(sanitize_name(&"長".repeat(300)).chars().count(), 64);
    }
}
