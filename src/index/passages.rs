//! Passages: how a file is cut for the model, which reads at most one window of word pieces
//! (256 for all-MiniLM-L6-v2). A file is embedded as the passages that cover it whole (up to
//! `vikingfs.index.max_file_bytes`), and a file's semantic score is its best passage's, so a
//! function at the end of a module is found as well as the imports at its head.
//!
//! Where a passage may end:
//! - code (by the file's extension, [`is_code`]): at a top-level item — a line at the block's
//!   outer indentation after a blank line (a function, a class, an `impl` block, with the
//!   comments, decorators and attributes right above it); an item too long for one window is
//!   cut at its own items (the methods of a class or an `impl`: the next indentation level),
//!   then at lines;
//! - prose: at paragraphs (blank lines), and before a Markdown heading;
//! - a line longer than a window is cut between characters.
//!
//! Consecutive small pieces are packed into one passage up to the budget, so a file has about
//! as many passages as windows it fills. The budget is counted in estimated word pieces
//! ([`estimate_tokens`]: no tokenizer here, so the index needs no model to cut), set below
//! the window so that an estimate that falls short is rarely truncated.
//!
//! A record's cosine is its best passage's, a passage after the opening one counting
//! [`opening_margin`] less ([`record_cosine`]): prose states its subject first (a man page's
//! description, a document's lead), and a later paragraph that happens to sit nearer a query
//! is more often a false friend than the subject. Measured with the search benchmark's runs
//! and the stored passage vectors (MRR@10, hybrid, best passage alone → with the margin):
//! man pages 0.707 → 0.740, pydoc 0.505 → 0.505, code 0.601 → 0.607 (a smaller margin for
//! code, whose head is its imports: 0.10 there costs code 0.005, the opening alone 0.06).
//!
//! Invariants: passages are in order, do not overlap, are never empty of text, and together
//! cover every non-blank line; a text without any gives one passage (so every record that
//! has vectors has at least one).

/// A span of a text: its bytes and its lines (1-based, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passage {
    pub start: usize,
    pub end: usize,
    pub lines: [u32; 2],
}

/// Estimated word pieces per passage: under the model's 256 with `[CLS]` and `[SEP]` and a
/// margin for the estimate.
pub const BUDGET: usize = 200;

/// Extensions read as code.
const CODE_EXTS: &[&str] = &[
    "rs", "py", "pyi", "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "go", "js", "mjs", "cjs", "ts",
    "tsx", "jsx", "java", "kt", "kts", "scala", "rb", "php", "cs", "swift", "sh", "bash", "zsh",
    "lua", "pl", "pm", "m", "mm", "r", "jl", "ex", "exs", "erl", "hs", "ml", "mli", "fs", "dart",
    "zig", "nim", "v", "sql", "proto", "cmake", "gradle", "groovy", "ps1", "el", "clj", "vue",
    "svelte",
];

/// How much less a passage after the opening one counts (module doc): 0.06 for code, 0.10
/// for prose.
pub fn opening_margin(name: &str) -> f32 {
    if is_code(name) {
        0.06
    } else {
        0.10
    }
}

/// A record's cosine from its passages' (in order, the opening first): the passage that
/// gives it and the cosine, a later passage's less [`opening_margin`] (module doc). `None`
/// without passages.
pub fn record_cosine(name: &str, cosines: impl IntoIterator<Item = f32>) -> Option<(usize, f32)> {
    let margin = opening_margin(name);
    let mut it = cosines.into_iter();
    let opening = it.next()?;
    // The best, the first of equals.
    Some(it.enumerate().fold((0, opening), |b, (i, c)| {
        if c - margin > b.1 {
            (i + 1, c - margin)
        } else {
            b
        }
    }))
}

/// Whether a file of this name is cut as code.
pub fn is_code(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, ext)| CODE_EXTS.contains(&ext.to_ascii_lowercase().as_str()))
}

