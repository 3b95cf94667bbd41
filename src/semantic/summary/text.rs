//! What a child's text says about itself: its title and first sentences (prose: Markdown,
//! plain text, reStructuredText), or the description in its doc comments (code), with every
//! markup and comment marker taken off. Also the text its keywords are counted in.
//!
//! Only ever reads the head of a text ([`TEXT_SCAN_CHARS`]): what a file is about is said at
//! its top, and a summary must not cost a full read of every child.

use std::borrow::Cow;

/// Only this much of each child's text is read: the gist and keywords come from the head.
pub(super) const TEXT_SCAN_CHARS: usize = 8000;
/// A comment text with fewer words than this says too little to count keywords in alone:
/// the whole code is counted instead.
const COMMENT_WORDS_MIN: usize = 20;

/// How a text file is written, for finding what it says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Syntax {
    /// Prose: Markdown, plain text, reStructuredText, AsciiDoc.
    Prose,
    /// `//!` module docs, `///` item docs, `//` and `/* */` comments.
    Rust,
    /// C, C++, Go, Java, JavaScript, TypeScript, C#, …: `//`, `/* */`, `/** */`.
    Slash,
    /// A module docstring or `#` comments.
    Python,
    /// Shell, Perl, Ruby, Make, YAML, TOML, …: `#` comments.
    Hash,
    /// SQL, Lua, Haskell: `--` comments.
    Dash,
    /// Lisps and INI files: `;` comments.
    Semi,
}

/// The syntax of a text file, from its extension, else its name, else its shebang.
pub(super) fn syntax_of(name: &str, text: &str) -> Syntax {
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "rs" => return Syntax::Rust,
        "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" | "go" | "java" | "js" | "mjs"
        | "cjs" | "jsx" | "ts" | "tsx" | "mts" | "cts" | "cs" | "swift" | "kt" | "kts"
        | "scala" | "dart" | "php" | "groovy" | "gradle" | "zig" | "css" | "scss" | "less"
        | "proto" | "m" | "mm" => return Syntax::Slash,
        "py" | "pyi" | "pyw" => return Syntax::Python,
        "sh" | "bash" | "zsh" | "ksh" | "fish" | "pl" | "pm" | "perl" | "rb" | "r" | "mk"
        | "mak" | "cmake" | "tcl" | "awk" | "sed" | "ps1" | "yaml" | "yml" | "toml" | "conf"
        | "cfg" | "nix" | "jl" | "ex" | "exs" | "coffee" | "dockerfile" => return Syntax::Hash,
        "sql" | "lua" | "hs" | "elm" | "ada" | "adb" | "ads" => return Syntax::Dash,
        "el" | "lisp" | "lsp" | "cl" | "clj" | "cljs" | "scm" | "ss" | "rkt" | "ini" | "asm"
        | "s" => return Syntax::Semi,
        _ => {}
    }
    if matches!(
        lower.as_str(),
        "makefile" | "gnumakefile" | "dockerfile" | "containerfile" | "cmakelists.txt"
    ) {
        return Syntax::Hash;
    }
    if let Some(interp) = shebang_interpreter(text) {
        return if interp.starts_with("python") {
            Syntax::Python
        } else if matches!(interp, "node" | "deno" | "bun") {
            Syntax::Slash
        } else {
            Syntax::Hash
        };
    }
    Syntax::Prose
}

/// `#!/usr/bin/env python3` → `python3`; `#!/bin/sh -e` → `sh`.
pub(super) fn shebang_interpreter(text: &str) -> Option<&str> {
    let line = text.strip_prefix("#!")?.lines().next()?;
    let mut words = line.split_whitespace();
    let mut prog = words.next()?.rsplit('/').next()?;
    if prog == "env" {
        prog = words.find(|w| !w.starts_with('-'))?;
    }
    (!prog.is_empty()).then_some(prog)
}

