//! What a `find` query says beyond its words: `"exact phrase"`, `-word`, `path:GLOB` and
//! `ext:EXT`. [`Parsed::parse`] splits a query into the text that ranks and the filters a
//! result must pass; every engine ranks the same text, and the filters judge each candidate
//! afterwards (`ops::search` hides what fails them, and the search goes deeper), so every
//! backend and every face (CLI, HTTP, MCP: all through `ops::search::find`) reads the same
//! syntax.
//!
//! A query is text unless it is unmistakably syntax. People paste sentences, error messages
//! and command lines (`Run gpgconf --apply-defaults for all users.`), and a dash or a quote
//! in them is punctuation, not an operator. So:
//!
//! - `path:GLOB` and `ext:EXT`, a whitespace-separated token starting so, are filters always:
//!   `path:GLOB` keeps a result whose namespace path (`resources/docs/a.md`) matches GLOB; a
//!   glob without `/` judges the name alone (`path:*.md`), one with `/` the path from any
//!   directory down (`path:docs/*.md`), or from the root when it starts with `/` or
//!   `viking://`; `ext:rs` (or `ext:.rs`) the file's extension, case aside;
//! - the rest of the query is **prose** when it ends a sentence (`.`, `?` or `!` last, a
//!   closing quote or bracket aside) or has more than [`PROSE_WORDS`] words: prose is text
//!   whole, its quotes and dashes included;
//! - otherwise a token `-word` is an exclusion (the file does not hold `word` as a word, case
//!   aside) when it is a single `-`, a letter, then only letters, digits and `_` (`-tokio`,
//!   `-v2`): `--apply-defaults`, `-1`, `-e-mail`, `e-mail`, `-x.y` and a lone `-` are text;
//! - and `"a b c"` is a phrase (the file holds these words in this order, case and spacing
//!   aside; its words rank too) when its opening quote starts a token, its closing quote
//!   ends one (`"a b" c`, not `x"a b"`) and it holds a letter or digit (`":"` is a quoted
//!   mark); an unclosed quote is text.
//!
//! A query whose phrases and exclusions leave nothing is run again as text ([`Parsed::as_text`],
//! `ops::search::find`), its path and extension filters kept: better the words' ranking than an
//! empty answer to an operator the user may not have meant.
//!
//! Several `path:` or several `ext:` filters: any of them; filters of different kinds: all.
//! A phrase or an exclusion can only be judged on a file's text: directory summaries are not
//! results of a query that has one (better missed than shown unjudged).

use globset::{GlobBuilder, GlobMatcher};

/// More words than this (path and extension filters aside) make a query prose, whatever its
/// punctuation: a keyword query with operators is a few words, a pasted sentence is more.
pub const PROSE_WORDS: usize = 8;

/// A query, split.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// What ranks: the free words and the phrases' words, in the query's order (a query
    /// without phrases or exclusions: as written, its path and extension filters removed).
    pub text: String,
    /// Phrases a result's text must hold, lowercased, their spaces collapsed.
    pub phrases: Vec<String>,
    /// Words a result's text must not hold, lowercased.
    pub without: Vec<String>,
    /// The query with its path and extension filters removed, as written: the text when
    /// the phrases and exclusions are dropped ([`Parsed::as_text`]).
    plain: String,
    paths: Vec<GlobMatcher>,
    exts: Vec<String>,
}

impl Parsed {
    /// Split `query` (see the module doc for the rule); a `path:` glob that does not parse
    /// is an error naming it.
    pub fn parse(query: &str) -> Result<Parsed, String> {
        let mut p = Parsed::default();
        // First the filters that are syntax whatever surrounds them.
        let mut rest: Vec<&str> = Vec::new();
        for token in query.split_whitespace() {
            if let Some(g) = token.strip_prefix("path:").filter(|g| !g.is_empty()) {
                p.paths.push(path_glob(g)?);
            } else if let Some(e) = token.strip_prefix("ext:").filter(|e| !e.is_empty()) {
                p.exts.push(e.trim_start_matches('.').to_lowercase());
            } else {
                rest.push(token);
            }
        }
        p.plain = rest.join(" ");
        if is_prose(&rest) {
            p.text = p.plain.clone();
            return Ok(p);
        }
        let mut words: Vec<String> = Vec::new();
        let mut i = 0;
        while i < rest.len() {
            if let Some((phrase, next)) = phrase_at(&rest, i) {
                words.push(phrase.clone());
                p.phrases.push(phrase.to_lowercase());
                i = next;
                continue;
            }
            match exclusion(rest[i]) {
                Some(w) => p.without.push(w.to_lowercase()),
                None => words.push(rest[i].to_string()),
            }
            i += 1;
        }
        p.text = if p.judges_text() {
            words.join(" ")
        } else {
            p.plain.clone()
        };
        Ok(p)
    }

