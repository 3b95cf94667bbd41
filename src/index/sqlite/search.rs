//! Dense reads: cosine top-k over the packed int8 codes with an exact f32 re-rank. A record
//! has a vector per passage of its source; its score is its best passage's.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use rusqlite::params;

use super::chunk::Layout;
use super::quant::{bytes_to_f32, dot_f32, dots_i8, quantise};
use super::store::spans_of;
use super::{under_params, SqliteEngine, CHUNK_SLOTS, UNDER_SQL};
use crate::index::{Evidence, Hit, IndexError};
use crate::uri::VPath;

/// How many int8 candidates are re-ranked exactly for a top-k: enough that quantisation error
/// (about 1% of a score) cannot push a true top-k result out of the candidate set.
fn candidates_for(k: usize) -> usize {
    (k * 4).max(k + 32)
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

/// How `under` is applied. A small subtree is turned into its set of record ids and filtered
/// during the scan; a large one would cost more to list than to scan, so it is filtered at the
/// re-rank, over-fetching until enough results fall inside it.
enum Filter {
    All,
    Ids(HashSet<i64>),
    Prefix(VPath),
}

/// Subtrees with more records than this are filtered at the re-rank instead of by id set.
pub(super) const ID_SET_MAX: usize = 4096;

/// The query in the two forms the scan and re-rank need.
struct Query {
    unit: Vec<f32>,
    codes: Vec<u8>,
    scale: f32,
}

impl SqliteEngine {
    /// The `k` records most similar to the unit vector `unit` (cosine), best first; only
    /// records at or below `under` when given.
    pub(super) fn search(
        &self,
        unit: &[f32],
        k: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<Hit>, IndexError> {
        let unit = unit.to_vec();
        let mut codes = vec![0u8; self.dim];
        let scale = quantise(&unit, &mut codes);
        let q = Query { unit, codes, scale };

        let conn = self.reader()?;
        // One read transaction: the chunk scan and the re-rank see the same snapshot.
        let tx = conn.unchecked_transaction().map_err(|e| self.sql(e))?;
        let filter = match under {
            Some(p) if !p.is_root() => {
                let mut stmt = tx
                    .prepare_cached(&format!(
                        "SELECT id FROM records WHERE {UNDER_SQL} LIMIT {}",
                        self.id_set_max + 1
                    ))
                    .map_err(|e| self.sql(e))?;
                let ids = stmt
                    .query_map(under_params(p), |r| r.get::<_, i64>(0))
                    .and_then(|rows| rows.collect::<Result<HashSet<_>, _>>())
                    .map_err(|e| self.sql(e))?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                if ids.len() > self.id_set_max {
                    Filter::Prefix(p.clone())
                } else {
                    Filter::Ids(ids)
                }
            }
            _ => Filter::All,
        };
        let mut want = candidates_for(k);
        loop {
            let cands = self.scan(&tx, &q, want, &filter)?;
            let pool_full = cands.len() == want;
            let mut hits = self.rerank(&tx, &q, cands, &filter)?;
            if hits.len() >= k || !pool_full || !matches!(filter, Filter::Prefix(_)) {
                hits.truncate(k);
                return Ok(hits);
            }
            want = want.saturating_mul(8);
        }
    }

    /// The `want` best record ids by the int8 score of their best passage. (A record's
    /// passages each hold a slot: one already among the candidates is only raised, so the
    /// candidates are `want` different records.)
    fn scan(
        &self,
        tx: &rusqlite::Transaction,
        q: &Query,
        want: usize,
        filter: &Filter,
    ) -> Result<Vec<i64>, IndexError> {
        let layout = Layout { dim: self.dim };
        let mut heap: BinaryHeap<Cand> = BinaryHeap::with_capacity(want.min(1 << 16) + 1);
        // The best score of each record in the heap; an entry of the heap whose score is
        // below its record's best here is stale (the record was raised after it was pushed).
        let mut best: HashMap<i64, f32> = HashMap::new();
        let mut dots = [0i32; CHUNK_SLOTS];
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
            dots_i8(&q.codes, layout.all_codes(data), &mut dots);
            for (slot, &dot) in dots.iter().enumerate() {
                let rid = layout.rid(data, slot);
                if rid == 0 || matches!(filter, Filter::Ids(ids) if !ids.contains(&rid)) {
                    continue;
                }
                let score = dot as f32 * q.scale * layout.scale(data, slot);
                if best.len() >= want && heap.peek().is_some_and(|worst| score <= worst.0) {
                    continue;
                }
                match best.get_mut(&rid) {
                    Some(b) if *b >= score => continue,
                    Some(b) => *b = score, // Raised: its old entry is now stale.
                    None => {
                        best.insert(rid, score);
                    }
                }
                heap.push(Cand(score, rid));
                // Drop stale entries from the top, then the worst record while over `want`.
                while let Some(top) = heap.peek() {
                    let stale = best.get(&top.1).is_some_and(|b| *b > top.0);
                    if stale {
                        heap.pop();
                    } else if best.len() > want {
                        let gone = heap.pop().expect("peeked");
                        best.remove(&gone.1);
                    } else {
                        break;
                    }
                }
            }
        }
        Ok(best.into_keys().collect())
    }

    /// Exact scores from the f32 vectors, best first, only hits the filter lets through.
    fn rerank(
        &self,
        tx: &rusqlite::Transaction,
        q: &Query,
        cands: Vec<i64>,
        filter: &Filter,
    ) -> Result<Vec<Hit>, IndexError> {
        let mut hits = Vec::with_capacity(cands.len());
        let mut get = tx
            .prepare_cached(
                "SELECT uri, level, version, snippet, vec, spans FROM records WHERE id = ?1",
            )
            .map_err(|e| self.sql(e))?;
        for rid in cands {
            let row = get
                .query_row(params![rid], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Vec<u8>>(4)?,
                        r.get::<_, Option<Vec<u8>>>(5)?,
                    ))
                })
                .map_err(|e| self.sql(e))?;
            let (uri, level, version, snippet, vec, spans) = row;
            let uri = self.vpath(&uri)?;
            if matches!(filter, Filter::Prefix(p) if !uri.starts_with(p)) {
                continue;
            }
            let vec = bytes_to_f32(&vec)
                .filter(|v| !v.is_empty() && v.len().is_multiple_of(self.dim))
                .ok_or_else(|| self.corrupt(format!("record {uri} has a bad vector")))?;
            let (passage, score) = crate::index::passages::record_cosine(
                uri.name(),
                vec.chunks_exact(self.dim).map(|v| dot_f32(&q.unit, v)),
            )
            .ok_or_else(|| self.corrupt(format!("record {uri} has no vector")))?;
            let lines = spans_of(spans.as_deref())
                .get(passage)
                .copied()
                .filter(|l| l[0] > 0);
            hits.push(Hit {
                uri,
                level: self.level(level)?,
                score,
                snippet,
                source_version: version,
                evidence: Evidence {
                    cosine: Some(score),
                    passage: Some(passage as u32),
                    lines,
                    ..Evidence::default()
                },
            });
        }
        hits.sort_by(Hit::best_first);
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use crate::index::engine::Engine;
    use crate::index::sqlite::{quant::normalised, SqliteEngine};
    use crate::index::{Index, Level, Record};
    use crate::uri::VPath;

    /// Both `under` strategies (id set, and prefix filter at re-rank with over-fetch) give the
    /// same answers, including for a subtree whose records rank below everything else.
    #[test]
    fn under_by_id_set_and_by_prefix_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.db");
        let ix = Index::open(&path, 4, "m").unwrap();
        let recs: Vec<Record> = (0..600)
            .map(|i| Record {
                uri: VPath::from_rel(&format!("resources/d{}/f{i}", i % 3)).unwrap(),
                level: Level::Content,
                // Subtree d2 points away from the query, so it needs deep over-fetching.
                text: String::new(),
                vector: Some(vec![1.0, (i % 3) as f32 * 2.0, (i % 17) as f32 / 17.0, 0.1]),
                snippet: String::new(),
                source_version: String::new(),
                partial: false,
            })
            .collect();
        ix.upsert_many(&recs).unwrap();
        let mut eng = SqliteEngine::open(&path).unwrap();
        eng.set_dim(4);
        let q = normalised(&[1.0, 0.0, 0.5, 0.0]);
        for sub in ["resources/d0", "resources/d2", "resources"] {
            let under = VPath::from_rel(sub).unwrap();
            eng.id_set_max = super::ID_SET_MAX;
            let by_ids = eng.search(&q, 7, Some(&under)).unwrap();
            eng.id_set_max = 5;
            let by_prefix = eng.search(&q, 7, Some(&under)).unwrap();
            assert_eq!(by_ids.len(), 7);
            assert_eq!(by_ids, by_prefix, "{sub}");
            assert!(by_ids.iter().all(|h| h.uri.starts_with(&under)));
        }
    }
}
