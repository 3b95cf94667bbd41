//! `find` for every face: the query's syntax (`"phrase"`, `-word`, `path:`, `ext:`:
//! `index::query`), the query's vector from the configured model, the relevance floor,
//! and the verdict on each candidate — gone (its source is missing: dropped and deleted from
//! the index) or hidden (a summary whose refresh is queued, so it may describe what is no
//! longer there) — over [`Index::find`].

use crate::embed::Embedder;
use crate::index::{Found, Hit, Index, Level, Mode, SearchRequest, Verdict};
use crate::queue::{self, Queue};
use crate::uri::VPath;
use crate::workspace::Workspace;

use super::keys::semantic_key;
use super::{OpsError, Result};
use crate::index::query::Parsed;

/// The least cosine similarity a result without lexical evidence needs. Measured for
/// all-MiniLM-L6-v2 on the search benchmark (`docs/search-bench.md`, 1,200 queries on each
/// corpus): the right answer's cosine was at least 0.41 for 95% of the queries the model
/// answered, and at this floor 4 and 12 queries of 1,200 got no semantic result at all;
/// made-up words stay below it (`tests/ops/index_search.rs`).
pub const SEMANTIC_FLOOR: f32 = 0.35;

/// One query.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    pub text: &'a str,
    pub mode: Mode,
    pub limit: usize,
    pub under: Option<&'a VPath>,
}

/// Who knows whether a directory's summary is about to be rewritten.
pub trait PendingSummaries {
    /// Is a `semantic` job for this key waiting or running? (Unknown counts as no: the
    /// summary is still the truth as last written.)
    fn refresh_pending(&self, semantic_key: &str) -> bool;
}

impl PendingSummaries for Queue {
    fn refresh_pending(&self, key: &str) -> bool {
        // A daemon's refresh queued a moment ago may still be in its spool (moved into the
        // database within milliseconds): a summary about to change is hidden either way.
        self.has_pending(queue::SEMANTIC, key).unwrap_or(false)
            || self.spooled_has(queue::SEMANTIC, key)
    }
}

/// Run `q` against `index`. `queue` (when given) hides summaries whose refresh is queued;
/// `embedder` is the configured model (none: lexical only, whatever the mode asks).
pub fn find(
    ws: &Workspace,
    index: &Index,
    queue: Option<&dyn PendingSummaries>,
    embedder: Option<&dyn Embedder>,
    q: &Query,
) -> Result<Found> {
    // The words rank; the rest of the syntax filters (`index::query`).
    let parsed = Parsed::parse(q.text).map_err(OpsError::BadQuery)?;
    let found = find_parsed(ws, index, queue, embedder, q, &parsed)?;
    if found.hits.is_empty() && parsed.judges_text() {
        // The phrases or exclusions left nothing: perhaps not meant as operators. The words
        // as text (the path and extension filters still apply).
        let mut again = find_parsed(ws, index, queue, embedder, q, &parsed.as_text())?;
        again.orphans_removed += found.orphans_removed;
        return Ok(again);
    }
    Ok(found)
}

/// [`find`] of a parsed query.
fn find_parsed(
    ws: &Workspace,
    index: &Index,
    queue: Option<&dyn PendingSummaries>,
    embedder: Option<&dyn Embedder>,
    q: &Query,
    parsed: &Parsed,
) -> Result<Found> {
    let text = parsed.text.as_str();
    let vector = match embedder {
        Some(e) if q.mode != Mode::Lexical && index.has_dense() && !text.is_empty() => {
            let started = std::time::Instant::now();
            let mut v = e.embed(&[text])?;
            tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "query embedded");
            v.pop().filter(|v| v.len() == index.dim())
        }
        _ => None,
    };
    // An identifier's definition outranks its uses: looked for among more than are shown.
    let id = identifier(text);
    let req = SearchRequest {
        text,
        vector: vector.as_deref(),
        mode: q.mode,
        limit: match id {
            Some(_) if q.limit > 0 => q.limit.max(DEFINITION_DEPTH),
            _ => q.limit,
        },
        under: q.under,
        floor: SEMANTIC_FLOOR,
    };
    let mut found = index.find(&req, |h| match verdict(ws, queue, h) {
        Verdict::Show if !admitted(ws, parsed, h) => Verdict::Hide,
        v => v,
    })?;
    if let Some(id) = id {
        definitions_first(ws, id, &mut found.hits);
        found.hits.truncate(q.limit);
    }
    // A file's stored snippet is its head; its best passage says more: the one holding the
    // most of the query's words, else the one the model matched.
    let terms = crate::index::text::query_terms(text);
    for h in &mut found.hits {
        if h.level != Level::Content {
            continue;
        }
        if let Some(best) = best_passage(&ws.fs_path(&h.uri), h.uri.name(), &terms, &h.evidence) {
            h.evidence.passage = Some(best.passage);
            h.evidence.lines = Some(best.lines);
            h.snippet = best.snippet;
        }
    }
    Ok(found)
}