/// A text's head, cut on a char boundary.
fn head(text: &str) -> &str {
    match text.char_indices().nth(TEXT_SCAN_CHARS) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// What a text says about itself: its title (a heading before any paragraph) and the first
/// sentences of its first paragraph, each one clean line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Lead {
    pub title: Option<String>,
    pub sentences: Vec<String>,
}

impl Lead {
    /// The overview's gist: the title, else the first sentence.
    pub fn gist(&self) -> Option<&str> {
        self.title
            .as_deref()
            .or(self.sentences.first().map(String::as_str))
    }
}

/// The lead of a child's text, read as its syntax says.
pub(super) fn lead_of(syntax: Syntax, text: &str) -> Lead {
    match syntax {
        Syntax::Prose => prose_lead(head(text)),
        code => match description(code, head(text)) {
            // Doc comments are Markdown (rustdoc, godoc, JSDoc): read them as prose.
            Some(d) => prose_lead(&d),
            None => Lead::default(),
        },
    }
}

/// One block of prose: a heading or a paragraph.
enum Block {
    Heading(String),
    Para {
        /// Its lines joined, markup off.
        text: String,
        lines: usize,
        /// It reads as code or data, not prose (see [`looks_like_code`]).
        code: bool,
    },
}

/// A plain-text title: one short line, no sentence end, with more text after it.
const TITLE_MAX_CHARS: usize = 80;

/// Up to this many blocks are read: the lead is in the first few.
const LEAD_BLOCKS: usize = 8;

fn prose_lead(text: &str) -> Lead {
    let blocks = blocks(text, LEAD_BLOCKS);
    let n = blocks.len();
    let mut lead = Lead::default();
    for (i, b) in blocks.into_iter().enumerate() {
        match b {
            Block::Heading(h) => {
                if lead.title.is_none() {
                    lead.title = Some(h);
                }
            }
            // Code or data in a text file (a test fixture, a table) is not what it is about.
            Block::Para { code: true, .. } => {}
            // Plain text has no heading markup: a first line standing alone, short and not
            // a sentence ("Contributed Software"), is its title.
            Block::Para {
                text: p, lines: 1, ..
            } if i == 0
                && i + 1 < n
                && p.chars().count() <= TITLE_MAX_CHARS
                && !p.ends_with(['.', '!', '?', ':', ';', ',', '。']) =>
            {
                lead.title = Some(p);
            }
            Block::Para { text: p, .. } => {
                lead.sentences = sentences(&p, 2);
                if !lead.sentences.is_empty() {
                    break;
                }
            }
        }
    }
    lead
}

/// Symbols of code (`{`, `;`, `=`, …) past this share of a paragraph's characters, in
/// percent, make it code rather than prose; prose has a parenthesis or two.
const CODE_SYMBOLS_PERCENT: usize = 6;

/// Whether a raw paragraph is code or data rather than prose. What it quotes in backticks
/// (`{owner}:{time_ns}`) is meant as code inside prose, and link targets are markup: neither
/// counts.
fn looks_like_code(raw: &str) -> bool {
    let mut unquoted = String::with_capacity(raw.len());
    for (i, part) in raw.split('`').enumerate() {
        if i % 2 == 0 {
            unquoted.push_str(part);
        }
    }
    let p = clean_inline(&unquoted);
    let n = p.chars().count().max(1);
    let symbols = p.chars().filter(|c| "{}();=<>[]|&$\\".contains(*c)).count();
    symbols * 100 > n * CODE_SYMBOLS_PERCENT || p.ends_with(['{', ';'])
}

