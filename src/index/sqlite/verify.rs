//! Consistency check of the packed chunks and the lexical rows against the records, for fsck.

use std::collections::HashMap;

use super::chunk::Layout;
use super::{SqliteEngine, CHUNK_SLOTS};
use crate::index::IndexError;

impl SqliteEngine {
    /// Consistency check for fsck: every record with a vector has a packed slot holding its id,
    /// every packed id is such a record, the chunks' used counts are right, and records and
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
                if rid != 0 && packed.insert(rid, (id, slot)).is_some() {
                    problems.push(format!("record {rid} packed twice"));
                }
            }
        }
        let mut stmt = tx
            .prepare("SELECT id, uri, chunk, slot FROM records")
            .map_err(|e| self.sql(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
        while let Some(row) = rows.next().map_err(|e| self.sql(e))? {
            let (id, uri, chunk, slot): (i64, String, Option<i64>, Option<i64>) = (
                row.get(0).map_err(|e| self.sql(e))?,
                row.get(1).map_err(|e| self.sql(e))?,
                row.get(2).map_err(|e| self.sql(e))?,
                row.get(3).map_err(|e| self.sql(e))?,
            );
            let Some((chunk, slot)) = chunk.zip(slot) else {
                continue; // No vector (yet): nothing packed.
            };
            match packed.remove(&id) {
                Some(place) if place == (chunk, slot as usize) => {}
                Some(place) => problems.push(format!(
                    "record {uri}: packed at {place:?}, row says ({chunk}, {slot})"
                )),
                None => problems.push(format!("record {uri}: not packed")),
            }
        }
        for rid in packed.keys() {
            problems.push(format!("packed id {rid} has no record"));
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
        Ok(problems)
    }
}
