//! Keywords: the words that say what a directory is about, shown as they are written.
//!
//! A word scores by how many children use it and how often (`children × (1 + ln total)`),
//! times how rare it is in the rest of the workspace ([`TermWeights`], from the lexical
//! index) when the caller knows that. Words never counted: English function words, the
//! summaries' own wording (which comes back up in child directories' abstracts), and the
//! keywords of programming languages. `lock` and `locks` are one word for counting; it is
//! shown in the form the text uses most, so a keyword is always a word of the input.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

/// Words shorter than this are not keywords (`fn`, `io`, `a`).
const MIN_CHARS: usize = 3;
/// Longer "words" are ids, hashes or CJK sentences, not topics.
const MAX_CHARS: usize = 24;
/// Below this many documents in the rest of the workspace, no word is called common there.
const COMMON_MIN_DOCS: u64 = 10;

/// How rare the candidate words of one directory are in the rest of the workspace: an IDF
/// per word, from document frequencies ([`crate::index::Index::doc_freq`]).
///
/// Weights are rounded to halves: a workspace's counts move with every write anywhere, and a
/// summary that changed with each of them would be rewritten (and propagated to its parents)
/// for nothing. A word in more than half of a workspace of [`COMMON_MIN_DOCS`] documents or
/// more weighs 0: common everywhere, never a keyword.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermWeights {
    /// Lowercase word → IDF in halves.
    halves: BTreeMap<String, u16>,
}

impl TermWeights {
    /// Weights from a document count and the number of those documents holding each word.
    pub fn from_doc_freq<'a>(docs: u64, freq: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
        let mut halves = BTreeMap::new();
        for (term, df) in freq {
            let df = df.min(docs);
            let h = if docs >= COMMON_MIN_DOCS && df * 2 > docs {
                0
            } else {
                // Smoothed IDF: 1 for a word in every document (or when there are none), more
                // the rarer it is.
                let idf = 1.0 + ((docs as f64 + 1.0) / (df as f64 + 1.0)).ln();
                (idf * 2.0).round().clamp(1.0, u16::MAX as f64) as u16
            };
            let e = halves.entry(term.to_lowercase()).or_insert(h);
            *e = (*e).min(h);
        }
        TermWeights { halves }
    }

    /// A word's weight; 1.0 (neutral) for a word the statistics do not cover.
    pub fn weight(&self, term: &str) -> f64 {
        match self.halves.get(&term.to_lowercase()) {
            Some(&h) => f64::from(h) / 2.0,
            None => 1.0,
        }
    }
}

/// The words of a text that may be keywords, as written.
pub(super) fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| is_wordlike(w) && !is_stop_word(&w.to_lowercase()))
}

/// At least [`MIN_CHARS`], at most [`MAX_CHARS`], more letters than digits.
fn is_wordlike(w: &str) -> bool {
    let n = w.chars().count();
    if !(MIN_CHARS..=MAX_CHARS).contains(&n) {
        return false;
    }
    let letters = w.chars().filter(|c| c.is_alphabetic()).count();
    letters >= 2 && letters * 2 > n
}

/// The singulars a plural may have: `queries` → `query`; `fixes` → `fix`, `fixe`.
fn singulars(lower: &str) -> Vec<String> {
    if lower.chars().count() < 4 || !lower.ends_with('s') {
        return Vec::new();
    }
    if ["ss", "us", "is"].iter().any(|e| lower.ends_with(e)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(stem) = lower.strip_suffix("ies") {
        out.push(format!("{stem}y"));
    }
    // `-es` only where English adds it (`fixes`, `classes`, `matches`): `notes` is no `not`.
    if let Some(stem) = lower.strip_suffix("es") {
        if ["s", "x", "z", "ch", "sh"]
            .iter()
            .any(|e| stem.ends_with(e))
        {
            out.push(stem.to_string());
        }
    }
    out.push(lower[..lower.len() - 1].to_string());
    out
}

/// Whether a lowercase word is never a keyword (by itself or as the plural of one that is).
pub(super) fn is_stop_word(lower: &str) -> bool {
    let set = stop_set();
    set.contains(lower) || singulars(lower).iter().any(|s| set.contains(s.as_str()))
}

fn stop_set() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| {
        ENGLISH
            .iter()
            .chain(BOILERPLATE)
            .chain(PROGRAMMING)
            .copied()
            .collect()
    })
}

/// One word's counts: in how many children, how often in all, and how often each written
/// form was seen.
#[derive(Default)]
struct Stat {
    children: usize,
    total: usize,
    forms: BTreeMap<String, usize>,
}