/// The first `max` blocks of a prose text: front matter, code fences, HTML comments and tag
/// lines, badge and image lines, link definitions and rules are skipped; ATX (`# x`) and
/// setext (`x` over `===`) headings are headings.
fn blocks(text: &str, max: usize) -> Vec<Block> {
    let body = strip_front_matter(text);
    let mut out = Vec::new();
    let mut para: Vec<&str> = Vec::new();
    let mut fence: Option<&str> = None;
    let mut in_comment = false;
    let flush = |para: &mut Vec<&str>, out: &mut Vec<Block>| {
        if !para.is_empty() {
            let raw = para.join(" ");
            let joined = clean_inline(&raw);
            if !joined.is_empty() {
                out.push(Block::Para {
                    text: joined,
                    lines: para.len(),
                    code: looks_like_code(&raw),
                });
            }
            para.clear();
        }
    };
    for line in body.lines() {
        if out.len() >= max {
            break;
        }
        let t = line.trim();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
            continue;
        }
        if in_comment {
            in_comment = !t.contains("-->");
            continue;
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            flush(&mut para, &mut out);
            fence = Some(&t[..3]);
            continue;
        }
        if t.starts_with("<!--") {
            flush(&mut para, &mut out);
            in_comment = !t.contains("-->");
            continue;
        }
        if t.is_empty() {
            flush(&mut para, &mut out);
            continue;
        }
        if is_rule(t) {
            // A one-line paragraph over `===` or `---` is a setext heading.
            if para.len() == 1 && (t.starts_with('=') || t.starts_with('-')) {
                let h = clean_inline(para[0]);
                para.clear();
                if !h.is_empty() {
                    out.push(Block::Heading(h));
                }
            } else {
                flush(&mut para, &mut out);
            }
            continue;
        }
        if let Some(h) = heading_text(t) {
            flush(&mut para, &mut out);
            let h = clean_inline(h);
            if !h.is_empty() {
                out.push(Block::Heading(h));
            }
            continue;
        }
        if is_noise_line(t) {
            flush(&mut para, &mut out);
            continue;
        }
        // A block of `Field: value` lines (a Debian control file, mail headers) is a list of
        // fields, not a sentence: its first line stands alone.
        if para.len() == 1 && is_field(para[0]) && is_field(t) {
            flush(&mut para, &mut out);
        }
        para.push(strip_list_marker(t));
    }
    flush(&mut para, &mut out);
    out.truncate(max);
    out
}

fn heading_text(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches('#');
    let level = line.len() - rest.len();
    if (1..=6).contains(&level) && (rest.starts_with(' ') || rest.is_empty()) {
        let h = rest.trim().trim_end_matches('#').trim();
        (!h.is_empty()).then_some(h)
    } else {
        None
    }
}

/// A line of one punctuation character repeated: a setext underline or a thematic break.
fn is_rule(t: &str) -> bool {
    let mut chars = t.chars().filter(|c| !c.is_whitespace());
    let Some(first) = chars.next() else {
        return false;
    };
    "=-*_~^#+".contains(first) && t.chars().filter(|&c| c == first).count() >= 3 && {
        chars.all(|c| c == first)
    }
}

/// Lines that are not prose: badges and images (`[![x](..)](..)`, `![x](..)`), HTML tags,
/// link definitions (`[x]: url`), table rules.
fn is_noise_line(t: &str) -> bool {
    if t.starts_with("![") || t.starts_with("[![") {
        return true;
    }
    if t.starts_with('<') && t.ends_with('>') {
        return true;
    }
    if t.starts_with('[') {
        if let Some(close) = t.find("]:") {
            if !t[1..close].contains(']') {
                return true;
            }
        }
    }
    t.starts_with('|') && t.chars().all(|c| "|-: ".contains(c))
}

/// `Format: https://…`, `Upstream-Contact: x`: a word (letters, `-`) then `:`.
fn is_field(t: &str) -> bool {
    match t.split_once(": ") {
        Some((k, _)) => {
            !k.is_empty()
                && k.len() <= 30
                && k.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        }
        None => false,
    }
}

fn strip_list_marker(t: &str) -> &str {
    for m in ["- ", "* ", "+ ", "> "] {
        if let Some(r) = t.strip_prefix(m) {
            return r.trim_start();
        }
    }
    if t == ">" {
        return "";
    }
    // `1. ` / `12) `
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    if (1..=3).contains(&digits) {
        let rest = &t[digits..];
        if let Some(r) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return r.trim_start();
        }
    }
    t
}

