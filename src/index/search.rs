//! Reads: cosine top-k over the packed int8 codes with an exact f32 re-rank, and the live
//! search that drops (and deletes) records whose source is gone.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use rusqlite::params;

use super::quant::{bytes_to_f32, dot_f32, dot_i8, normalised, quantise};
use super::store::Layout;
use super::{under_params, Hit, Index, IndexError, CHUNK_SLOTS, UNDER_SQL};
use crate::uri::VPath;

/// How many int8 candidates are re-ranked exactly for a top-k: enough that quantisation error
/// (about 1% of a score) cannot push a true top-k result out of the candidate set.
fn candidates_for(k: usize) -> usize {
    (k * 4).max(k + 32)
}

/// Result of [`Index::search_live`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// Live hits, best first, at most `limit`.
    pub hits: Vec<Hit>,
    /// Records deleted because their source was gone.
    pub orphans_removed: usize,
}

/// A candidate in the min-heap of the best N (the smallest score on top, to be evicted).
struct Cand(f32, i64);

impl PartialEq for Cand {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the worst candidate on top.
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

impl Index {
    /// The `k` records most similar to `query` (cosine), best first; only records at or below
    /// `under` when given. A query of all zeros matches nothing.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        self.check_dim(query.len())?;
        let q = normalised(query);
        if k == 0 || q.iter().all(|&x| x == 0.0) {
            return Ok(Vec::new());
        }
        let mut qcodes = vec![0u8; self.dim];
        let qscale = quantise(&q, &mut qcodes);
        let layout = Layout { dim: self.dim };
        let want = candidates_for(k);

        let conn = self.conn.lock();
        // One read transaction: the chunk scan and the re-rank see the same snapshot.
        let tx = conn.unchecked_transaction().map_err(|e| self.sql(e))?;
        let allowed: Option<HashSet<i64>> = match under {
            Some(p) if !p.is_root() => {
                let mut stmt = tx
                    .prepare_cached(&format!("SELECT id FROM records WHERE {UNDER_SQL}"))
                    .map_err(|e| self.sql(e))?;
                let ids = stmt
                    .query_map(under_params(p), |r| r.get::<_, i64>(0))
                    .and_then(|rows| rows.collect::<Result<HashSet<_>, _>>())
                    .map_err(|e| self.sql(e))?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                Some(ids)
            }
            _ => None,
        };

        let mut heap: BinaryHeap<Cand> = BinaryHeap::with_capacity(want + 1);
        let mut stmt = tx
            .prepare_cached("SELECT data FROM chunks")
            .map_err(|e| self.sql(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
        while let Some(row) = rows.next().map_err(|e| self.sql(e))? {
            let data = row
                .get_ref(0)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(|e| self.sql(e))?;
            if data.len() != layout.len() {
                return Err(self.corrupt("chunk has a bad size"));
            }
            for slot in 0..CHUNK_SLOTS {
                let rid = layout.rid(data, slot);
                if rid == 0 || allowed.as_ref().is_some_and(|a| !a.contains(&rid)) {
                    continue;
                }
                let score = dot_i8(&qcodes, layout.codes(data, slot)) as f32
                    * qscale
                    * layout.scale(data, slot);
                if heap.len() < want {
                    heap.push(Cand(score, rid));
                } else if heap.peek().is_some_and(|worst| score > worst.0) {
                    heap.pop();
                    heap.push(Cand(score, rid));
                }
            }
        }
        drop(rows);
        drop(stmt);

        // Exact re-rank from the f32 vectors.
        let mut hits = Vec::with_capacity(heap.len());
        let mut get = tx
            .prepare_cached("SELECT uri, level, version, snippet, vec FROM records WHERE id = ?1")
            .map_err(|e| self.sql(e))?;
        for Cand(_, rid) in heap.into_vec() {
            let row = get
                .query_row(params![rid], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Vec<u8>>(4)?,
                    ))
                })
                .map_err(|e| self.sql(e))?;
            let (uri, level, version, snippet, vec) = row;
            let vec = bytes_to_f32(&vec)
                .filter(|v| v.len() == self.dim)
                .ok_or_else(|| self.corrupt(format!("record {uri} has a bad vector")))?;
            hits.push(Hit {
                uri: self.vpath(&uri)?,
                level: self.level(level)?,
                score: dot_f32(&q, &vec),
                snippet,
                source_version: version,
            });
        }
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.uri.cmp(&b.uri))
                .then(a.level.cmp(&b.level))
        });
        hits.truncate(k);
        Ok(hits)
    }

    /// [`Index::search`] that never returns a record whose source is gone: hits failing
    /// `is_live` are dropped and deleted from the index (the design's on-demand orphan
    /// cleanup) with [`Index::delete_if_version`], so a record rebuilt meanwhile from a new
    /// source survives. Over-fetches so that up to `limit` live hits still come back.
    pub fn search_live(
        &self,
        query: &[f32],
        limit: usize,
        under: Option<&VPath>,
        is_live: impl Fn(&Hit) -> bool,
    ) -> Result<Found, IndexError> {
        let mut found = Found::default();
        let mut k = limit.saturating_mul(2).saturating_add(8);
        loop {
            let hits = self.search(query, k, under)?;
            let exhausted = hits.len() < k;
            let mut live = Vec::with_capacity(limit);
            for hit in hits {
                if is_live(&hit) {
                    live.push(hit);
                } else if self.delete_if_version(&hit.uri, hit.level, &hit.source_version)? {
                    found.orphans_removed += 1;
                }
            }
            // The orphans seen are deleted, so a larger fetch makes progress.
            if live.len() >= limit || exhausted {
                live.truncate(limit);
                found.hits = live;
                return Ok(found);
            }
            k = k.saturating_mul(4);
        }
    }
}