/// Word pieces `s` is likely to take: a run of letters and digits is a word piece per 6
/// characters or part of it (WordPiece keeps common words whole and cuts rare ones and
/// identifiers), every other visible character one (punctuation is a piece of its own).
pub fn estimate_tokens(s: &str) -> usize {
    if s.is_ascii() {
        // The same count over bytes (most text, all code), without decoding characters.
        let (mut n, mut run) = (0, 0usize);
        for &b in s.as_bytes() {
            if b.is_ascii_alphanumeric() {
                run += 1;
                continue;
            }
            n += run.div_ceil(6);
            run = 0;
            if !b.is_ascii_whitespace() && b != 0x0b {
                n += 1;
            }
        }
        return n + run.div_ceil(6);
    }
    let mut n = 0;
    let mut run: usize = 0;
    for c in s.chars() {
        if c.is_alphanumeric() {
            run += 1;
            continue;
        }
        n += run.div_ceil(6);
        run = 0;
        if !c.is_whitespace() {
            n += 1;
        }
    }
    n + run.div_ceil(6)
}

/// The passages of `text`, a file named `name`, each of at most [`BUDGET`] estimated word
/// pieces (but for a single character), in order.
pub fn split(name: &str, text: &str) -> Vec<Passage> {
    let lines = Lines::of(text);
    let code = is_code(name);
    let mut pieces = Vec::new();
    if code {
        items(&lines, 0, lines.len(), &mut pieces);
    } else {
        paragraphs(&lines, &mut pieces);
    }
    let out = pack(&lines, text, pieces);
    if out.is_empty() {
        return vec![Passage {
            start: 0,
            end: text.len(),
            lines: [1, lines.len().max(1) as u32],
        }];
    }
    out
}

/// The lines of a text: byte ranges without their newline, and the estimated word pieces
/// before each (so a range of lines costs two lookups, however often the cut asks).
struct Lines<'a> {
    text: &'a str,
    spans: Vec<(usize, usize)>,
    tokens_before: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn of(text: &'a str) -> Lines<'a> {
        let mut spans = Vec::new();
        let mut start = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                spans.push((start, i));
                start = i + 1;
            }
        }
        if start < text.len() {
            spans.push((start, text.len()));
        }
        let mut tokens_before = Vec::with_capacity(spans.len() + 1);
        let mut sum = 0;
        tokens_before.push(0);
        for &(a, b) in &spans {
            sum += estimate_tokens(&text[a..b]);
            tokens_before.push(sum);
        }
        Lines {
            text,
            spans,
            tokens_before,
        }
    }
    fn len(&self) -> usize {
        self.spans.len()
    }
    fn get(&self, i: usize) -> &'a str {
        let (a, b) = self.spans[i];
        &self.text[a..b]
    }
    fn blank(&self, i: usize) -> bool {
        let line = self.get(i);
        match line.bytes().find(|b| !b.is_ascii_whitespace()) {
            None => true,
            Some(b) if b.is_ascii() => false,
            // Unicode whitespace (a no-break space, an ideographic space) is blank too.
            Some(_) => line.trim().is_empty(),
        }
    }
    /// Leading whitespace, a tab counting 4.
    fn indent(&self, i: usize) -> usize {
        let mut n = 0;
        for c in self.get(i).chars() {
            match c {
                ' ' => n += 1,
                '\t' => n += 4,
                _ => break,
            }
        }
        n
    }
    fn tokens(&self, from: usize, to: usize) -> usize {
        self.tokens_before[to] - self.tokens_before[from]
    }
}

/// A run of whole lines `[from, to)`, or a cut of one long line (`part` of its bytes).
#[derive(Debug, Clone, Copy)]
struct Piece {
    from: usize,
    to: usize,
    part: Option<(usize, usize)>,
    /// Starts a section (an item of code, a heading of prose): packing begins a new passage
    /// here when the current one is already a third full.
    section: bool,
}

fn lines_piece(from: usize, to: usize) -> Piece {
    Piece {
        from,
        to,
        part: None,
        section: false,
    }
}

