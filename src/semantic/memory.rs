//! Session messages and the memories extracted from them, laid out as OpenViking lays them out
//! under `viking://user/{uid}/memories/`.
//!
//! Owns: the `messages.jsonl` line format ([`Message`], [`parse_messages`]), the memory layout
//! ([`preference_path`], [`entity_path`], [`event_path`], [`PROFILE_PATH`]), the local rule-based
//! extractor, the merge rule for an existing memory file and the `memory_diff.json` types.
//! Everything here is pure: the session job reads and writes the files.
//!
//! A memory file is a markdown title line followed by one `- fact` line per fact. Merging only
//! ever appends fact lines that are not already present, which makes applying the same memories
//! twice a no-op: a resumed commit job writes every memory exactly once.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::uri::check_component;

/// `memories/profile.md`, relative to `viking://user/{uid}/memories/`.
pub const PROFILE_PATH: &str = "profile.md";
/// The longest file-name stem a memory gets (before `.md`).
const NAME_MAX_CHARS: usize = 64;

// ---------------------------------------------------------------------------------------------
// Messages

/// One line of a session's `messages.jsonl`.
///
/// Besides OpenViking's `role` and `content` it accepts an `id` and a `time` (also read from
/// `created_at` or `timestamp`, as a string or epoch number). Every other field is kept in `extra`
/// so re-serialising a message loses nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            id: None,
            time: None,
            extra: Map::new(),
        }
    }

    /// Parse one `messages.jsonl` line; the error says what is wrong with it.
    pub fn parse_line(line: &str) -> Result<Message, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        Message::try_from(v)
    }

    /// The message as one `messages.jsonl` line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a Message always serialises")
    }

    /// The day this message was sent, from `time`, `created_at` or `timestamp`.
    pub fn date(&self) -> Option<Date> {
        if let Some(d) = self.time.as_deref().and_then(Date::from_time) {
            return Some(d);
        }
        ["created_at", "timestamp"]
            .iter()
            .find_map(|k| match self.extra.get(*k) {
                Some(Value::String(s)) => Date::from_time(s),
                Some(Value::Number(n)) => Date::from_time(&n.to_string()),
                _ => None,
            })
    }
}

impl TryFrom<Value> for Message {
    type Error = String;

    fn try_from(v: Value) -> Result<Message, String> {
        let Value::Object(mut map) = v else {
            return Err("not a JSON object".into());
        };
        let role = match map.remove("role") {
            Some(Value::String(r)) if !r.trim().is_empty() => r,
            Some(_) => return Err("\"role\" is not a non-empty string".into()),
            None => return Err("no \"role\"".into()),
        };
        let content = match map.remove("content") {
            Some(Value::String(s)) => s,
            // OpenAI's content parts: keep the text ones.
            Some(Value::Array(parts)) => text_of_parts(&parts)?,
            Some(_) => return Err("\"content\" is not a string or a list of parts".into()),
            None => match map.get("parts") {
                Some(Value::Array(parts)) => text_of_parts(parts)?,
                _ => return Err("no \"content\"".into()),
            },
        };
        let id = match map.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err("\"id\" is not a string or number".into()),
        };
        // `created_at` / `timestamp` (other writers' names) stay in `extra` so they round-trip;
        // [`Message::date`] falls back to them.
        let time = match map.remove("time") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err("\"time\" is not a string or number".into()),
        };
        Ok(Message {
            role,
            content,
            id,
            time,
            extra: map,
        })
    }
}

fn text_of_parts(parts: &[Value]) -> Result<String, String> {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    if texts.is_empty() && !parts.is_empty() {
        return Err("content parts hold no text".into());
    }
    Ok(texts.join("\n"))
}

/// A `messages.jsonl` line that is not a valid message: archived and reported verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub text: String,
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedMessages {
    pub messages: Vec<Message>,
    pub invalid: Vec<InvalidLine>,
}

/// Split a `messages.jsonl` text into valid messages and invalid lines. Blank lines carry
/// nothing and are skipped; every other line ends up in exactly one of the two lists.
pub fn parse_messages(text: &str) -> ParsedMessages {
    let mut out = ParsedMessages::default();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        match Message::parse_line(line) {
            Ok(m) => out.messages.push(m),
            Err(error) => out.invalid.push(InvalidLine {
                line: i + 1,
                text: line.to_string(),
                error,
            }),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Dates (civil calendar, UTC; no clock is ever read)

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

impl Date {
    pub fn new(year: i32, month: u32, day: u32) -> Option<Date> {
        let ok = (1..=9999).contains(&year)
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month);
        ok.then_some(Date { year, month, day })
    }

    /// `YYYY-MM-DD` exactly.
    pub fn parse_iso(s: &str) -> Option<Date> {
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<u32> {
            let part = &s[r];
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        Date::new(num(0..4)? as i32, num(5..7)?, num(8..10)?)
    }

    /// The date of a message time: an ISO 8601 / RFC 3339 string (its date part), or epoch
    /// seconds or milliseconds.
    pub fn from_time(s: &str) -> Option<Date> {
        let s = s.trim();
        if s.len() >= 10 && s.is_char_boundary(10) {
            if let Some(d) = Date::parse_iso(&s[..10]) {
                return Some(d);
            }
        }
        let n: f64 = s.parse().ok()?;
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        // Above 1e11 it can only be milliseconds (1e11 s is the year 5138).
        let secs = if n > 1e11 { n / 1000.0 } else { n };
        Some(Date::from_days((secs / 86_400.0).floor() as i64))
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm).
    pub fn days(self) -> i64 {
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    pub fn from_days(z: i64) -> Date {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        Date { year, month, day }
    }

    pub fn add_days(self, n: i64) -> Date {
        Date::from_days(self.days() + n)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

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
    fn date_arithmetic_round_trips() {
        for (s, days) in [
            ("1970-01-01", 0),
            ("2000-02-29", 11_016),
            ("2026-11-29", 20_786),
        ] {
            let d = Date::parse_iso(s).unwrap();
            assert_eq!(d.days(), days, "{s}");
            assert_eq!(Date::from_days(days), d);
            assert_eq!(d.to_string(), s);
        }
        let d = Date::parse_iso("2026-12-31").unwrap();
        assert_eq!(d.add_days(1).to_string(), "2027-01-01");
        assert_eq!(
            Date::parse_iso("2027-03-01")
                .unwrap()
                .add_days(-1)
                .to_string(),
            "2027-02-28"
        );
        assert!(Date::parse_iso("2026-02-30").is_none());
        assert!(Date::parse_iso("2026-1-05").is_none());
        assert_eq!(
            Date::from_time("2026-11-29T23:59:59+01:00")
                .unwrap()
                .to_string(),
            "2026-11-29"
        );
        assert_eq!(
            Date::from_time("1795953600").unwrap().to_string(),
            "2026-11-29"
        );
        assert_eq!(
            Date::from_time("1795953600000").unwrap().to_string(),
            "2026-11-29"
        );
        assert!(Date::from_time("yesterday").is_none());
    }

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