/// How much of a file is read for its best passage: as much as its passages were cut from
/// (`vikingfs.index.max_file_bytes`' default).
const SNIPPET_SCAN_BYTES: u64 = 1 << 20;
/// A shown passage's length, in characters.
const SNIPPET_CHARS: usize = 200;

/// Which of a query's terms (the first 64) a file's lines hold, found cheaply: one substring
/// scan of the ASCII-lowercased file per term's stem (the term less its last letter, which
/// the stemmer may have changed: `happi` from "happy") finds the lines that may hold it, and
/// only those are tokenized. A file of thousands of lines costs a few scans and a few lines.
struct TermsSeen {
    /// The lines that hold a term: their first byte and the terms', one bit each; by offset.
    lines: Vec<(usize, u64)>,
}

impl TermsSeen {
    fn new(text: &str, terms: &[String]) -> Self {
        let terms = &terms[..terms.len().min(64)];
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1))
            .filter(|&i| i < text.len())
            .collect();
        let lower = text.as_bytes().to_ascii_lowercase();
        let mut candidates: Vec<usize> = Vec::new();
        for t in terms {
            if !t.is_ascii() {
                // Lowercase beyond ASCII moves bytes: every line may hold it.
                candidates = (0..line_starts.len()).collect();
                break;
            }
            let stem = match t.len() {
                0..=3 => t.as_str(),
                n => &t[..n - 1],
            };
            for at in memchr::memmem::find_iter(&lower, stem.as_bytes()) {
                candidates.push(line_starts.partition_point(|&s| s <= at) - 1);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        let lines = candidates
            .into_iter()
            .filter_map(|l| {
                let start = line_starts[l];
                let end = line_starts.get(l + 1).copied().unwrap_or(text.len());
                let mut mask = 0u64;
                crate::index::text::each_term(&text[start..end], |t| {
                    if let Some(i) = terms.iter().position(|w| *w == t) {
                        mask |= 1 << i;
                    }
                });
                (mask != 0).then_some((start, mask))
            })
            .collect();
        TermsSeen { lines }
    }

    /// The terms held by the lines starting in `text[start..end]`, one bit each.
    fn in_span(&self, start: usize, end: usize) -> u64 {
        let from = self.lines.partition_point(|&(s, _)| s < start);
        self.lines[from..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .fold(0, |m, &(_, mask)| m | mask)
    }
}

/// The passage a result shows.
struct Shown {
    passage: u32,
    lines: [u32; 2],
    snippet: String,
}

/// The passage of the file at `path` (named `name`) holding the most of `terms` (ties: the
/// one the model matched, else the first), else the one the model matched (`evidence`);
/// its snippet starts at its line holding the most of them. `None` when the file cannot be
/// read as text the passages were cut from, or there is nothing to show.
fn best_passage(
    path: &std::path::Path,
    name: &str,
    terms: &[String],
    evidence: &crate::index::Evidence,
) -> Option<Shown> {
    let buf = indexed_bytes(path, SNIPPET_SCAN_BYTES).ok()?;
    // An HTML page's passages were cut from its text (`content::document`), which is cheap to
    // derive again; a container's (PDF, office) is not at every query, and text that is not
    // UTF-8 the index cut from other text: keep what it says.
    let html;
    let text = match crate::content::document::Kind::of(&buf) {
        Some(k @ crate::content::document::Kind::Html) => {
            html = crate::content::document::text(k, &buf, buf.len()).ok()?.0;
            html.as_str()
        }
        Some(_) => return None,
        None => std::str::from_utf8(&buf).ok()?,
    };
    let passages = crate::index::passages::split(name, text);
    let matched = evidence.passage.map(|p| p as usize);
    let seen = TermsSeen::new(text, terms);
    let counts: Vec<usize> = passages
        .iter()
        .map(|p| seen.in_span(p.start, p.end).count_ones() as usize)
        .collect();
    let most = counts.iter().copied().max().unwrap_or(0);
    let pick = if most > 0 {
        match matched {
            Some(m) if counts.get(m) == Some(&most) => m,
            _ => counts.iter().position(|&c| c == most)?,
        }
    } else {
        matched.filter(|&m| m < passages.len())?
    };
    let p = passages[pick];
    let body = &text[p.start..p.end];
    // From the line holding the most of the terms (the first line when none does).
    let (mut from, mut best) = (0, 0);
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let n = seen
            .in_span(p.start + offset, p.start + offset + line.len())
            .count_ones();
        if n > best {
            (from, best) = (offset, n);
        }
        offset += line.len();
    }
    let snippet = crate::index::text::one_line(&body[from..], SNIPPET_CHARS);
    (!snippet.is_empty()).then_some(Shown {
        passage: pick as u32,
        lines: p.lines,
        snippet,
    })
}

