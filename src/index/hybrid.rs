//! What `find` asks of the index: lexical, semantic or hybrid retrieval, fused by their
//! calibrated scores, behind a relevance floor, and never naming what is gone.
//!
//! Rules (the design's "better to miss a search result than to return a bad one"):
//! - a result needs lexical evidence (a query term in its name or text) or a cosine
//!   similarity of at least the floor; a query that matches nothing returns nothing;
//! - the floor is applied before fusing: a cosine under it is no evidence at all, so a file
//!   both lists found weakly never outranks one that one list found well;
//! - hybrid ranking is a weighted sum of each list's score calibrated to the query, BM25 as
//!   a share of the query's best BM25 and the cosine as its share of the way from the floor
//!   to the query's best cosine ([`fused_score`]). Reciprocal rank fusion, used before, read
//!   only the ranks: on code it let a file at lexical rank 10 and semantic rank 12 beat
//!   lexical's right first answer (hybrid MRR@10 0.514 against lexical's 0.566);
//! - each list's first result stays among the fused first [`HEAD`] ([`keep_firsts`]): what
//!   either retrieval is surest of is never lost from the first page;
//! - a file whose name is the query's (every word of its name stem asked for: `killall5`,
//!   `git-diff-files`, `LockGuard`) gains [`NAME_BONUS`] of the best score, less when its
//!   name stands for only some of the query ([`name_share`]), so it outranks the siblings
//!   that only mention it (lexical and hybrid; semantic is the model's cosine alone);
//! - a directory summary counts [`SUMMARY_WEIGHT`] of a file with the same evidence, so the
//!   content ranks above what summarises it;
//! - the caller's verdict drops results whose source is gone (and deletes those records,
//!   by version) or that must not be shown now (a summary whose refresh is queued).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Hit, Index, IndexError, Level, VPath};

/// Result of [`Index::find`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// Live hits, best first, at most `limit`.
    pub hits: Vec<Hit>,
    /// Records deleted because their source was gone.
    pub orphans_removed: usize,
    /// What the hits' `score` measures.
    pub scale: Scale,
}

/// What a result's score measures: BM25 (unbounded, growing with the query's words and their
/// rarity), or a value from 0 to 1 (a cosine, or the fused share of [`fused_score`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    #[default]
    Bm25,
    Unit,
}

/// The lexical list's share of a fused score; the semantic list has the rest. Chosen with
/// `scripts/fusion-sim.py` on the search benchmark's three corpora (MRR@10 at 0.5 / 0.6 /
/// 0.7: code 0.595 / 0.599 / 0.600, man 0.698 / 0.706 / 0.697, pydoc 0.499 / 0.504 / 0.507;
/// lexical alone 0.539, 0.661, 0.471): flat between 0.55 and 0.75, falling outside it.
pub const LEXICAL_WEIGHT: f32 = 0.6;
/// A summary's score against a file's with the same evidence.
pub const SUMMARY_WEIGHT: f32 = 0.5;

/// Which retrieval `find` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// BM25 only.
    Lexical,
    /// The model's vectors only (cosine, above the floor).
    Semantic,
    /// Both, fused; lexical alone when no model is configured.
    #[default]
    Hybrid,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "lexical" => Some(Mode::Lexical),
            "semantic" => Some(Mode::Semantic),
            "hybrid" => Some(Mode::Hybrid),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Lexical => "lexical",
            Mode::Semantic => "semantic",
            Mode::Hybrid => "hybrid",
        }
    }
}

/// Why a result was returned: its place and score in each list it was found in.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f32>,
    /// The passage the cosine is of: its place among the source's passages (0 first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passage: Option<u32>,
    /// The lines of the source the result's best passage covers (1-based, inclusive): the
    /// semantic match's passage, else the lines holding the most of the query's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<[u32; 2]>,
}

/// The caller's word on one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Show,
    /// Its source is gone: drop it and delete the record.
    Gone,
    /// Keep the record but do not show it now.
    Hide,
}