/// Code: the items of lines `[from, to)` at their outer indentation; an item over the budget
/// is cut at its inner items, then at lines.
fn items(lines: &Lines, from: usize, to: usize, out: &mut Vec<Piece>) {
    // A closing `}` at the outer level (the end of an `impl`) does not set the level.
    let Some(base) = (from..to)
        .filter(|&i| !lines.blank(i) && !is_closer(lines.get(i)))
        .map(|i| lines.indent(i))
        .min()
    else {
        by_lines(lines, from, to, out);
        return;
    };
    let mut starts = vec![from];
    for i in from + 1..to {
        let starts_item = !lines.blank(i) && lines.indent(i) == base && !is_closer(lines.get(i));
        if starts_item && lines.blank(i - 1) {
            starts.push(i);
        }
    }
    starts.push(to);
    for w in starts.windows(2) {
        let before = out.len();
        item(lines, w[0], w[1], base, out);
        if let Some(p) = out.get_mut(before) {
            p.section = true;
        }
    }
}

/// One item, lines `[a, b)` at indentation `base`: whole, or cut at its inner items, then at
/// lines.
fn item(lines: &Lines, a: usize, b: usize, base: usize, out: &mut Vec<Piece>) {
    {
        if lines.tokens(a, b) <= BUDGET {
            out.push(lines_piece(a, b));
            return;
        }
        // Too long: its body's items (the next indentation level), else its lines.
        let inner = (a + 1..b)
            .filter(|&i| !lines.blank(i) && !is_closer(lines.get(i)))
            .map(|i| lines.indent(i))
            .min();
        let has_inner_items = inner.is_some_and(|ind| {
            ind > base
                && (a + 2..b)
                    .any(|i| lines.indent(i) == ind && !lines.blank(i) && lines.blank(i - 1))
        });
        if has_inner_items {
            // The header line(s) before the first inner item go with it.
            let first = (a + 1..b)
                .find(|&i| !lines.blank(i) && inner == Some(lines.indent(i)))
                .unwrap_or(a + 1);
            let mut sub = Vec::new();
            items(lines, first, b, &mut sub);
            if let Some(s) = sub.first_mut() {
                s.from = a;
            } else {
                sub.push(lines_piece(a, b));
            }
            for p in sub {
                by_lines(lines, p.from, p.to, out);
            }
        } else {
            by_lines(lines, a, b, out);
        }
    }
}

/// Lines `[from, to)` as whole-line pieces, a line over the budget cut into parts.
fn by_lines(lines: &Lines, from: usize, to: usize, out: &mut Vec<Piece>) {
    if lines.tokens(from, to) <= BUDGET {
        out.push(lines_piece(from, to));
        return;
    }
    for i in from..to {
        let t = lines.tokens(i, i + 1);
        if t <= BUDGET {
            out.push(lines_piece(i, i + 1));
            continue;
        }
        let (a, b) = lines.spans[i];
        let s = &lines.text[a..b];
        let mut start = 0;
        // Counted as estimate_tokens counts: a piece per 6 letters of a run, one per symbol.
        let (mut used, mut run) = (0, 0);
        for (j, c) in s.char_indices() {
            let mut adds = if c.is_alphanumeric() {
                run += 1;
                usize::from(run % 6 == 1)
            } else {
                run = 0;
                usize::from(!c.is_whitespace())
            };
            if used + adds > BUDGET {
                out.push(Piece {
                    from: i,
                    to: i + 1,
                    part: Some((a + start, a + j)),
                    section: false,
                });
                start = j;
                used = 0;
                // The cut starts a new piece, even inside a run of letters.
                run = usize::from(c.is_alphanumeric());
                adds = usize::from(!c.is_whitespace());
            }
            used += adds;
        }
        if start < s.len() {
            out.push(Piece {
                from: i,
                to: i + 1,
                part: Some((a + start, b)),
                section: false,
            });
        }
    }
}

/// Prose: paragraphs (runs of non-blank lines), a Markdown heading starting its own.
fn paragraphs(lines: &Lines, out: &mut Vec<Piece>) {
    let mut i = 0;
    while i < lines.len() {
        if lines.blank(i) {
            i += 1;
            continue;
        }
        let from = i;
        i += 1;
        while i < lines.len() && !lines.blank(i) && !is_heading(lines.get(i)) {
            i += 1;
        }
        let heading = is_heading(lines.get(from));
        let before = out.len();
        by_lines(lines, from, i, out);
        if let Some(p) = out.get_mut(before) {
            p.section = heading;
        }
    }
}

