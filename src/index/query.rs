//! What a `find` query says beyond its words: `"exact phrase"`, `-word`, `path:GLOB` and
//! `ext:EXT`. [`Parsed::parse`] splits a query into the text that ranks (its words, the
//! phrases' words among them) and the filters a result must pass; every engine ranks the
//! same text, and the filters judge each candidate afterwards (`ops::search` hides what
//! fails them, and the search goes deeper), so every backend and every face reads the same
//! syntax.
//!
//! - `"a b c"`: the file holds these words in this order (case and spacing aside);
//! - `-word`: the file does not hold `word` as a word (case aside);
//! - `path:GLOB`: the result's namespace path (`resources/docs/a.md`) matches GLOB; a glob
//!   without `/` judges the name alone (`path:*.md`), one with `/` the path from any directory
//!   down (`path:docs/*.md`), or from the root when it starts with `/` or `viking://`;
//! - `ext:rs` (or `ext:.rs`): the file's extension, case aside.
//!
//! Several `path:` or several `ext:` filters: any of them; filters of different kinds: all.
//! A phrase or an exclusion can only be judged on a file's text: directory summaries are not
//! results of a query that has one (better missed than shown unjudged).

use globset::{GlobBuilder, GlobMatcher};

/// A query, split.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// What ranks: the free words and the phrases' words, in the query's order.
    pub text: String,
    /// Phrases a result's text must hold, lowercased, their spaces collapsed.
    pub phrases: Vec<String>,
    /// Words a result's text must not hold, lowercased.
    pub without: Vec<String>,
    paths: Vec<GlobMatcher>,
    exts: Vec<String>,
}

impl Parsed {
    /// Split `query`; a `path:` glob that does not parse is an error naming it.
    pub fn parse(query: &str) -> Result<Parsed, String> {
        let mut p = Parsed::default();
        let mut words: Vec<String> = Vec::new();
        let mut rest = query.trim_start();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('"') {
                // A phrase, to the next quote (or the end).
                let (phrase, tail) = after.split_once('"').unwrap_or((after, ""));
                let phrase = collapse(phrase);
                if !phrase.is_empty() {
                    words.push(phrase.clone());
                    p.phrases.push(phrase.to_lowercase());
                }
                rest = tail.trim_start();
                continue;
            }
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let token = &rest[..end];
            rest = rest[end..].trim_start();
            if let Some(w) = token.strip_prefix('-').filter(|w| !w.is_empty()) {
                p.without.push(w.to_lowercase());
            } else if let Some(g) = token.strip_prefix("path:").filter(|g| !g.is_empty()) {
                p.paths.push(path_glob(g)?);
            } else if let Some(e) = token.strip_prefix("ext:").filter(|e| !e.is_empty()) {
                p.exts.push(e.trim_start_matches('.').to_lowercase());
            } else {
                words.push(token.to_string());
            }
        }
        p.text = words.join(" ");
        Ok(p)
    }

    /// Does the query filter at all (beyond ranking)?
    pub fn filters(&self) -> bool {
        self.judges_text() || !self.paths.is_empty() || !self.exts.is_empty()
    }

    /// Do the filters need a result's text?
    pub fn judges_text(&self) -> bool {
        !self.phrases.is_empty() || !self.without.is_empty()
    }

    /// Does a result at namespace path `rel` (`is_file`: a file's record, else a
    /// directory's summary) pass the path and extension filters?
    pub fn admits_path(&self, rel: &str, is_file: bool) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if !self.exts.is_empty() {
            let ext = name.rsplit_once('.').map(|(_, e)| e.to_lowercase());
            if !is_file || !ext.is_some_and(|e| self.exts.contains(&e)) {
                return false;
            }
        }
        self.paths.is_empty() || self.paths.iter().any(|g| g.is_match(rel))
    }

    /// Does `text` (a file's) hold every phrase and none of the excluded words?
    pub fn admits_text(&self, text: &str) -> bool {
        let lower = collapse(text).to_lowercase();
        self.phrases.iter().all(|ph| lower.contains(ph.as_str()))
            && !self.without.iter().any(|w| holds_word(&lower, w))
    }
}

/// `s` with every run of whitespace made one space, trimmed.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Does `lower` hold `word` between non-alphanumeric characters (or the ends)?
fn holds_word(lower: &str, word: &str) -> bool {
    let bounded = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
    lower.match_indices(word).any(|(i, m)| {
        bounded(lower[..i].chars().next_back()) && bounded(lower[i + m.len()..].chars().next())
    })
}

/// The matcher of a `path:` glob, judged against a namespace path (see the module doc).
fn path_glob(g: &str) -> Result<GlobMatcher, String> {
    let anchored = g.strip_prefix("viking://").or_else(|| g.strip_prefix('/'));
    let pattern = match anchored {
        Some(from_root) => from_root.trim_end_matches('/').to_string(),
        // From any directory down: the name alone for a glob without `/`.
        None => {
            let g = g.trim_end_matches('/');
            format!("{{{g},**/{g}}}")
        }
    };
    GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map(|m| m.compile_matcher())
        .map_err(|e| format!("path:{g} is not a glob: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_splits_into_words_phrases_and_filters() {
        let p = Parsed::parse(r#"lock "path  Guard" -tokio path:src/*.rs ext:.RS ext:py fast"#)
            .unwrap();
        assert_eq!(p.text, "lock path Guard fast");
        assert_eq!(p.phrases, ["path guard"]);
        assert_eq!(p.without, ["tokio"]);
        assert!(p.filters() && p.judges_text());
        assert!(p.admits_path("resources/repo/src/lock.rs", true));
        assert!(
            !p.admits_path("resources/repo/src/lock.rs", false),
            "ext: is for files"
        );
        assert!(
            !p.admits_path("resources/repo/src/deep/lock.rs", true),
            "* stops at /"
        );
        assert!(!p.admits_path("resources/repo/lib/lock.rs", true));
        assert!(Parsed::parse("x").unwrap().admits_path("anything", false));
        assert!(!Parsed::parse("x").unwrap().filters());
    }

    #[test]
    fn names_and_anchored_paths() {
        let name = Parsed::parse("x path:*.md").unwrap();
        assert!(name.admits_path("resources/a/b.md", true));
        assert!(!name.admits_path("resources/a/b.rs", true));
        let rooted = Parsed::parse("x path:/resources/docs/**").unwrap();
        assert!(rooted.admits_path("resources/docs/a/b.md", true));
        assert!(!rooted.admits_path("agent/resources/docs/a.md", true));
        let uri = Parsed::parse("x path:viking://resources/docs/**").unwrap();
        assert!(uri.admits_path("resources/docs/x", true));
        assert!(Parsed::parse("x path:[").is_err());
    }

    #[test]
    fn phrases_and_exclusions_judge_the_text() {
        let p = Parsed::parse(r#""lock guard" -tokio"#).unwrap();
        assert!(p.admits_text("takes the Lock\n  Guard here"));
        assert!(!p.admits_text("the guard lock"), "order matters");
        assert!(!p.admits_text("lock guard, with Tokio"));
        assert!(
            p.admits_text("lock guard, with tokio_util"),
            "a word, not a part of one"
        );
        assert!(!p.admits_text("lock guard (tokio)"));
        // An unclosed quote runs to the end.
        assert_eq!(Parsed::parse(r#"a "b c"#).unwrap().phrases, ["b c"]);
        // A lone dash is a word.
        assert_eq!(Parsed::parse("a - b").unwrap().text, "a - b");
    }
}
