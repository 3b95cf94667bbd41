//! Consistency check of the packed chunks against the records, for fsck.

use std::collections::HashMap;

use super::chunk::Layout;
use super::{Index, IndexError, CHUNK_SLOTS};

impl Index {
    /// Consistency check for fsck: every record's packed slot holds its id, every packed id is
    /// a record, and the chunks' used counts are right. Returns the problems found.
    pub fn verify(&self) -> Result<Vec<String>, IndexError> {
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
            let (id, uri, chunk, slot): (i64, String, i64, i64) = (
                row.get(0).map_err(|e| self.sql(e))?,
                row.get(1).map_err(|e| self.sql(e))?,
                row.get(2).map_err(|e| self.sql(e))?,
                row.get(3).map_err(|e| self.sql(e))?,
            );
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
        Ok(problems)
    }
}