/// One `find`.
#[derive(Debug, Clone)]
pub struct SearchRequest<'a> {
    pub text: &'a str,
    /// The query's vector from the configured model (none: lexical only).
    pub vector: Option<&'a [f32]>,
    pub mode: Mode,
    pub limit: usize,
    pub under: Option<&'a VPath>,
    /// The least cosine a result without lexical evidence needs.
    pub floor: f32,
}

impl SearchRequest<'_> {
    /// What the scores of this request's results measure ([`fuse`] decides alike).
    pub fn scale(&self) -> Scale {
        match self.mode {
            Mode::Lexical => Scale::Bm25,
            Mode::Hybrid if self.vector.is_none() => Scale::Bm25,
            Mode::Semantic | Mode::Hybrid => Scale::Unit,
        }
    }
}

fn weight(level: Level) -> f32 {
    if level == Level::Content {
        1.0
    } else {
        SUMMARY_WEIGHT
    }
}

impl Index {
    /// The `req.limit` best results for `req`, best first, each with its evidence; results
    /// `verdict` calls gone are deleted from the index on the way (by version, so a record
    /// rebuilt meanwhile survives) and the search goes deeper until enough are left.
    ///
    /// The first [`HEAD`] results are those of a search for [`HEAD`] (the same lists, the same
    /// fusion), the rest come after them from the deeper search a bigger `limit` makes: so
    /// the order of the first results never depends on `limit` (a fusion over deeper lists
    /// reorders its head: measured on code, R@10 0.713 for the first 10 of 50 against 0.789).
    pub fn find(
        &self,
        req: &SearchRequest,
        verdict: impl Fn(&Hit) -> Verdict,
    ) -> Result<Found, IndexError> {
        if req.limit <= HEAD {
            return self.find_deep(req, &verdict);
        }
        let head = SearchRequest {
            limit: HEAD,
            ..req.clone()
        };
        let mut found = self.find_deep(&head, &verdict)?;
        let rest = self.find_deep(req, &verdict)?;
        let shown: std::collections::HashSet<(VPath, Level)> = found
            .hits
            .iter()
            .map(|h| (h.uri.clone(), h.level))
            .collect();
        found.hits.extend(
            rest.hits
                .into_iter()
                .filter(|h| !shown.contains(&(h.uri.clone(), h.level))),
        );
        found.hits.truncate(req.limit);
        found.orphans_removed += rest.orphans_removed;
        Ok(found)
    }

    /// [`Self::find`] over lists `3 × limit` deep (30 at least), deeper while too few pass.
    fn find_deep(
        &self,
        req: &SearchRequest,
        verdict: &impl Fn(&Hit) -> Verdict,
    ) -> Result<Found, IndexError> {
        let mut found = Found {
            scale: req.scale(),
            ..Found::default()
        };
        if req.limit == 0 {
            return Ok(found);
        }
        let use_lex = req.mode != Mode::Semantic;
        let use_dense = req.mode != Mode::Lexical && self.has_dense() && req.vector.is_some();
        let mut depth = req.limit.saturating_mul(3).max(30);
        loop {
            let lex = if use_lex {
                self.search_lexical(req.text, depth, req.under)?
            } else {
                Vec::new()
            };
            let dense = match (use_dense, req.vector) {
                (true, Some(v)) => self.search(v, depth, req.under)?,
                _ => Vec::new(),
            };
            let deeper = lex.len() == depth || dense.len() == depth;
            let fused = fuse(lex, dense, req);
            let mut shown = Vec::new();
            let mut gone: Vec<Hit> = Vec::new();
            for h in fused {
                match verdict(&h) {
                    Verdict::Show => shown.push(h),
                    Verdict::Gone => gone.push(h),
                    Verdict::Hide => {}
                }
            }
            let dead: Vec<(&VPath, Level, &str)> = gone
                .iter()
                .map(|h| (&h.uri, h.level, h.source_version.as_str()))
                .collect();
            found.orphans_removed += self.delete_if_versions(&dead)?;
            if shown.len() >= req.limit || !deeper {
                shown.truncate(req.limit);
                found.hits = shown;
                return Ok(found);
            }
            depth = depth.saturating_mul(4);
        }
    }
}

/// How many first results are a search's own whatever the limit ([`Index::find`]).
pub const HEAD: usize = 10;