/// The identifier a query is, if it is one: a single word of letters, digits and `_` that
/// reads as code (`fg_wait`, `LockGuard`, `HTTPServer2`: a `_`, or a capital after a small
/// letter), not as a word of prose.
fn identifier(text: &str) -> Option<&str> {
    let t = text.trim();
    let word = !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let first_ok = t
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let b = t.as_bytes();
    let camel = b
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    let snake = t.trim_matches('_').contains('_');
    (word && first_ok && (camel || snake)).then_some(t)
}

/// How many results an identifier's definition is looked for among.
const DEFINITION_DEPTH: usize = 50;

/// How much of a file is read for a definition.
const DEFINITION_SCAN_BYTES: u64 = 1 << 20;

/// Move the files that define `id` (a line `fn id`, `struct id`, `class id`, `def id`, ...)
/// ahead of the rest, keeping each group's order.
fn definitions_first(ws: &Workspace, id: &str, hits: &mut [Hit]) {
    let keywords = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "union",
        "mod",
        "impl",
        "class",
        "def",
        "func",
        "function",
        "interface",
        "const",
        "static",
        "macro_rules!",
        "#define",
        "module",
        "object",
        "record",
        "typedef",
    ]
    .join("|");
    let prefixes = [
        r"pub(?:\([^)]*\))?",
        "export",
        "default",
        "async",
        "unsafe",
        "extern",
        "public",
        "private",
        "protected",
        "abstract",
        "final",
        "sealed",
        "data",
        "inline",
        "virtual",
    ]
    .join("|");
    let Ok(re) = regex::Regex::new(&format!(
        r"(?m)^\s*(?:(?:{prefixes})\s+)*(?:{keywords})\s+{}\b",
        regex::escape(id)
    )) else {
        return;
    };
    let defines = |h: &Hit| {
        if h.level != Level::Content {
            return false;
        }
        indexed_bytes(&ws.fs_path(&h.uri), DEFINITION_SCAN_BYTES)
            .is_ok_and(|buf| re.is_match(&String::from_utf8_lossy(&buf)))
    };
    let marks: Vec<bool> = hits.iter().map(defines).collect();
    let mut order: Vec<usize> = (0..hits.len()).collect();
    // Stable: definitions first, each group as ranked.
    order.sort_by_key(|&i| !marks[i]);
    let sorted: Vec<Hit> = order.iter().map(|&i| hits[i].clone()).collect();
    hits.clone_from_slice(&sorted);
}

/// How much of a file a phrase or an exclusion is judged on.
const FILTER_SCAN_BYTES: u64 = 4 << 20;

/// Does `h` pass the query's filters? Its path always can be judged; a phrase or an
/// exclusion only on a file's text (a summary is not shown unjudged).
fn admitted(ws: &Workspace, parsed: &Parsed, h: &Hit) -> bool {
    if !parsed.filters() {
        return true;
    }
    let is_file = h.level == Level::Content;
    if !parsed.admits_path(h.uri.as_str(), is_file) {
        return false;
    }
    if !parsed.judges_text() {
        return true;
    }
    let read = indexed_text(&ws.fs_path(&h.uri), FILTER_SCAN_BYTES);
    is_file && read.is_ok_and(|buf| parsed.admits_text(&String::from_utf8_lossy(&buf)))
}

/// [`indexed_bytes`], and a document's (PDF, office, EPUB, HTML) text as `content::document`
/// reads it for the index. Only filters pay for it: they judge the words the file was found
/// by, so a phrase inside a PDF passes; a document cut at `max` that no longer parses is
/// judged on nothing (better a missed hit than one judged on its raw bytes).
fn indexed_text(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use crate::content::document::{text, Kind};
    let buf = indexed_bytes(path, max)?;
    Ok(match Kind::of(&buf) {
        Some(kind) => text(kind, &buf, max as usize)
            .map(|(t, _)| t.into_bytes())
            .unwrap_or_default(),
        None => buf,
    })
}

/// Up to `max` bytes of the text the index read from the file at `path`: what a gzip, bzip2
/// or zstd file decompresses to (as the indexing job reads it, `content::compressed`), any
/// other file's own bytes. So a phrase, an exclusion, a definition and a snippet judge the
/// words the file was found by.
fn indexed_bytes(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use crate::content::compressed::{decompress, Codec};
    use std::io::Read;
    let mut f = crate::sys::open_file(path)?;
    let mut buf = Vec::new();
    (&mut f).take(max).read_to_end(&mut buf)?;
    if let Some(codec) = Codec::of(&buf) {
        // A stream that does not decompress was indexed as what it is: its own bytes.
        if let Ok((text, _)) = decompress(codec, buf.as_slice().chain(&mut f), max) {
            return Ok(text);
        }
    }
    Ok(buf)
}

fn verdict(ws: &Workspace, queue: Option<&dyn PendingSummaries>, h: &Hit) -> Verdict {
    if !h.is_live_in(ws) {
        return Verdict::Gone;
    }
    if h.level != Level::Content && queue.is_some_and(|q| q.refresh_pending(&semantic_key(&h.uri)))
    {
        return Verdict::Hide;
    }
    Verdict::Show
}
