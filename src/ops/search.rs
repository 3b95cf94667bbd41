//! `find` for every face: the query's vector from the configured model, the relevance floor,
//! and the verdict on each candidate — gone (its source is missing: dropped and deleted from
//! the index) or hidden (a summary whose refresh is queued, so it may describe what is no
//! longer there) — over [`Index::find`].

use crate::embed::Embedder;
use crate::index::{Found, Hit, Index, Level, Mode, SearchRequest, Verdict};
use crate::queue::{self, Queue};
use crate::uri::VPath;
use crate::workspace::Workspace;

use super::jobs::semantic_key;
use super::Result;

/// The least cosine similarity a result without lexical evidence needs. Measured for
/// all-MiniLM-L6-v2 on the search benchmark (`docs/search-bench.md`, 1,200 queries on each
/// corpus): the right answer's cosine was at least 0.41 for 95% of the queries the model
/// answered, and at this floor 4 and 12 queries of 1,200 got no semantic result at all;
/// made-up words stay below it (`tests/index_search.rs`).
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
        self.has_pending(queue::SEMANTIC, key).unwrap_or(false)
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
    let vector = match embedder {
        Some(e) if q.mode != Mode::Lexical && index.has_dense() => {
            e.embed(&[q.text])?.pop().filter(|v| v.len() == index.dim())
        }
        _ => None,
    };
    let req = SearchRequest {
        text: q.text,
        vector: vector.as_deref(),
        mode: q.mode,
        limit: q.limit,
        under: q.under,
        floor: SEMANTIC_FLOOR,
    };
    Ok(index.find(&req, |h| verdict(ws, queue, h))?)
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
