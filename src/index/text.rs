//! Terms for the lexical index: what a document is split into before SQLite FTS5 sees it,
//! and what a query is split into, by the same rules.
//!
//! FTS5's own tokenizers split prose well but not what agents store beside it: `snake_case`
//! and `CamelCase` identifiers, paths, ids like `r2x00269`, and CJK text written without
//! spaces (unicode61 makes a whole CJK run one token, so no word inside it can be found).
//! So terms are made here and joined with spaces; FTS5 (`porter unicode61`) then only
//! lowercases, folds diacritics and stems each term.
//!
//! - A word is a run of letters and digits; `_`, `.`, `-`, `/` and all punctuation split.
//! - A word with inner capitals is also split at them (`HTTPServer` → `httpserver http
//!   server`), so both the whole identifier and its parts match; digits never split a word
//!   (`r2x00269` stays one term, so an id matches only itself).
//! - Words joined by `_` also give the joined form (`snake_case` → `snake case snakecase`).
//! - CJK runs give overlapping bigrams (`全文检索` → `全文 文检 检索`), the usual way to
//!   index text without word boundaries; a lone ideograph is a term of its own. A
//!   one-character CJK query becomes a prefix query, so it finds the bigrams it starts.

/// At most this many terms of one document are indexed (about 64 KiB of prose).
pub const MAX_DOC_TERMS: usize = 12_000;
/// At most this many distinct terms of a query are searched for.
pub const MAX_QUERY_TERMS: usize = 32;

/// English function words dropped from queries (not from documents): they match nearly
/// every document, cost the most to rank and say nothing about which one is meant. A query
/// made only of them keeps them.
const STOPWORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "do", "does",
    "for", "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on",
    "or", "that", "the", "their", "then", "there", "these", "this", "to", "was", "we", "were",
    "what", "when", "where", "which", "who", "why", "will", "with", "you",
];

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF | 0x20000..=0x2FFFF)
}

/// One piece of the input: a word (with the `_`-joined group it belongs to) or a CJK run.
enum Piece<'a> {
    Words(Vec<&'a str>),
    Cjk(Vec<char>),
}

/// Split `text` into `_`-joined word groups and CJK runs.
fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut group: Vec<&str> = Vec::new();
    let mut cjk: Vec<char> = Vec::new();
    let mut word_start: Option<usize> = None;
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<Piece>| {
        if !cjk.is_empty() {
            out.push(Piece::Cjk(std::mem::take(cjk)));
        }
    };
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let wordish = c.is_alphanumeric() && !is_cjk(c);
        if wordish {
            flush_cjk(&mut cjk, &mut out);
            if word_start.is_none() {
                word_start = Some(i);
            }
            continue;
        }
        if let Some(s) = word_start.take() {
            group.push(&text[s..i]);
        }
        if c == '_' && !group.is_empty() {
            continue; // the group goes on after the underscore
        }
        if !group.is_empty() {
            out.push(Piece::Words(std::mem::take(&mut group)));
        }
        if is_cjk(c) {
            cjk.push(c);
        } else {
            flush_cjk(&mut cjk, &mut out);
        }
    }
    flush_cjk(&mut cjk, &mut out);
    out
}

/// The parts of one word split at its inner capitals: `parseHTTPRequest` → parse, HTTP,
/// Request. Returns one part for a word without inner capitals.
fn camel_parts(word: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for k in 1..chars.len() {
        let (i, c) = chars[k];
        let prev = chars[k - 1].1;
        let next_lower = chars.get(k + 1).is_some_and(|&(_, n)| n.is_lowercase());
        // lower→Upper ("parseH"), or the last capital of a run before lowercase ("HTTPRequest").
        let boundary =
            c.is_uppercase() && (prev.is_lowercase() || (prev.is_uppercase() && next_lower));
        if boundary {
            parts.push(&word[start..i]);
            start = i;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// Terms of a text, in order, with the rules of the module doc. `push` gets each term.
fn terms(text: &str, mut push: impl FnMut(String) -> bool) {
    for piece in pieces(text) {
        match piece {
            Piece::Words(group) => {
                for w in &group {
                    let parts = camel_parts(w);
                    if !push(w.to_lowercase()) {
                        return;
                    }
                    if parts.len() > 1 {
                        for p in parts {
                            if !push(p.to_lowercase()) {
                                return;
                            }
                        }
                    }
                }
                if group.len() > 1 && !push(group.concat().to_lowercase()) {
                    return;
                }
            }
            Piece::Cjk(run) => {
                if run.len() == 1 {
                    if !push(run[0].to_string()) {
                        return;
                    }
                    continue;
                }
                for pair in run.windows(2) {
                    if !push(pair.iter().collect()) {
                        return;
                    }
                }
            }
        }
    }
}

/// What FTS5 indexes for a document: its terms joined by spaces, at most [`MAX_DOC_TERMS`].
pub fn document(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(1 << 16) + 16);
    let mut n = 0;
    terms(text, |t| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&t);
        n += 1;
        n < MAX_DOC_TERMS
    });
    out
}