/// A line that closes a block (`}`, `)`, `]`): it ends an item rather than starting one.
fn is_closer(line: &str) -> bool {
    line.trim_start().starts_with(['}', ')', ']'])
}

fn is_heading(line: &str) -> bool {
    let t = line.trim_start();
    let hashes = t.bytes().take_while(|&b| b == b'#').count();
    (1..=6).contains(&hashes) && t[hashes..].starts_with(' ')
}

/// Pack consecutive pieces into passages of at most [`BUDGET`] estimated pieces.
fn pack(lines: &Lines, text: &str, pieces: Vec<Piece>) -> Vec<Passage> {
    let mut out: Vec<Passage> = Vec::new();
    let mut cur: Option<(Passage, usize)> = None;
    for p in pieces {
        let (start, end) = match p.part {
            Some(r) => r,
            None => (lines.spans[p.from].0, lines.spans[p.to - 1].1),
        };
        if text[start..end].trim().is_empty() {
            continue;
        }
        let tokens = match p.part {
            Some(_) => estimate_tokens(&text[start..end]),
            None => lines.tokens(p.from, p.to),
        };
        let span = Passage {
            start,
            end,
            lines: [p.from as u32 + 1, p.to as u32],
        };
        cur = match cur {
            // A part of a long line never shares a passage: it fills one.
            Some((c, n))
                if p.part.is_none() && n + tokens <= BUDGET && !(p.section && n >= BUDGET / 3) =>
            {
                Some((
                    Passage {
                        start: c.start,
                        end,
                        lines: [c.lines[0], span.lines[1]],
                    },
                    n + tokens,
                ))
            }
            Some((c, _)) => {
                out.push(c);
                Some((span, tokens))
            }
            None => Some((span, tokens)),
        };
        if p.part.is_some() {
            out.extend(cur.take().map(|(c, _)| c));
        }
    }
    out.extend(cur.map(|(c, _)| c));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_passage_counts_less_than_the_opening() {
        let near = |got: Option<(usize, f32)>, want: (usize, f32)| {
            let (i, c) = got.unwrap();
            assert!(
                i == want.0 && (c - want.1).abs() < 1e-6,
                "{got:?} != {want:?}"
            );
        };
        // Prose: 0.10 less.
        near(record_cosine("a.md", [0.50, 0.58, 0.40]), (0, 0.50));
        near(record_cosine("a.md", [0.50, 0.61, 0.65]), (2, 0.55));
        // Code: 0.06 less.
        near(record_cosine("a.rs", [0.50, 0.58]), (1, 0.52));
        near(record_cosine("a.rs", [0.50, 0.55]), (0, 0.50));
        // Equal later passages: the first of them.
        near(record_cosine("a.rs", [0.1, 0.7, 0.7]), (1, 0.64));
        assert_eq!(record_cosine("a.rs", []), None);
    }

    fn texts<'a>(text: &'a str, ps: &[Passage]) -> Vec<&'a str> {
        ps.iter().map(|p| &text[p.start..p.end]).collect()
    }

    /// Every non-blank line is in exactly one passage, in order, and none is over budget
    /// unless it is one line's cut.
    fn check_cover(name: &str, text: &str) -> Vec<Passage> {
        let ps = split(name, text);
        let mut last_end = 0;
        for p in &ps {
            assert!(p.start >= last_end, "{name}: passages overlap or go back");
            assert!(
                !text[p.start..p.end].trim().is_empty(),
                "{name}: empty passage"
            );
            assert!(p.lines[0] <= p.lines[1]);
            assert!(
                estimate_tokens(&text[p.start..p.end]) <= BUDGET + 6,
                "{name}: {p:?}"
            );
            last_end = p.end;
        }
        let covered: String = texts(text, &ps).concat();
        let squash = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(squash(&covered), squash(text), "{name}: not covered whole");
        ps
    }

    #[test]
    fn code_is_cut_at_top_level_items() {
        let body = (0..30)
            .map(|i| format!("    x{i} = compute_something(x{i}, other_value, more)\n"))
            .collect::<String>();
        let text = format!(
            "import os\nimport sys\n\n\ndef first(a):\n{body}\n\n@decorator\ndef second(b):\n{body}\nclass Third:\n    pass\n"
        );
        let ps = check_cover("m.py", &text);
        let ts = texts(&text, &ps);
        assert!(ts.len() >= 3, "{ts:#?}");
        assert!(ts.iter().any(|t| t.starts_with("@decorator\ndef second")));
        // The imports are too small to be a passage of their own: they go with `first`.
        assert!(ts
            .iter()
            .any(|t| t.starts_with("import os") && t.contains("def first")));
        assert!(ts
            .iter()
            .all(|t| !(t.contains("x29") && t.contains("def second("))));
        // The first function's line numbers: it starts on line 5.
        let first = ps
            .iter()
            .find(|p| text[p.start..p.end].contains("def first"))
            .unwrap();
        assert!(first.lines[0] <= 5 && first.lines[1] >= 5);
    }

    #[test]
    fn a_long_impl_is_cut_at_its_methods() {
        let method = |n: usize| {
            let body = (0..20)
                .map(|i| {
                    format!("        let v{i} = self.field_{i}.get(key).unwrap_or_default();\n")
                })
                .collect::<String>();
            format!("    /// Method {n}.\n    pub fn method_{n}(&self, key: &str) -> u32 {{\n{body}        0\n    }}\n")
        };
        let text = format!(
            "use std::fmt;\n\nimpl Thing {{\n{}\n{}\n{}}}\n",
            method(1),
            method(2),
            method(3)
        );
        let ps = check_cover("t.rs", &text);
        let ts = texts(&text, &ps);
        for n in 1..=3 {
            assert!(
                ts.iter()
                    .any(|t| t.contains(&format!("fn method_{n}"))
                        && t.matches("pub fn").count() == 1),
                "method {n} not on its own: {ts:#?}"
            );
        }
    }

    #[test]
    fn prose_is_cut_at_paragraphs_and_headings() {
        let para = |w: &str| format!("{}\n", [w; 60].join(" "));
        let text = format!(
            "# Title\n\n{}\n{}\n## Second\n\n{}\n{}",
            para("alpha"),
            para("beta"),
            para("gamma"),
            para("delta")
        );
        let ps = check_cover("doc.md", &text);
        let ts = texts(&text, &ps);
        assert!(ts.iter().any(|t| t.starts_with("## Second")), "{ts:#?}");
        // Paragraphs are never cut inside while they fit.
        assert!(ts
            .iter()
            .all(|t| !t.contains("alpha") || !t.contains("gamma")));
    }

    #[test]
    fn a_huge_line_is_cut_between_characters() {
        let text = "word ".repeat(5000);
        let ps = check_cover("min.js", &text);
        assert!(ps.len() > 5);
        assert!(ps.iter().all(|p| p.lines == [1, 1]));
        let cjk = "全文检索".repeat(3000);
        let ps = check_cover("c.txt", &cjk);
        assert!(ps.len() > 1);
    }

    #[test]
    fn small_and_empty_texts_give_one_passage() {
        assert_eq!(split("a.md", "").len(), 1);
        assert_eq!(split("a.md", "\n\n  \n").len(), 1);
        let ps = split("a.md", "one line");
        assert_eq!(
            ps,
            vec![Passage {
                start: 0,
                end: 8,
                lines: [1, 1]
            }]
        );
        let ps = check_cover("a.rs", "fn a() {}\n\nfn b() {}\n");
        assert_eq!(ps.len(), 1, "small items pack into one passage");
        assert_eq!(ps[0].lines, [1, 3]);
    }

    #[test]
    fn estimates_count_symbols_and_long_words() {
        assert_eq!(estimate_tokens("the cat"), 2);
        assert_eq!(estimate_tokens("a.b(c)"), 6);
        assert_eq!(estimate_tokens("internationalisation"), 4);
        assert!(is_code("x/Y.RS") && is_code("a.py") && !is_code("a.md") && !is_code("rs"));
    }
}