    /// The same query as text: its phrases and exclusions dropped, their words (and the
    /// quotes and dashes) read as text; its path and extension filters kept.
    pub fn as_text(&self) -> Parsed {
        Parsed {
            text: self.plain.clone(),
            phrases: Vec::new(),
            without: Vec::new(),
            ..self.clone()
        }
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

/// Is the query (its tokens, path and extension filters removed) prose: a sentence's end
/// last, or more than [`PROSE_WORDS`] words?
fn is_prose(tokens: &[&str]) -> bool {
    let last = tokens.last().map_or("", |t| {
        t.trim_end_matches(['"', '\'', ')', ']', '}', '\u{201d}', '\u{2019}'])
    });
    tokens.len() > PROSE_WORDS || last.ends_with(['.', '?', '!'])
}

/// The phrase whose opening quote starts `tokens[i]`, and the index of the token after it:
/// `"a b c"` as one token or several, the closing quote ending a token and no other quote
/// between. `None` when `tokens[i]` opens none (an unclosed quote, a quote inside a token).
fn phrase_at(tokens: &[&str], i: usize) -> Option<(String, usize)> {
    let open = tokens[i].strip_prefix('"')?;
    let (inner, next) = if !open.contains('"') {
        // Several tokens: the next one holding a quote must close, with its only quote last.
        let j = (i + 1..tokens.len()).find(|&j| tokens[j].contains('"'))?;
        let last = tokens[j].strip_suffix('"').filter(|t| !t.contains('"'))?;
        let mut words = vec![open];
        words.extend_from_slice(&tokens[i + 1..j]);
        words.push(last);
        (words.join(" "), j + 1)
    } else {
        // One token: `"word"`.
        let word = open.strip_suffix('"').filter(|t| !t.contains('"'))?;
        (word.to_string(), i + 1)
    };
    // A quoted mark (`":"`, `"->"`) is punctuation: a phrase holds a word.
    let phrase = collapse(&inner);
    phrase
        .chars()
        .any(char::is_alphanumeric)
        .then_some((phrase, next))
}

/// The word `token` excludes, if it is an exclusion: one `-`, a letter, then only letters,
/// digits and `_`.
fn exclusion(token: &str) -> Option<&str> {
    let w = token.strip_prefix('-')?;
    let mut chars = w.chars();
    let first = chars.next()?;
    (first.is_alphabetic() && chars.all(|c| c.is_alphanumeric() || c == '_')).then_some(w)
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
        // A lone dash is a word.
        assert_eq!(Parsed::parse("a - b").unwrap().text, "a - b");
    }

    /// (phrases, exclusions) of `q`, or `None` when it is all text; then its text is `q`.
    fn syntax(q: &str) -> Option<(Vec<String>, Vec<String>)> {
        let p = Parsed::parse(q).unwrap();
        if p.judges_text() {
            return Some((p.phrases, p.without));
        }
        assert_eq!(p.text, q.split_whitespace().collect::<Vec<_>>().join(" "));
        None
    }

    #[test]
    fn a_dash_excludes_only_at_a_token_start_before_a_word() {
        let without = |q: &str| syntax(q).map(|(_, w)| w).unwrap_or_default();
        assert_eq!(without("lock guard -tokio"), ["tokio"]);
        assert_eq!(without("-Tokio lock"), ["tokio"]);
        assert_eq!(without("lock -v2 -async_std"), ["v2", "async_std"]);
        // Options, numbers, compounds and ranges are text.
        for q in [
            "gpgconf --apply-defaults",
            "e-mail address",
            "-e-mail lock",
            "offset -1 bytes",
            "lock -x.y",
            "a - b",
            "range 1-10",
            "lock -",
            "lock -_x",
        ] {
            assert_eq!(syntax(q), None, "{q}");
        }
    }

    #[test]
    fn a_quote_makes_a_phrase_only_around_whole_tokens() {
        let phrases = |q: &str| syntax(q).map(|(p, _)| p).unwrap_or_default();
        assert_eq!(phrases(r#""lock guard" tokio"#), ["lock guard"]);
        assert_eq!(phrases(r#"tokio "Lock   Guard""#), ["lock guard"]);
        assert_eq!(
            phrases(r#""The Bourne-Again Shell""#),
            ["the bourne-again shell"]
        );
        assert_eq!(phrases(r#"say "hello" twice"#), ["hello"]);
        assert_eq!(phrases(r#""a b" "c d""#), ["a b", "c d"]);
        for q in [
            r#"a "b c"#,       // unclosed
            r#"x"a b" c"#,     // opens inside a token
            r#""a b"c d"#,     // closes inside a token
            r#"it's 5" long"#, // inches
            r#""" empty"#,
            r#"obs-route = obs-domain-list ":""#, // a quoted mark
            r#"a "->" b"#,
        ] {
            assert_eq!(syntax(q), None, "{q}");
        }
    }

    #[test]
    fn prose_is_text_whole() {
        // A sentence's end, or more than PROSE_WORDS words: quotes and dashes are its own.
        for q in [
            "Run gpgconf --apply-defaults for all users.",
            "Why does -tokio fail?",
            r#""input preprocessor" for less."#,
            r#"Say "stop" (now!)"#,
            r#"Migrate a public keyring from "classic" to "modern" GnuPG format"#,
            "lock guard -tokio over the pool of many old workers",
        ] {
            assert_eq!(syntax(q), None, "{q}");
        }
        // Up to PROSE_WORDS words without a sentence's end: syntax still.
        assert!(syntax("one two three four five six seven -eight").is_some());
        // Path and extension filters are syntax in prose too, and not words of it.
        let p = Parsed::parse("Run gpgconf --apply-defaults. ext:md").unwrap();
        assert_eq!(p.text, "Run gpgconf --apply-defaults.");
        assert!(p.filters() && !p.judges_text());
    }

    #[test]
    fn as_text_keeps_the_words_and_the_path_filters() {
        let p = Parsed::parse(r#""lock guard" -tokio ext:rs"#).unwrap();
        assert_eq!(p.text, "lock guard");
        let t = p.as_text();
        assert_eq!(t.text, r#""lock guard" -tokio"#);
        assert!(!t.judges_text() && t.filters());
        assert!(t.admits_path("resources/a.rs", true));
        assert!(!t.admits_path("resources/a.md", true));
        assert!(t.admits_text("anything, tokio too"));
    }
}