/// The distinct terms a query searches for (stopwords dropped unless nothing else is left),
/// in order: what [`match_expr`] ORs together.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    terms(query, |t| {
        if !all.contains(&t) {
            all.push(t);
        }
        all.len() < MAX_QUERY_TERMS * 2
    });
    let content: Vec<String> = all
        .iter()
        .filter(|t| !STOPWORDS.contains(&t.as_str()))
        .cloned()
        .collect();
    let mut chosen = if content.is_empty() { all } else { content };
    chosen.truncate(MAX_QUERY_TERMS);
    chosen
}

/// `s` on one line (each run of whitespace one space, trimmed), at most `max_chars`
/// characters: a snippet as a result shows it. Stops reading once it has enough.
pub fn one_line(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in s.split_whitespace() {
        if chars >= max_chars {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars().take(max_chars.saturating_sub(chars)) {
            out.push(c);
            chars += 1;
        }
    }
    // A space the limit cut before its word.
    out.truncate(out.trim_end().len());
    out
}

/// Each term of `text`, as the index makes them.
pub fn each_term(text: &str, mut each: impl FnMut(String)) {
    terms(text, |t| {
        each(t);
        true
    });
}

/// How many of `terms` (a query's, [`query_terms`]) a file's name stands for when every word
/// of its stem (the name up to its first `.`, a leading dot aside: `git-diff-files` of
/// `git-diff-files.1.gz`) is among them: a word as a whole, or as its parts when it has inner
/// capitals (`LockGuard` for `lock guard`), a CJK run as its bigrams. `None` when some word
/// is not, or the stem has none (so `d00001.txt` is never a query's name unless asked).
pub fn name_in_query(name: &str, terms: &[String]) -> Option<usize> {
    let name = name.strip_prefix('.').unwrap_or(name);
    let stem = name.split('.').next().unwrap_or(name);
    let mut used = vec![false; terms.len()];
    let mut mark = |t: &str| match terms.iter().position(|q| q == t) {
        Some(i) => {
            used[i] = true;
            true
        }
        None => false,
    };
    let mut any = false;
    for piece in pieces(stem) {
        match piece {
            Piece::Words(group) => {
                for w in &group {
                    any = true;
                    let whole = mark(&w.to_lowercase());
                    // The parts count as asked for too (a query `LockGuard` is all three
                    // terms `lockguard lock guard`); with the whole missing they must be.
                    let parts = camel_parts(w)
                        .iter()
                        .filter(|p| mark(&p.to_lowercase()))
                        .count();
                    if !whole && parts < camel_parts(w).len() {
                        return None;
                    }
                }
                if group.len() > 1 {
                    mark(&group.concat().to_lowercase());
                }
            }
            Piece::Cjk(run) => {
                any = true;
                let grams: Vec<String> = if run.len() == 1 {
                    vec![run[0].to_string()]
                } else {
                    run.windows(2).map(|p| p.iter().collect()).collect()
                };
                if !grams.iter().all(|g| mark(g)) {
                    return None;
                }
            }
        }
    }
    any.then(|| used.iter().filter(|&&u| u).count())
}

/// How many of `wanted` occur among the terms of `text` (each counted once).
pub fn matches_in(text: &str, wanted: &[String]) -> usize {
    let mut seen = vec![false; wanted.len()];
    terms(text, |t| {
        if let Some(i) = wanted.iter().position(|w| *w == t) {
            seen[i] = true;
        }
        true
    });
    seen.iter().filter(|&&b| b).count()
}

/// The FTS5 MATCH expression for a query: its distinct terms OR'ed (BM25 ranks documents
/// holding more of them, and rarer ones, first), stopwords dropped unless nothing else is
/// left. `None` when the query has no terms at all.
pub fn match_expr(query: &str) -> Option<String> {
    match_expr_of(&query_terms(query))
}

/// A query term of one CJK character, which matches as a prefix (the bigrams it starts).
pub fn is_lone_cjk(t: &str) -> bool {
    t.chars().count() == 1 && t.chars().all(is_cjk)
}

/// The FTS5 MATCH expression ORing `chosen` (terms of [`query_terms`]); `None` when empty.
pub fn match_expr_of(chosen: &[String]) -> Option<String> {
    if chosen.is_empty() {
        return None;
    }
    let expr = chosen
        .iter()
        .map(|t| {
            // Terms are letters and digits only, so quoting cannot be escaped from.
            if is_lone_cjk(t) {
                format!("\"{t}\"*")
            } else {
                format!("\"{t}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    Some(expr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_and_cuts() {
        assert_eq!(one_line("  a\n\tb   c ", 100), "a b c");
        assert_eq!(one_line("alpha beta gamma", 8), "alpha be");
        assert_eq!(one_line("alpha beta", 6), "alpha");
        assert_eq!(one_line("ééé ééé", 5), "ééé é");
        assert_eq!(one_line("", 5), "");
    }

    #[test]
    fn a_name_is_the_querys_when_each_of_its_words_is_asked_for() {
        let q = |s: &str| query_terms(s);
        assert_eq!(
            name_in_query("killall5.8.gz", &q("killall5 signals")),
            Some(1)
        );
        assert_eq!(name_in_query("kill.1", &q("killall5 signals")), None);
        assert_eq!(
            name_in_query("git-diff-files.1", &q("git diff files")),
            Some(3)
        );
        assert_eq!(name_in_query("git-diff.1", &q("git diff files")), Some(2));
        assert_eq!(name_in_query("git-diff-files.1", &q("git diff")), None);
        assert_eq!(name_in_query("c89-gcc.1", &q("c89-gcc")), Some(2));
        assert_eq!(name_in_query("c99-gcc.1", &q("c89-gcc")), None);
        assert_eq!(name_in_query("LockGuard.rs", &q("lock guard")), Some(2));
        assert_eq!(name_in_query("LockGuard.rs", &q("LockGuard")), Some(3));
        assert_eq!(name_in_query("snake_case.py", &q("snake_case")), Some(3));
        assert_eq!(name_in_query(".bashrc", &q("bashrc")), Some(1));
        assert_eq!(name_in_query("d00001.txt", &q("txt")), None);
        assert_eq!(name_in_query("...", &q("x")), None);
    }

    #[test]
    fn prose_and_identifiers() {
        assert_eq!(document("Hello, Wörld! x2"), "hello wörld x2");
        assert_eq!(document("snake_case_name"), "snake case name snakecasename");
        assert_eq!(
            document("parseHTTPRequest"),
            "parsehttprequest parse http request"
        );
        assert_eq!(document("src/index/mod.rs"), "src index mod rs");
        assert_eq!(document("id r2x00269."), "id r2x00269");
        assert_eq!(document("__init__"), "init");
        assert_eq!(document(" ,.;"), "");
    }

    #[test]
    fn cjk_bigrams() {
        assert_eq!(document("全文检索"), "全文 文检 检索");
        assert_eq!(document("ab中c"), "ab 中 c");
        assert_eq!(document("日本語とEnglish"), "日本 本語 語と english");
    }

    #[test]
    fn queries() {
        assert_eq!(
            match_expr("the lock of a file").as_deref(),
            Some("\"lock\" OR \"file\"")
        );
        assert_eq!(match_expr("the").as_deref(), Some("\"the\""));
        assert_eq!(match_expr("中").as_deref(), Some("\"中\"*"));
        assert_eq!(match_expr("\"; DROP"), Some("\"drop\"".to_string()));
        assert_eq!(match_expr("  ..  "), None);
        assert_eq!(query_terms("the LockGuard"), ["lockguard", "lock", "guard"]);
        assert_eq!(
            matches_in("a lock_guard here", &query_terms("LockGuard")),
            3
        );
        assert_eq!(matches_in("a guard here", &query_terms("LockGuard")), 1);
        assert_eq!(
            match_expr("LockGuard lock").as_deref(),
            Some("\"lockguard\" OR \"lock\" OR \"guard\"")
        );
    }
}
