//! Consistency check of the packed chunks and the lexical rows against the records, for fsck.

use std::collections::HashMap;

use super::chunk::Layout;
use super::store::{places_of, spans_of};
use super::{SqliteEngine, CHUNK_SLOTS};
use crate::index::IndexError;

impl SqliteEngine {
    /// Consistency check for fsck: every record's passage vectors have the packed slots its
    /// `places` name, holding its id, every packed slot is such a place, the chunks' used counts are right, and records and
    /// lexical rows match one for one. Returns the problems found.
    pub(super) fn verify(&self) -> Result<Vec<String>, IndexError> {
        let conn = self.conn.lock();
        let tx = conn.unchecked_transaction().map_err(|e| self.sql(e))?;
        let layout = Layout { dim: self.dim };
        let mut packed = HashMap::new();
        let mut problems = Vec::new();
        let mut stmt = tx
            .prepare("SELECT id, used, data FROM chunks")
            .map_err(|e| self.sql(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
        while let Some(row) = rows.next().map_err(|e| self.sql(e))? {
            let (id, used): (i64, i64) = (
                row.get(0).map_err(|e| self.sql(e))?,
                row.get(1).map_err(|e| self.sql(e))?,
            );
            let data = row
                .get_ref(2)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(|e| self.sql(e))?;
            if data.len() != layout.len() {
                problems.push(format!("chunk {id}: size {}", data.len()));
                continue;
            }
            let rids: Vec<i64> = (0..CHUNK_SLOTS)
                .map(|s| layout.rid(data, s))
                .filter(|&r| r != 0)
                .collect();
            if rids.len() as i64 != used {
                problems.push(format!(
                    "chunk {id}: used {used} but {} slots filled",
                    rids.len()
                ));
            }
            for (slot, rid) in (0..CHUNK_SLOTS).map(|s| (s, layout.rid(data, s))) {
                if rid != 0 {
                    packed.insert((id, slot), rid);
                }
            }
        }
        let mut stmt = tx
            .prepare("SELECT id, uri, places, spans, length(vec) FROM records")
            .map_err(|e| self.sql(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
        while let Some(row) = rows.next().map_err(|e| self.sql(e))? {
            type Row = (i64, String, Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>);
            let (id, uri, places, spans, vec_len): Row = (
                row.get(0).map_err(|e| self.sql(e))?,
                row.get(1).map_err(|e| self.sql(e))?,
                row.get(2).map_err(|e| self.sql(e))?,
                row.get(3).map_err(|e| self.sql(e))?,
                row.get(4).map_err(|e| self.sql(e))?,
            );
            let places = places_of(places.as_deref());
            let n = places.len();
            let vectors = vec_len.unwrap_or(0) as usize / (4 * self.dim.max(1));
            if n != vectors || spans_of(spans.as_deref()).len() != n {
                problems.push(format!(
                    "record {uri}: {vectors} vectors, {n} places, {} spans",
                    spans_of(spans.as_deref()).len()
                ));
            }
            for place in places {
                match packed.remove(&place) {
                    Some(rid) if rid == id => {}
                    Some(rid) => problems.push(format!(
                        "record {uri}: its place {place:?} holds record {rid}"
                    )),
                    None => problems.push(format!("record {uri}: not packed at {place:?}")),
                }
            }
        }
        for (place, rid) in &packed {
            problems.push(format!("packed slot {place:?} of id {rid} is no record's"));
        }
        let count = |sql: &str| -> Result<i64, IndexError> {
            tx.query_row(sql, [], |r| r.get(0)).map_err(|e| self.sql(e))
        };
        let unlexed = count(
            "SELECT COUNT(*) FROM records r WHERE NOT EXISTS (SELECT 1 FROM lex WHERE rowid = r.id)",
        )?;
        if unlexed > 0 {
            problems.push(format!("{unlexed} records have no lexical row"));
        }
        let stray = count("SELECT COUNT(*) FROM lex WHERE rowid NOT IN (SELECT id FROM records)")?;
        if stray > 0 {
            problems.push(format!("{stray} lexical rows have no record"));
        }
        let untexted = count(
            "SELECT COUNT(*) FROM records r WHERE NOT EXISTS (SELECT 1 FROM lex_text WHERE id = r.id)",
        )?;
        if untexted > 0 {
            problems.push(format!("{untexted} records have no lexical text"));
        }
        let stray =
            count("SELECT COUNT(*) FROM lex_text WHERE id NOT IN (SELECT id FROM records)")?;
        if stray > 0 {
            problems.push(format!("{stray} lexical texts have no record"));
        }
        // `lex_sum` rows exactly for the summaries (by their sizes: contentless rows).
        let unsummed = count(&format!(
            "SELECT COUNT(*) FROM records r WHERE level != {} AND NOT EXISTS
                (SELECT 1 FROM lex_sum_docsize WHERE id = r.id)",
            crate::index::Level::Content as i64
        ))?;
        if unsummed > 0 {
            problems.push(format!("{unsummed} summaries have no summary row"));
        }
        let stray = count(&format!(
            "SELECT COUNT(*) FROM lex_sum_docsize s WHERE NOT EXISTS
                (SELECT 1 FROM records r WHERE r.id = s.id AND r.level != {})",
            crate::index::Level::Content as i64
        ))?;
        if stray > 0 {
            problems.push(format!("{stray} summary rows are no summary's"));
        }
        Ok(problems)
    }
}