impl Stat {
    /// The form seen most; ties go to the lowercase one, then the first in order.
    fn surface(&self) -> &str {
        let mut best: Option<(&str, usize)> = None;
        for (f, &n) in &self.forms {
            let better = match best {
                None => true,
                Some((b, bn)) => n > bn || (n == bn && is_lower(f) && !is_lower(b)),
            };
            if better {
                best = Some((f, n));
            }
        }
        best.map_or("", |(f, _)| f)
    }
}

fn is_lower(s: &str) -> bool {
    !s.chars().any(char::is_uppercase)
}

/// The words of a directory's children, grouped (`lock`, `Lock`, `locks` are one).
pub(super) struct Vocabulary {
    stats: BTreeMap<String, Stat>,
}

impl Vocabulary {
    /// Count the words of each child's text (one text per child).
    pub fn of<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vocabulary {
        // First the written forms per child, then the grouping, which needs all of them:
        // a plural joins its singular only where the singular is written somewhere too.
        let per_child: Vec<BTreeMap<&str, usize>> = texts
            .into_iter()
            .map(|t| {
                let mut m: BTreeMap<&str, usize> = BTreeMap::new();
                for w in words(t) {
                    *m.entry(w).or_default() += 1;
                }
                m
            })
            .collect();
        let lowers: BTreeSet<String> = per_child
            .iter()
            .flat_map(|m| m.keys().map(|w| w.to_lowercase()))
            .collect();
        let key_of = |lower: String| -> String {
            singulars(&lower)
                .into_iter()
                .find(|s| lowers.contains(s))
                .unwrap_or(lower)
        };
        let mut stats: BTreeMap<String, Stat> = BTreeMap::new();
        for m in &per_child {
            let mut keys_here = BTreeSet::new();
            for (&form, &n) in m {
                let key = key_of(form.to_lowercase());
                let s = stats.entry(key.clone()).or_default();
                s.total += n;
                *s.forms.entry(form.to_string()).or_default() += n;
                if keys_here.insert(key) {
                    s.children += 1;
                }
            }
        }
        Vocabulary { stats }
    }

    /// Words by score, best first, as `(score, written form)`; ties in alphabetical order.
    fn scored(&self, weights: Option<&TermWeights>) -> Vec<(f64, &str)> {
        let mut v: Vec<(f64, &str)> = self
            .stats
            .values()
            // A word written once says nothing about the directory (and, rare everywhere, would
            // otherwise win on its weight alone).
            .filter(|s| s.children >= 2 || s.total >= 2)
            .map(|s| {
                let surface = s.surface();
                let base = s.children as f64 * (1.0 + (s.total as f64).ln());
                let w = weights.map_or(1.0, |w| w.weight(surface));
                (base * w, surface)
            })
            .filter(|(score, _)| *score > 0.0)
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        v
    }

    /// The `n` best keywords, weighted by `weights` when given.
    pub fn keywords(&self, weights: Option<&TermWeights>, n: usize) -> Vec<String> {
        self.scored(weights)
            .into_iter()
            .take(n)
            .map(|(_, s)| s.to_string())
            .collect()
    }
}