/// Merge the two ranked lists into one, best first, applying the floor and the summary
/// weight. Ties go to the lexical score, then the name.
fn fuse(lex: Vec<Hit>, dense: Vec<Hit>, req: &SearchRequest) -> Vec<Hit> {
    let mut by_key: HashMap<(VPath, Level), Hit> = HashMap::new();
    // The floor first: a cosine under it says nothing, in any mode.
    let dense: Vec<Hit> = dense.into_iter().filter(|h| h.score >= req.floor).collect();
    // Each list's first, which the fused head keeps (below).
    let firsts: Vec<(VPath, Level)> = [lex.first(), dense.first()]
        .into_iter()
        .flatten()
        .map(|h| (h.uri.clone(), h.level))
        .collect();
    let calibration = Calibration {
        best_bm25: lex
            .iter()
            .filter_map(|h| h.evidence.bm25)
            .fold(0.0, f32::max),
        best_cosine: dense.iter().map(|h| h.score).fold(req.floor, f32::max),
        floor: req.floor,
    };
    for (i, mut h) in dense.into_iter().enumerate() {
        h.evidence = super::Evidence {
            semantic_rank: Some(i + 1),
            cosine: Some(h.score),
            passage: h.evidence.passage,
            lines: h.evidence.lines,
            ..Default::default()
        };
        by_key.insert((h.uri.clone(), h.level), h);
    }
    for h in lex {
        match by_key.get_mut(&(h.uri.clone(), h.level)) {
            Some(d) => {
                d.evidence.lexical_rank = h.evidence.lexical_rank;
                d.evidence.bm25 = h.evidence.bm25;
            }
            None => {
                by_key.insert((h.uri.clone(), h.level), h);
            }
        }
    }
    let terms = super::text::query_terms(req.text);
    let mut out: Vec<Hit> = by_key
        .into_values()
        .map(|mut h| {
            let e = h.evidence;
            let named = name_share(&h, &terms);
            let raw = match req.mode {
                Mode::Semantic => e.cosine.unwrap_or(0.0),
                // Hybrid without the query's vector (no model) is lexical.
                Mode::Hybrid if req.vector.is_some() => {
                    fused_score(&e, &calibration) + NAME_BONUS * named
                }
                // BM25 orders, a name raising it by a share of the query's best.
                Mode::Lexical | Mode::Hybrid => {
                    e.bm25.unwrap_or(0.0) + NAME_BONUS * named * calibration.best_bm25
                }
            };
            h.score = raw * weight(h.level);
            h
        })
        .collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| {
                b.evidence
                    .bm25
                    .unwrap_or(0.0)
                    .total_cmp(&a.evidence.bm25.unwrap_or(0.0))
            })
            .then_with(|| a.uri.cmp(&b.uri))
            .then(a.level.cmp(&b.level))
    });
    if req.mode == Mode::Hybrid && req.vector.is_some() {
        keep_firsts(&mut out, &firsts);
    }
    out
}

/// Put each of `firsts` (the first result of each list) that the fusion ranked below the
/// first [`HEAD`] at the head's last places: what either retrieval is surest of is never
/// lost from the first page (the fused scores alone lost man pages found only by the
/// model, 21 of them its first answer). Its score becomes one between its new neighbours',
/// so a caller that sorts by score again keeps the order.
fn keep_firsts(out: &mut Vec<Hit>, firsts: &[(VPath, Level)]) {
    let mut late: Vec<usize> = firsts
        .iter()
        .filter_map(|k| out.iter().position(|h| (&h.uri, h.level) == (&k.0, k.1)))
        .filter(|&at| at >= HEAD)
        .collect();
    late.sort_unstable();
    late.dedup();
    // Taken out from the back, so the earlier places stay put; kept in their fused order.
    let mut moving: Vec<Hit> = late.iter().rev().map(|&at| out.remove(at)).collect();
    moving.reverse();
    let slot = HEAD - moving.len();
    for (i, mut h) in moving.into_iter().enumerate() {
        let at = slot + i;
        h.score = (out[at - 1].score + out[at].score) / 2.0;
        out.insert(at, h);
    }
}