fn strip_front_matter(text: &str) -> &str {
    for fence in ["---\n", "+++\n"] {
        if let Some(rest) = text.strip_prefix(fence) {
            let close = format!("\n{}", &fence[..3]);
            if let Some(end) = rest.find(&close) {
                let after = &rest[end + 4..];
                return after.split_once('\n').map_or("", |(_, a)| a);
            }
        }
    }
    text
}

/// Inline Markdown taken off: images dropped, links and autolinks become their text,
/// code spans and emphasis lose their markers, and the line is made quotable.
pub(super) fn clean_inline(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // ![alt](url): an image says nothing in a summary.
        if c == '!' && chars.get(i + 1) == Some(&'[') {
            if let Some(end) = link_end(&chars, i + 1) {
                i = end;
                continue;
            }
        }
        if c == '[' {
            if let Some(end) = link_end(&chars, i) {
                let close = chars[i..].iter().position(|&c| c == ']').map(|p| i + p);
                if let Some(close) = close {
                    out.extend(&chars[i + 1..close]);
                }
                i = end;
                continue;
            }
        }
        // <https://x>: the address without its brackets.
        if c == '<' {
            let rest: String = chars[i + 1..].iter().take(8).collect();
            if rest.starts_with("http://") || rest.starts_with("https://") {
                if let Some(p) = chars[i..].iter().position(|&c| c == '>') {
                    out.extend(&chars[i + 1..i + p]);
                    i += p + 1;
                    continue;
                }
            }
        }
        if c == '`' {
            i += 1;
            continue;
        }
        if c == '*' || c == '_' {
            // Emphasis markers sit at a word's edge; `snake_case` and `a * b` keep theirs.
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
            let both = word(prev) && word(next);
            let spaced =
                prev.is_none_or(char::is_whitespace) && next.is_none_or(char::is_whitespace);
            if !both && !spaced {
                i += 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    quotable(&out)
}

/// The end (exclusive) of `[text](url)`, `[text][ref]` or `[text][]` starting at `open`.
fn link_end(chars: &[char], open: usize) -> Option<usize> {
    let close = open + chars[open..].iter().position(|&c| c == ']')?;
    if chars[open + 1..close].contains(&'[') {
        return None;
    }
    match chars.get(close + 1) {
        Some('(') => {
            // Targets may hold parentheses of their own (`wiki/Lock_(computing)`).
            let mut depth = 0usize;
            for (k, &c) in chars.iter().enumerate().skip(close + 1) {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 1 => return Some(k + 1),
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            None
        }
        Some('[') => {
            let end = close + 1 + chars[close + 1..].iter().position(|&c| c == ']')?;
            Some(end + 1)
        }
        _ => None,
    }
}

/// One line fit to quote: control characters become spaces, replacement characters and
/// invisible marks go, runs of whitespace become one space.
pub(super) fn quotable(s: &str) -> String {
    let mapped: String = s
        .chars()
        .filter(|c| !matches!(c, '\u{FFFD}' | '\u{FEFF}' | '\u{200B}' | '\u{00AD}'))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Words after which a `.` does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "cf", "mr", "mrs", "ms", "dr", "prof", "st", "no", "fig", "approx",
    "incl", "resp", "viz", "al", "ca", "jr", "sr",
];

/// The first `max` sentences of a paragraph. A sentence ends at `.`, `!` or `?` followed by
/// whitespace and then something other than a lowercase letter (so `e.g. this` and `v1.2`
/// stay in one), or at a CJK full stop.
pub(super) fn sentences(p: &str, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = p.char_indices().collect();
    let mut k = 0;
    while k < chars.len() && out.len() < max {
        let (i, c) = chars[k];
        let end = i + c.len_utf8();
        let ends = match c {
            '。' | '！' | '？' => true,
            '.' | '!' | '?' => {
                let next = chars.get(k + 1).map(|&(_, n)| n);
                let after = chars[k + 1..]
                    .iter()
                    .map(|&(_, n)| n)
                    .find(|n| !n.is_whitespace());
                let spaced = next.is_some_and(char::is_whitespace);
                let word_before: String = p[start..i]
                    .rsplit(char::is_whitespace)
                    .next()
                    .unwrap_or("")
                    .trim_start_matches(['(', '"', '\''])
                    .to_lowercase();
                let abbreviation = c == '.'
                    && (ABBREVIATIONS.contains(&word_before.as_str())
                        || (word_before.chars().count() == 1
                            && word_before.chars().all(char::is_alphabetic)));
                next.is_none()
                    || (spaced && !abbreviation && !after.is_some_and(char::is_lowercase))
            }
            _ => false,
        };
        if ends {
            let s = p[start..end].trim();
            if !s.is_empty() {
                out.push(s.to_string());
            }
            start = end;
        }
        k += 1;
    }
    if out.len() < max {
        let rest = p[start..].trim();
        if !rest.is_empty() {
            out.push(rest.to_string());
        }
    }
    out
}

/// One comment block of a code file, its markers taken off.
struct Comment {
    /// A doc comment (`//!`, `///`, `/** */`, a docstring): written to describe.
    doc: bool,
    lines: Vec<String>,
}

impl Comment {
    fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// A licence header (not a description), by its words.
    fn is_license(&self) -> bool {
        let t = self.text().to_lowercase();
        [
            "license",
            "licence",
            "warranty",
            "all rights reserved",
            "spdx-",
            "permission is hereby",
        ]
        .iter()
        .any(|w| t.contains(w))
    }

    /// Without its copyright lines: `# Copyright (c) 2008, A. Person` over a line that says
    /// what the script does leaves that line.
    fn without_copyright(mut self) -> Comment {
        self.lines.retain(|l| {
            let l = l.to_lowercase();
            !(l.contains("copyright") || l.contains("(c)") || l.starts_with('©'))
        });
        self
    }

    fn has_words(&self) -> bool {
        self.lines.iter().any(|l| {
            l.split_whitespace()
                .any(|w| w.chars().any(char::is_alphabetic))
        })
    }
}

/// Tool directives in comments, not descriptions: modelines, linters, build tags.
fn is_directive(t: &str) -> bool {
    let l = t.to_lowercase();
    l.contains("-*-")
        || l.starts_with("vim:")
        || l.starts_with("vi:")
        || l.starts_with("shellcheck ")
        || l.starts_with("eslint")
        || l.starts_with("@ts-")
        || l.starts_with("noqa")
        || l.starts_with("pylint:")
        || l.starts_with("type: ignore")
        || l.starts_with("prettier-ignore")
        || l.starts_with("go:")
        || l.starts_with("+build")
        || l.starts_with("nolint")
        || l.starts_with("clang-format")
}

/// A Doxygen or JSDoc tag line: `@param x`, `\file`. Only `@brief` / `\brief` describes.
fn strip_doc_tag(t: &str) -> Option<&str> {
    for b in ["@brief ", "\\brief ", "@summary ", "@description "] {
        if let Some(r) = t.strip_prefix(b) {
            return Some(r);
        }
    }
    if (t.starts_with('@') || t.starts_with('\\'))
        && t[1..].chars().next().is_some_and(char::is_alphabetic)
    {
        return None;
    }
    Some(t)
}

/// The line-comment markers of a syntax, longest first, with whether each marks a doc comment.
fn line_markers(syntax: Syntax) -> &'static [(&'static str, bool)] {
    match syntax {
        Syntax::Rust => &[("//!", true), ("///", true), ("//", false)],
        Syntax::Slash => &[("///", true), ("//!", true), ("//", false)],
        Syntax::Python | Syntax::Hash => &[("#", false)],
        Syntax::Dash => &[("--", false)],
        Syntax::Semi => &[(";", false)],
        Syntax::Prose => &[],
    }
}

fn has_block_comments(syntax: Syntax) -> bool {
    matches!(syntax, Syntax::Rust | Syntax::Slash)
}

/// A Python string opener: `"""`, `'''`, with an `r`/`u`/`b` prefix.
fn docstring_open(t: &str) -> Option<(&'static str, &str)> {
    let t = t.trim_start_matches(['r', 'R', 'u', 'U', 'b', 'B']);
    for q in ["\"\"\"", "'''"] {
        if let Some(rest) = t.strip_prefix(q) {
            return Some((q, rest));
        }
    }
    None
}

/// The comment blocks of a code text, in order, with the index of the line each starts on
/// and whether code came before it. Line comments after code on the same line are not
/// read: they explain that line, not the file.
fn comments(syntax: Syntax, text: &str) -> Vec<(Comment, bool)> {
    let markers = line_markers(syntax);
    let mut out: Vec<(Comment, bool)> = Vec::new();
    let mut seen_code = false;
    // The open line-comment block: its marker and lines.
    let mut open: Option<(&str, Comment)> = None;
    let mut lines = text.lines().enumerate().peekable();
    let close = |open: &mut Option<(&str, Comment)>, out: &mut Vec<(Comment, bool)>, code| {
        if let Some((_, c)) = open.take() {
            out.push((c.without_copyright(), code));
        }
    };
    while let Some((n, line)) = lines.next() {
        let t = line.trim();
        if n == 0 && t.starts_with("#!") && !t.starts_with("#![") {
            continue; // the shebang
        }
        if syntax == Syntax::Rust && (t.starts_with("#![") || t.starts_with("#[")) {
            close(&mut open, &mut out, seen_code);
            continue; // attributes are neither description nor the code that ends the head
        }
        // Line comments.
        if let Some(&(m, doc)) = markers.iter().find(|(m, _)| t.starts_with(m)) {
            // `////` banners and `//!`-less `//` after a doc block start a new block.
            if open.as_ref().is_some_and(|(om, _)| *om != m) {
                close(&mut open, &mut out, seen_code);
            }
            let body = t[m.len()..].strip_prefix(' ').unwrap_or(&t[m.len()..]);
            let body = if m == "#" || m == ";" || m == "--" {
                body.trim_start_matches(m.chars().next().unwrap_or('#'))
                    .trim()
            } else {
                body.trim_end()
            };
            let entry = open.get_or_insert_with(|| {
                (
                    m,
                    Comment {
                        doc,
                        lines: Vec::new(),
                    },
                )
            });
            if !is_directive(body.trim()) {
                if let Some(b) = strip_doc_tag(body.trim_start()) {
                    entry.1.lines.push(b.to_string());
                }
            }
            continue;
        }
        close(&mut open, &mut out, seen_code);
        if t.is_empty() {
            continue;
        }
        // Block comments.
        if has_block_comments(syntax) && t.starts_with("/*") {
            let doc = (t.starts_with("/**") && !t.starts_with("/***")) || t.starts_with("/*!");
            let mut body: Vec<String> = Vec::new();
            let mut cur = t.trim_start_matches('/').trim_start_matches(['*', '!']);
            loop {
                let (part, done) = match cur.find("*/") {
                    Some(e) => (&cur[..e], true),
                    None => (cur, false),
                };
                let part = part.trim();
                let part = part.strip_prefix('*').unwrap_or(part).trim();
                if !is_directive(part) {
                    if let Some(b) = strip_doc_tag(part) {
                        body.push(b.to_string());
                    }
                }
                if done {
                    break;
                }
                match lines.next() {
                    Some((_, l)) => cur = l.trim(),
                    None => break,
                }
            }
            out.push((Comment { doc, lines: body }.without_copyright(), seen_code));
            continue;
        }
        // Python docstrings.
        if syntax == Syntax::Python {
            if let Some((q, rest)) = docstring_open(t) {
                let mut body: Vec<String> = Vec::new();
                let mut cur = rest;
                loop {
                    let (part, done) = match cur.find(q) {
                        Some(e) => (&cur[..e], true),
                        None => (cur, false),
                    };
                    body.push(part.trim().to_string());
                    if done {
                        break;
                    }
                    match lines.next() {
                        Some((_, l)) => cur = l,
                        None => break,
                    }
                }
                out.push((
                    Comment {
                        doc: true,
                        lines: body,
                    },
                    seen_code,
                ));
                continue;
            }
        }
        seen_code = true;
    }
    close(&mut open, &mut out, seen_code);
    out
}

/// The description a code file gives of itself, markers off: Rust `//!` (else a leading
/// comment, else the first `///`), a Python module docstring (else the header comment after
/// the shebang), a leading `/** */`, `/* */` or `//` block (Go's `// Package x`), a shell
/// header comment. Licence headers and tool directives are passed over.
fn description(syntax: Syntax, text: &str) -> Option<String> {
    let all = comments(syntax, text);
    let usable = |c: &Comment| c.has_words() && !c.is_license();
    let leading: Vec<&Comment> = all
        .iter()
        .filter(|(_, after_code)| !after_code)
        .map(|(c, _)| c)
        .filter(|c| usable(c))
        .collect();
    let pick = leading
        .iter()
        .find(|c| c.doc)
        .or_else(|| leading.first())
        .copied()
        .or_else(|| {
            // An item's doc (`///`, `/** */`) further down: the file's first described thing.
            all.iter()
                .map(|(c, _)| c)
                .find(|c| c.doc && usable(c) && syntax != Syntax::Python)
        })?;
    Some(pick.text())
}

/// The text a child's keywords are counted in: a code file's comments (its prose, without
/// the keywords of its language) when they say enough, else its whole head; web addresses
/// and mail addresses are taken out (their `www`, `com` and host names are not topics).
pub(super) fn keyword_text(syntax: Syntax, text: &str) -> String {
    let text = head(text);
    let body: Cow<str> = match syntax {
        Syntax::Prose => Cow::Borrowed(strip_front_matter(text)),
        code => {
            let prose: Vec<String> = comments(code, text)
                .into_iter()
                .filter(|(c, _)| !c.is_license())
                .map(|(c, _)| c.text())
                .collect();
            let joined = prose.join("\n");
            if joined.split_whitespace().count() >= COMMENT_WORDS_MIN {
                Cow::Owned(joined)
            } else {
                Cow::Borrowed(text)
            }
        }
    };
    body.split_whitespace()
        .filter(|w| {
            let address = w.contains("://") || (w.contains('@') && w.contains('.'));
            !address
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gist(syntax: Syntax, text: &str) -> Option<String> {
        lead_of(syntax, text).gist().map(str::to_string)
    }

    #[test]
    fn prose_headings_setext_badges_and_front_matter() {
        let readme = "[![Build](https://x/badge.svg)](https://x)\n\nGit - fast, scalable\n\
                      ====================\n\nGit is a fast system. It has a rich command set.\n";
        let l = lead_of(Syntax::Prose, readme);
        assert_eq!(l.title.as_deref(), Some("Git - fast, scalable"));
        assert_eq!(
            l.sentences,
            ["Git is a fast system.", "It has a rich command set."]
        );
        assert_eq!(
            gist(Syntax::Prose, "---\ntitle: x\n---\n## Real *title*\n").as_deref(),
            Some("Real title")
        );
        assert_eq!(
            gist(
                Syntax::Prose,
                "```\ncode\n```\nSee [the guide](g.md) for `make`."
            )
            .as_deref(),
            Some("See the guide for make.")
        );
        assert_eq!(
            gist(Syntax::Prose, "Format: https://x/\nSource: y\n").as_deref(),
            Some("Format: https://x/")
        );
        // A fixture of code in a text file: its prose, if any, not its code.
        let fixture = "void f(void) { struct s x = INIT; g(&x); }\n\nChecks that f frees x.\n";
        assert_eq!(
            gist(Syntax::Prose, fixture).as_deref(),
            Some("Checks that f frees x.")
        );
        assert_eq!(
            gist(Syntax::Prose, "| a | b |\n|---|---|\n| 1 | 2 |\n"),
            None
        );
        // Code quoted in prose, and links, are prose.
        let quoted = "Lock tokens `{owner}:{time_ns}:{E|T}` and [owners](a(b).md).";
        assert_eq!(
            gist(Syntax::Prose, quoted).as_deref(),
            Some("Lock tokens {owner}:{time_ns}:{E|T} and owners.")
        );
        // A first line alone, then text: the title of a plain-text file.
        let l = lead_of(
            Syntax::Prose,
            "Contributed Software\n\nThese are tools. More.\n",
        );
        assert_eq!(l.title.as_deref(), Some("Contributed Software"));
        assert_eq!(l.sentences, ["These are tools.", "More."]);
    }

    #[test]
    fn sentences_skip_abbreviations_and_versions() {
        assert_eq!(
            sentences("Use e.g. this one. Then v1.2 is out! more", 3),
            ["Use e.g. this one.", "Then v1.2 is out! more"]
        );
        assert_eq!(sentences("全文检索。第二句", 1), ["全文检索。"]);
        assert_eq!(sentences("no end", 2), ["no end"]);
    }

    #[test]
    fn code_descriptions_lose_their_markers() {
        let rust = "//! Lock tokens and `owner_id`s.\n//!\n//! More.\n\nuse std::x;\n";
        assert_eq!(
            gist(Syntax::Rust, rust).as_deref(),
            Some("Lock tokens and owner_ids.")
        );
        let item = "use a::b;\n\n/// Takes the lock.\npub fn f() {}\n";
        assert_eq!(gist(Syntax::Rust, item).as_deref(), Some("Takes the lock."));
        let py = "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n\"\"\"Sync the mirrors.\n\nLong.\n\"\"\"\nimport os\n";
        assert_eq!(syntax_of("sync", py), Syntax::Python);
        assert_eq!(
            gist(Syntax::Python, py).as_deref(),
            Some("Sync the mirrors.")
        );
        let c = "/*\n * Copyright (C) 2011 A. Person\n * GPL\n */\n\n/**\n * @file x.c\n * A credential helper for libsecret.\n */\n#include <x.h>\n";
        assert_eq!(
            gist(Syntax::Slash, c).as_deref(),
            Some("A credential helper for libsecret.")
        );
        let go = "// Copyright 2020 The Go Authors. BSD license.\n\n//go:build linux\n\n// Package walk visits trees.\npackage walk\n";
        assert_eq!(
            gist(Syntax::Slash, go).as_deref(),
            Some("Package walk visits trees.")
        );
        let sh = "#!/bin/sh\n\n# Usage: run it after make.\n# More here.\n\nset -e\n";
        assert_eq!(syntax_of("x.sh", sh), Syntax::Hash);
        assert_eq!(
            gist(Syntax::Hash, sh).as_deref(),
            Some("Usage: run it after make.")
        );
        assert_eq!(gist(Syntax::Slash, "int main() { return 0; }\n"), None);
        let train =
            "#!/bin/sh\n# Copyright (c) 2008, A. Person\n# Prime the cache from merges\n\nme=x\n";
        assert_eq!(
            gist(Syntax::Hash, train).as_deref(),
            Some("Prime the cache from merges")
        );
        let js = "'use strict';\n/** Parses a query string. */\nexport function parse() {}\n";
        assert_eq!(
            gist(Syntax::Slash, js).as_deref(),
            Some("Parses a query string.")
        );
    }

    #[test]
    fn keyword_text_prefers_comments_and_drops_addresses() {
        let code = format!(
            "//! {}\nfn main() {{ let unwrap_me = 1; }}\n",
            "token owner lease ".repeat(10)
        );
        let t = keyword_text(Syntax::Rust, &code);
        assert!(t.contains("token") && !t.contains("unwrap_me"), "{t}");
        let t = keyword_text(Syntax::Prose, "see https://www.example.com or a@b.org now");
        assert_eq!(t, "see or now");
    }
}