/// English function words and words too general to be a topic.
const ENGLISH: &[&str] = &[
    "about",
    "above",
    "across",
    "after",
    "again",
    "against",
    "ago",
    "all",
    "almost",
    "alone",
    "along",
    "already",
    "also",
    "although",
    "always",
    "among",
    "and",
    "another",
    "any",
    "anyone",
    "anything",
    "anyway",
    "anywhere",
    "are",
    "aren",
    "around",
    "away",
    "back",
    "be",
    "because",
    "been",
    "before",
    "behind",
    "being",
    "below",
    "beside",
    "besides",
    "best",
    "better",
    "between",
    "beyond",
    "both",
    "but",
    "can",
    "cannot",
    "cant",
    "could",
    "couldn",
    "did",
    "didn",
    "does",
    "doesn",
    "doing",
    "done",
    "don",
    "down",
    "due",
    "during",
    "each",
    "either",
    "else",
    "elsewhere",
    "enough",
    "etc",
    "even",
    "ever",
    "every",
    "everyone",
    "everything",
    "everywhere",
    "except",
    "far",
    "few",
    "fewer",
    "first",
    "for",
    "former",
    "from",
    "further",
    "get",
    "gets",
    "getting",
    "give",
    "given",
    "gives",
    "goes",
    "going",
    "gone",
    "got",
    "had",
    "hadn",
    "has",
    "hasn",
    "have",
    "haven",
    "having",
    "hence",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "however",
    "into",
    "isn",
    "its",
    "itself",
    "just",
    "keep",
    "keeps",
    "kept",
    "last",
    "later",
    "least",
    "less",
    "let",
    "lets",
    "like",
    "likely",
    "made",
    "make",
    "makes",
    "making",
    "many",
    "may",
    "maybe",
    "might",
    "mine",
    "more",
    "moreover",
    "most",
    "mostly",
    "much",
    "must",
    "mustn",
    "myself",
    "near",
    "nearly",
    "need",
    "needs",
    "neither",
    "never",
    "nevertheless",
    "new",
    "next",
    "nobody",
    "non",
    "none",
    "nor",
    "not",
    "nothing",
    "now",
    "nowhere",
    "off",
    "often",
    "once",
    "one",
    "ones",
    "only",
    "onto",
    "other",
    "others",
    "otherwise",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "per",
    "perhaps",
    "please",
    "put",
    "puts",
    "quite",
    "rather",
    "really",
    "said",
    "same",
    "say",
    "says",
    "second",
    "see",
    "seen",
    "several",
    "shall",
    "she",
    "should",
    "shouldn",
    "since",
    "so",
    "some",
    "somebody",
    "someone",
    "something",
    "sometimes",
    "somewhat",
    "somewhere",
    "soon",
    "still",
    "such",
    "sure",
    "take",
    "taken",
    "takes",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "thence",
    "there",
    "thereby",
    "therefore",
    "these",
    "they",
    "thing",
    "things",
    "third",
    "this",
    "those",
    "though",
    "three",
    "through",
    "throughout",
    "thus",
    "together",
    "too",
    "toward",
    "towards",
    "two",
    "under",
    "unless",
    "unlike",
    "until",
    "upon",
    "use",
    "used",
    "uses",
    "using",
    "usually",
    "various",
    "very",
    "via",
    "was",
    "wasn",
    "way",
    "ways",
    "well",
    "were",
    "weren",
    "what",
    "whatever",
    "when",
    "whenever",
    "where",
    "whereas",
    "wherever",
    "whether",
    "which",
    "while",
    "who",
    "whoever",
    "whole",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "within",
    "without",
    "won",
    "would",
    "wouldn",
    "yes",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "able",
    "actually",
    "instead",
    "now",
    "okay",
    "via",
    "want",
    "wants",
    "know",
    "knows",
    "look",
    "looks",
    "thats",
    "there",
    "what",
    "whats",
    "http",
    "https",
    "www",
    "com",
    "org",
    "net",
    "html",
    "htm",
];

/// The words summaries are written in. A child directory's abstract is part of its parent's
/// input, so without these every parent would be "about" files and directories.
const BOILERPLATE: &[&str] = &[
    "holds",
    "hold",
    "mostly",
    "about",
    "file",
    "files",
    "directory",
    "directories",
    "subdirectory",
    "subdirectories",
    "document",
    "documents",
    "keyword",
    "keywords",
    "contents",
    "content",
    "empty",
    "conversation",
    "conversations",
    "message",
    "messages",
    "opens",
    "overview",
    "abstract",
    "kib",
    "mib",
    "gib",
    "bytes",
    "md",
    "txt",
    "readme",
];