/// How much a file whose name is the query's ([`name_share`] 1) gains: a share of the best
/// score (hybrid: of the fused scale, 0 to 1; lexical: of the query's best BM25). A page
/// named `killall5` outranks `kill`, which only mentions it, for the query `killall5`.
pub const NAME_BONUS: f32 = 0.3;

/// How much a content hit's name is the query's, 0 to 1: 1 when its name stands for every
/// term of the query (`git-diff-files` for "git diff files"), half the share it stands for
/// when only for some (`git-diff` for the same query: 1/3), 0 when some word of its name is
/// not asked for ([`super::text::name_in_query`]). A directory's summary is never raised
/// by its name.
fn name_share(h: &Hit, terms: &[String]) -> f32 {
    if h.level != Level::Content || terms.is_empty() {
        return 0.0;
    }
    match super::text::name_in_query(h.uri.name(), terms) {
        Some(n) if n >= terms.len() => 1.0,
        Some(n) => 0.5 * n as f32 / terms.len() as f32,
        None => 0.0,
    }
}

/// What a query's two lists are measured against: their best values, and the floor.
#[derive(Debug, Clone, Copy)]
struct Calibration {
    best_bm25: f32,
    best_cosine: f32,
    floor: f32,
}

/// A hybrid result's score, 0 to 1: [`LEXICAL_WEIGHT`] × its BM25 as a share of the query's
/// best, plus the rest × how far its cosine rose from the floor towards the query's best.
/// Both are the query's own scales (BM25 values grow with a query's length and its words'
/// rarity; cosines of one model bunch differently for each query), and a list's best is its
/// first result whatever its depth, so a score never depends on how deep the lists went.
fn fused_score(e: &Evidence, c: &Calibration) -> f32 {
    let lexical = match e.bm25 {
        Some(b) if c.best_bm25 > 0.0 => b / c.best_bm25,
        _ => 0.0,
    };
    let semantic = match e.cosine {
        Some(cos) if c.best_cosine > c.floor => (cos - c.floor) / (c.best_cosine - c.floor),
        // The best is at the floor: every cosine there counts alike.
        Some(_) => 1.0,
        None => 0.0,
    };
    LEXICAL_WEIGHT * lexical + (1.0 - LEXICAL_WEIGHT) * semantic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(name: &str, score: f32, bm25: Option<f32>) -> Hit {
        Hit {
            uri: VPath::from_rel(&format!("resources/{name}")).unwrap(),
            level: Level::Content,
            score,
            snippet: String::new(),
            source_version: "v".into(),
            evidence: Evidence {
                bm25,
                ..Evidence::default()
            },
        }
    }

    fn req(mode: Mode) -> SearchRequest<'static> {
        SearchRequest {
            text: "q",
            // Any vector: hybrid fuses only when the query has one.
            vector: Some(&[1.0]),
            mode,
            limit: 10,
            under: None,
            floor: 0.35,
        }
    }

    fn names(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.uri.name()).collect()
    }

    #[test]
    fn a_weak_match_in_both_lists_does_not_beat_a_strong_one_in_one() {
        // `both` is lexical's 3rd at a third of the best BM25, and its cosine is under the
        // floor: it has no semantic evidence, so lexical's first stays first.
        let lex = vec![
            hit("best.md", 9.0, Some(9.0)),
            hit("second.md", 6.0, Some(6.0)),
            hit("both.md", 3.0, Some(3.0)),
        ];
        let dense = vec![hit("other.md", 0.50, None), hit("both.md", 0.30, None)];
        let out = fuse(lex, dense, &req(Mode::Hybrid));
        assert_eq!(names(&out)[0], "best.md");
        let both = out.iter().find(|h| h.uri.name() == "both.md").unwrap();
        assert_eq!(
            both.evidence.cosine, None,
            "a cosine under the floor is no evidence"
        );
        // Scores are shares of the query's best: the best of both lists is near 1.
        assert!(
            (out[0].score - LEXICAL_WEIGHT).abs() < 1e-6,
            "{}",
            out[0].score
        );
    }

    #[test]
    fn strong_evidence_in_both_lists_wins() {
        let lex = vec![hit("a.md", 10.0, Some(10.0)), hit("b.md", 9.0, Some(9.0))];
        let dense = vec![hit("b.md", 0.80, None), hit("a.md", 0.40, None)];
        let out = fuse(lex, dense, &req(Mode::Hybrid));
        assert_eq!(names(&out), ["b.md", "a.md"]);
        assert!((out[0].score - (LEXICAL_WEIGHT * 0.9 + (1.0 - LEXICAL_WEIGHT))).abs() < 1e-5);
    }

    #[test]
    fn the_page_named_by_the_query_outranks_siblings_that_mention_it() {
        // `kill.1` and `c99-gcc.1` hold the query's words more often; the page whose name
        // is the query is the one asked for, in every mode that reads words.
        let named = |q: &'static str, mode: Mode, lex: Vec<Hit>, dense: Vec<Hit>| {
            let r = SearchRequest {
                text: q,
                vector: (mode == Mode::Hybrid).then_some(&[1.0][..]),
                ..req(mode)
            };
            names(&fuse(lex, dense, &r))[0].to_string()
        };
        for mode in [Mode::Lexical, Mode::Hybrid] {
            let lex = vec![
                hit("kill.1", 8.0, Some(8.0)),
                hit("killall5.8", 6.5, Some(6.5)),
            ];
            let dense = vec![hit("kill.1", 0.7, None), hit("killall5.8", 0.65, None)];
            assert_eq!(
                named("killall5", mode, lex, dense),
                "killall5.8",
                "{mode:?}"
            );
            let lex = vec![
                hit("c99-gcc.1", 9.0, Some(9.0)),
                hit("c89-gcc.1", 7.0, Some(7.0)),
            ];
            assert_eq!(named("c89-gcc", mode, lex, vec![]), "c89-gcc.1", "{mode:?}");
            // Both named: the name standing for more of the query wins.
            let lex = vec![
                hit("git-diff.1", 9.0, Some(9.0)),
                hit("git-diff-files.1", 8.0, Some(8.0)),
            ];
            assert_eq!(
                named("git diff files", mode, lex.clone(), vec![]),
                "git-diff-files.1"
            );
            assert_eq!(named("git diff", mode, lex, vec![]), "git-diff.1");
        }
    }

    #[test]
    fn each_lists_first_stays_on_the_first_page() {
        // Twelve pages both lists found well, and one each list alone ranks first: the
        // model's first has no keyword, lexical's first no cosine above the floor.
        let lex: Vec<Hit> = std::iter::once(hit("lexfirst.md", 20.0, Some(20.0)))
            .chain((0..12).map(|i| hit(&format!("both{i:02}.md"), 19.0, Some(19.0))))
            .collect();
        let dense: Vec<Hit> = std::iter::once(hit("semfirst.md", 0.90, None))
            .chain((0..12).map(|i| hit(&format!("both{i:02}.md"), 0.89, None)))
            .collect();
        let out = fuse(lex, dense, &req(Mode::Hybrid));
        let head = names(&out[..HEAD]);
        assert!(head.contains(&"lexfirst.md"), "{head:?}");
        assert!(head.contains(&"semfirst.md"), "{head:?}");
        assert!(
            out.windows(2).all(|w| w[0].score >= w[1].score),
            "scores still fall"
        );
    }

    #[test]
    fn a_score_does_not_depend_on_the_lists_depth() {
        // The same head with a longer tail fuses to the same scores for the head.
        let lex = |n: usize| {
            (0..n)
                .map(|i| hit(&format!("l{i}.md"), 10.0 - i as f32, Some(10.0 - i as f32)))
                .collect::<Vec<_>>()
        };
        let dense = |n: usize| {
            (0..n)
                .map(|i| hit(&format!("l{}.md", 2 * i), 0.9 - 0.01 * i as f32, None))
                .collect::<Vec<_>>()
        };
        let short = fuse(lex(5), dense(3), &req(Mode::Hybrid));
        let long = fuse(lex(9), dense(8), &req(Mode::Hybrid));
        for h in &short {
            let l = long.iter().find(|x| x.uri == h.uri).unwrap();
            assert!((l.score - h.score).abs() < 1e-6, "{}", h.uri);
        }
    }
}