/// Keywords and everyday identifiers of Rust, Python, JavaScript/TypeScript, Go, C/C++,
/// Java and shell: what every code file is full of, whatever it is about.
const PROGRAMMING: &[&str] = &[
    // Rust
    "as",
    "async",
    "await",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "where",
    "while",
    "std",
    "alloc",
    "vec",
    "string",
    "str",
    "usize",
    "isize",
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "f32",
    "f64",
    "bool",
    "char",
    "some",
    "none",
    "ok",
    "err",
    "unwrap",
    "expect",
    "clone",
    "derive",
    "cfg",
    "println",
    "eprintln",
    "assert",
    "assert_eq",
    "debug_assert",
    "panic",
    "todo",
    "unimplemented",
    "unreachable",
    "into",
    "iter",
    "collect",
    "len",
    "push",
    "arc",
    "rc",
    "refcell",
    "hashmap",
    "btreemap",
    "hashset",
    "fmt",
    "pub",
    "mut",
    "dyn",
    "macro_rules",
    "allow",
    "inline",
    // Python
    "def",
    "class",
    "import",
    "from",
    "lambda",
    "yield",
    "pass",
    "raise",
    "try",
    "except",
    "finally",
    "with",
    "elif",
    "global",
    "nonlocal",
    "print",
    "init",
    "args",
    "kwargs",
    "cls",
    "del",
    "assert",
    "isinstance",
    "len",
    "dict",
    "tuple",
    "int",
    "float",
    "str",
    "bytes",
    "main",
    "true",
    "false",
    "none",
    // JavaScript / TypeScript
    "function",
    "var",
    "export",
    "exports",
    "require",
    "module",
    "new",
    "this",
    "typeof",
    "instanceof",
    "null",
    "undefined",
    "void",
    "interface",
    "extends",
    "implements",
    "private",
    "public",
    "protected",
    "readonly",
    "boolean",
    "any",
    "unknown",
    "never",
    "promise",
    "console",
    "async",
    "await",
    "catch",
    "throw",
    "switch",
    "case",
    "document",
    "prototype",
    "constructor",
    "arguments",
    // Go
    "func",
    "package",
    "chan",
    "defer",
    "nil",
    "make",
    "fmt",
    "goto",
    "fallthrough",
    "iota",
    "rune",
    "byte",
    // C / C++ / Java
    "include",
    "define",
    "ifdef",
    "ifndef",
    "endif",
    "elif",
    "pragma",
    "unsigned",
    "signed",
    "long",
    "short",
    "sizeof",
    "typedef",
    "volatile",
    "auto",
    "inline",
    "namespace",
    "typename",
    "virtual",
    "final",
    "override",
    "nullptr",
    "size_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "malloc",
    "printf",
    "sprintf",
    "snprintf",
    "strlen",
    "memcpy",
    "memset",
    "argc",
    "argv",
    "stdio",
    "stdlib",
    "java",
    "throws",
    "synchronized",
    "abstract",
    "instanceof",
    "boolean",
    "string",
    // Perl, Make and here-documents
    "elsif",
    "foreach",
    "chomp",
    "undef",
    "bless",
    "qw",
    "cflags",
    "ldflags",
    "cppflags",
    "objs",
    "destdir",
    "libexecdir",
    "bindir",
    "mandir",
    "phony",
    "mak",
    "eof",
    "eot",
    "eom",
    // Shell
    "echo",
    "then",
    "fi",
    "esac",
    "done",
    "do",
    "elif",
    "bin",
    "bash",
    "sh",
    "env",
    "exit",
    "export",
    "unset",
    "shift",
    "eval",
    "exec",
    "null",
    "usr",
    "then",
    "true",
    "false",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_group_but_show_a_written_form() {
        let v = Vocabulary::of([
            "The lock engine takes path locks. Lock files.",
            "A queue with lock tokens and queue rows.",
            "It fixes one thing. Fixes more.",
        ]);
        let k = v.keywords(None, 4);
        assert_eq!(k[0], "lock", "{k:?}");
        assert!(k.contains(&"queue".to_string()), "{k:?}");
        // Never the stem: `fixes` has no `fix` written anywhere, so it is shown as it is.
        assert!(k.contains(&"fixes".to_string()), "{k:?}");
        assert!(!k.iter().any(|w| w == "fixe" || w == "file" || w == "files"));
    }

    #[test]
    fn stop_words_cover_plurals_and_code() {
        for w in [
            "files",
            "holds",
            "self",
            "pub",
            "std",
            "let",
            "impl",
            "def",
            "return",
            "import",
            "const",
            "var",
            "func",
            "struct",
            "mostly",
            "directories",
        ] {
            assert!(is_stop_word(w), "{w}");
        }
        assert!(!is_stop_word("lock") && !is_stop_word("tokens") && !is_stop_word("notes"));
    }

    #[test]
    fn weights_are_rounded_and_common_words_weigh_nothing() {
        let w = TermWeights::from_doc_freq(1000, [("git", 600), ("lock", 10), ("rare", 0)]);
        assert_eq!(w.weight("git"), 0.0);
        assert_eq!(w.weight("Lock"), 5.5, "1 + ln(1001/11) = 5.51, to halves");
        assert_eq!(w.weight("rare"), 8.0);
        assert_eq!(w.weight("unknown"), 1.0);
        // The same counts a few writes later: the same weights.
        let later = TermWeights::from_doc_freq(1003, [("git", 601), ("lock", 10), ("rare", 0)]);
        assert_eq!(w, later);
        // A small workspace calls nothing common.
        let small = TermWeights::from_doc_freq(4, [("git", 4)]);
        assert_eq!(small.weight("git"), 1.0);
    }

    #[test]
    fn workspace_weights_demote_words_common_elsewhere() {
        let v = Vocabulary::of([
            "git release notes: fixes to git push",
            "git release notes: fixes to git fetch",
        ]);
        assert_eq!(v.keywords(None, 1), ["git"]);
        let w = TermWeights::from_doc_freq(100, [("git", 90), ("release", 2), ("notes", 3)]);
        let k = v.keywords(Some(&w), 3);
        assert_eq!(k[..2], ["release", "notes"], "{k:?}");
        assert!(!k.contains(&"git".to_string()), "{k:?}");
    }
}
