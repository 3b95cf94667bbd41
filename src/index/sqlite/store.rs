//! Writes: upsert, set a vector, delete, delete/rename by prefix. Each call is one SQLite
//! transaction that keeps `records`, their `lex` rows and the packed `chunks` in step.
//!
//! A chunk blob is tens of KiB (256 slots); a transaction usually changes one slot of it. The
//! bytes it changed are written back in place (SQLite incremental blob I/O), so a delete puts
//! one or two pages in the WAL rather than the whole blob.

use std::collections::{HashMap, HashSet};

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::chunk::Layout;
use super::lex::{LexChanges, LexRow};
use super::quant::{f32_to_bytes, normalised};
use super::{under_params, SqliteEngine, CHUNK_SLOTS, UNDER_SQL};
use crate::index::{text, IndexError, Level, PassageVector, Record};
use crate::uri::VPath;

struct ChunkBuf {
    used: usize,
    data: Vec<u8>,
    /// The row exists in the database (else it is inserted whole).
    in_db: bool,
    /// Byte ranges changed since the chunk was read.
    dirty: Vec<std::ops::Range<usize>>,
}

/// Past this many changed ranges a chunk is written whole (one statement, not many blob writes).
const MAX_DIRTY_RANGES: usize = 32;

/// The chunks one transaction touched, written back once at the end.
struct Batch<'t> {
    eng: &'t SqliteEngine,
    tx: &'t Transaction<'t>,
    layout: Layout,
    chunks: HashMap<i64, ChunkBuf>,
    /// The `lex` rows changed, written at the end ([`LexChanges`]: the totals kept right).
    lex: LexChanges,
}

/// A vector's place in the packed chunks: (chunk id, slot).
type Slot = (i64, usize);

/// A row and the places of its passage vectors in the packed chunks (none while it has no
/// vector).
struct Placed {
    id: i64,
    places: Vec<Slot>,
}

/// `records.places`: each passage's (chunk id i64, slot u32), little-endian, in order.
pub(super) fn places_of(blob: Option<&[u8]>) -> Vec<Slot> {
    blob.unwrap_or_default()
        .chunks_exact(12)
        .map(|c| {
            let chunk = i64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let slot = u32::from_le_bytes(c[8..].try_into().expect("4 bytes"));
            (chunk, slot as usize)
        })
        .collect()
}

fn places_blob(places: &[Slot]) -> Vec<u8> {
    places
        .iter()
        .flat_map(|&(c, s)| c.to_le_bytes().into_iter().chain((s as u32).to_le_bytes()))
        .collect()
}

/// `records.spans`: each passage's first and last line (u32, little-endian), in order.
pub(super) fn spans_of(blob: Option<&[u8]>) -> Vec<[u32; 2]> {
    blob.unwrap_or_default()
        .chunks_exact(8)
        .map(|c| {
            [
                u32::from_le_bytes(c[..4].try_into().expect("4 bytes")),
                u32::from_le_bytes(c[4..].try_into().expect("4 bytes")),
            ]
        })
        .collect()
}

fn spans_blob(parts: &[PassageVector]) -> Vec<u8> {
    parts
        .iter()
        .flat_map(|p| {
            p.lines[0]
                .to_le_bytes()
                .into_iter()
                .chain(p.lines[1].to_le_bytes())
        })
        .collect()
}

impl<'t> Batch<'t> {
    fn chunk(&mut self, id: i64) -> Result<&mut ChunkBuf, IndexError> {
        if !self.chunks.contains_key(&id) {
            let row: Option<(i64, Vec<u8>)> = self
                .tx
                .prepare_cached("SELECT used, data FROM chunks WHERE id = ?1")
                .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(|e| self.eng.sql(e))?;
            let buf = match row {
                Some((used, data)) if data.len() == self.layout.len() => ChunkBuf {
                    used: used as usize,
                    data,
                    in_db: true,
                    dirty: Vec::new(),
                },
                Some(_) => return Err(self.eng.corrupt(format!("chunk {id} has a bad size"))),
                None => ChunkBuf {
                    used: 0,
                    data: vec![0; self.layout.len()],
                    in_db: false,
                    dirty: Vec::new(),
                },
            };
            self.chunks.insert(id, buf);
        }
        Ok(self.chunks.get_mut(&id).expect("just inserted"))
    }

    /// A free (chunk, slot): in a chunk already loaded, else the lowest chunk with room, else
    /// a new chunk.
    fn alloc(&mut self) -> Result<(i64, usize), IndexError> {
        let mut candidate = self
            .chunks
            .iter()
            .filter(|(_, c)| c.used < CHUNK_SLOTS)
            .map(|(&id, _)| id)
            .min();
        if candidate.is_none() {
            let loaded: HashSet<i64> = self.chunks.keys().copied().collect();
            let mut stmt = self
                .tx
                .prepare_cached(&format!(
                    "SELECT id FROM chunks WHERE used < {CHUNK_SLOTS} ORDER BY id"
                ))
                .map_err(|e| self.eng.sql(e))?;
            let ids = stmt
                .query_map([], |r| r.get::<_, i64>(0))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.eng.sql(e))?;
            candidate = ids.into_iter().find(|id| !loaded.contains(id));
        }
        let id = match candidate {
            Some(id) => id,
            None => {
                let max_db: i64 = self
                    .tx
                    .query_row("SELECT COALESCE(MAX(id), 0) FROM chunks", [], |r| r.get(0))
                    .map_err(|e| self.eng.sql(e))?;
                max_db.max(self.chunks.keys().copied().max().unwrap_or(0)) + 1
            }
        };
        let layout = self.layout;
        let chunk = self.chunk(id)?;
        let slot = (0..CHUNK_SLOTS)
            .find(|&s| layout.rid(&chunk.data, s) == 0)
            .ok_or_else(|| self.eng.corrupt(format!("chunk {id} used count is wrong")))?;
        Ok((id, slot))
    }

    fn fill(&mut self, chunk: i64, slot: usize, rid: i64, unit: &[f32]) -> Result<(), IndexError> {
        let layout = self.layout;
        let c = self.chunk(chunk)?;
        if layout.rid(&c.data, slot) == 0 {
            c.used += 1;
        }
        layout.set(&mut c.data, slot, rid, unit);
        c.dirty.extend(layout.slot_ranges(slot));
        Ok(())
    }

    fn clear(&mut self, chunk: i64, slot: usize) -> Result<(), IndexError> {
        let c = self.chunk(chunk)?;
        if slot < CHUNK_SLOTS && c.data[slot * 8..slot * 8 + 8] != [0; 8] {
            c.data[slot * 8..slot * 8 + 8].fill(0);
            c.used = c.used.saturating_sub(1);
            c.dirty.push(slot * 8..slot * 8 + 8);
        }
        Ok(())
    }

    /// Remove rows (and free their slots).
    fn remove(&mut self, rows: &[Placed]) -> Result<usize, IndexError> {
        let mut n = 0;
        for r in rows {
            for &(chunk, slot) in &r.places {
                self.clear(chunk, slot)?;
            }
            // A tombstone: the row's text is not read again (`lex` is contentless).
            self.lex.delete(r.id);
            self.exec("DELETE FROM lex_text WHERE id = ?1", params![r.id])?;
            n += self.exec("DELETE FROM records WHERE id = ?1", params![r.id])?;
        }
        Ok(n)
    }

    fn flush(self) -> Result<(), IndexError> {
        self.lex.apply(self.tx).map_err(|e| self.eng.sql(e))?;
        for (id, mut c) in self.chunks {
            if c.dirty.is_empty() {
                continue;
            }
            let res = if c.used == 0 {
                self.tx
                    .execute("DELETE FROM chunks WHERE id = ?1", [id])
                    .map(drop)
            } else if !c.in_db || merge_ranges(&mut c.dirty) > MAX_DIRTY_RANGES {
                self.tx
                    .prepare_cached(
                        "INSERT OR REPLACE INTO chunks(id, used, data) VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut s| s.execute(params![id, c.used as i64, c.data]))
                    .map(drop)
            } else {
                patch(self.tx, id, &c)
            };
            res.map_err(|e| self.eng.sql(e))?;
        }
        Ok(())
    }

    fn placed(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<Placed>, IndexError> {
        let mut stmt = self.tx.prepare_cached(sql).map_err(|e| self.eng.sql(e))?;
        let rows = stmt
            .query_map(p, |r| {
                let places: Option<Vec<u8>> = r.get(1)?;
                Ok(Placed {
                    id: r.get(0)?,
                    places: places_of(places.as_deref()),
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.eng.sql(e))?;
        Ok(rows)
    }

    fn rows_under(&self, prefix: &VPath) -> Result<Vec<Placed>, IndexError> {
        if prefix.is_root() {
            return self.placed("SELECT id, places FROM records", []);
        }
        self.placed(
            &format!("SELECT id, places FROM records WHERE {UNDER_SQL}"),
            under_params(prefix),
        )
    }

    fn exec(&self, sql: &str, p: impl rusqlite::Params) -> Result<usize, IndexError> {
        self.tx
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(p))
            .map_err(|e| self.eng.sql(e))
    }

    /// The record's terms: its name's and its text's, replacing what `lex` held for `id`.
    fn put_terms(
        &mut self,
        id: i64,
        uri: &VPath,
        level: Level,
        text: &str,
    ) -> Result<(), IndexError> {
        let name = if uri.is_root() { "" } else { uri.name() };
        self.lex_row(id, level, &text::document(name), &text::document(text))
    }

    /// Make `lex`'s row `id` (and the `lex_text` it is made from) of these terms; a record
    /// at `level` other than content is a summary (its row in `lex_sum` too).
    fn lex_row(&mut self, id: i64, level: Level, name: &str, body: &str) -> Result<(), IndexError> {
        self.lex.put(
            id,
            LexRow {
                name: name.to_string(),
                body: body.to_string(),
                summary: level != Level::Content,
            },
        );
        self.exec(
            "INSERT OR REPLACE INTO lex_text(id, name, body) VALUES (?1, ?2, ?3)",
            params![id, name, body],
        )?;
        Ok(())
    }

    /// Give record `id` (its vectors placed at `places`) a vector per passage of `parts`,
    /// reusing its slots and freeing those it no longer needs.
    fn put_vectors(
        &mut self,
        id: i64,
        places: &[Slot],
        parts: &[PassageVector],
    ) -> Result<(), IndexError> {
        for &(chunk, slot) in places.iter().skip(parts.len()) {
            self.clear(chunk, slot)?;
        }
        let mut placed = Vec::with_capacity(parts.len());
        let mut vecs = Vec::with_capacity(parts.len() * self.layout.dim * 4);
        for (i, p) in parts.iter().enumerate() {
            let unit = normalised(&p.vector);
            // Each slot is filled at once, so the next allocation sees it taken.
            let (chunk, slot) = match places.get(i) {
                Some(&p) => p,
                None => self.alloc()?,
            };
            self.fill(chunk, slot, id, &unit)?;
            placed.push((chunk, slot));
            vecs.extend(f32_to_bytes(&unit));
        }
        self.exec(
            "UPDATE records SET places = ?2, spans = ?3, vec = ?4 WHERE id = ?1",
            params![id, places_blob(&placed), spans_blob(parts), vecs],
        )?;
        Ok(())
    }

    /// Take record `id`'s vectors away (its source changed; the model embeds it again).
    fn drop_vectors(&mut self, id: i64, places: &[Slot]) -> Result<(), IndexError> {
        for &(chunk, slot) in places {
            self.clear(chunk, slot)?;
        }
        if !places.is_empty() {
            self.exec(
                "UPDATE records SET places = NULL, spans = NULL, vec = NULL WHERE id = ?1",
                params![id],
            )?;
        }
        Ok(())
    }

    fn upsert(&mut self, rec: &Record) -> Result<(), IndexError> {
        // One lookup for the row, its version and its slots.
        let existing: Option<(i64, String, Vec<Slot>)> = self
            .tx
            .prepare_cached("SELECT id, version, places FROM records WHERE uri = ?1 AND level = ?2")
            .and_then(|mut s| {
                s.query_row(params![rec.uri.as_str(), rec.level as i64], |r| {
                    let places: Option<Vec<u8>> = r.get(2)?;
                    Ok((r.get(0)?, r.get(1)?, places_of(places.as_deref())))
                })
                .optional()
            })
            .map_err(|e| self.eng.sql(e))?;
        let (id, places) = match existing {
            Some((id, version, places)) => {
                self.exec(
                    "UPDATE records SET version = ?2, snippet = ?3, partial = ?4 WHERE id = ?1",
                    params![id, rec.source_version, rec.snippet, rec.partial],
                )?;
                // A new version without a vector: the old vector described other text.
                if version != rec.source_version && rec.vector.is_none() {
                    self.drop_vectors(id, &places)?;
                    (id, Vec::new())
                } else {
                    (id, places)
                }
            }
            None => {
                self.exec(
                    "INSERT INTO records(uri, level, version, snippet, partial) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        rec.uri.as_str(),
                        rec.level as i64,
                        rec.source_version,
                        rec.snippet,
                        rec.partial
                    ],
                )?;
                (self.tx.last_insert_rowid(), Vec::new())
            }
        };
        self.put_terms(id, &rec.uri, rec.level, &rec.text)?;
        match &rec.vector {
            Some(v) => {
                let whole = PassageVector {
                    lines: [0, 0],
                    vector: v.clone(),
                };
                self.put_vectors(id, &places, std::slice::from_ref(&whole))
            }
            None => Ok(()),
        }
    }
}

/// Write a stored chunk's changed bytes in place, and its count.
fn patch(tx: &Transaction<'_>, id: i64, c: &ChunkBuf) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE chunks SET used = ?2 WHERE id = ?1")?
        .execute(params![id, c.used as i64])?;
    let mut blob = tx.blob_open(rusqlite::MAIN_DB, "chunks", "data", id, false)?;
    for r in &c.dirty {
        blob.write_at(&c.data[r.clone()], r.start)?;
    }
    Ok(())
}

/// Sort and merge overlapping or touching ranges in place; returns how many are left.
fn merge_ranges(r: &mut Vec<std::ops::Range<usize>>) -> usize {
    r.sort_unstable_by_key(|x| x.start);
    let mut out: Vec<std::ops::Range<usize>> = Vec::with_capacity(r.len());
    for x in r.drain(..) {
        match out.last_mut() {
            Some(last) if x.start <= last.end => last.end = last.end.max(x.end),
            _ => out.push(x),
        }
    }
    *r = out;
    r.len()
}

impl SqliteEngine {
    /// Run `f` in one IMMEDIATE transaction and write the touched chunks back before commit.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut Batch) -> Result<T, IndexError>,
    ) -> Result<T, IndexError> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        let mut batch = Batch {
            eng: self,
            tx: &tx,
            layout: Layout { dim: self.dim },
            chunks: HashMap::new(),
            lex: LexChanges::default(),
        };
        let out = f(&mut batch)?;
        batch.flush()?;
        crate::crash_point!("index.write.before_commit");
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(out)
    }

    /// Insert or replace each record, in one transaction.
    pub(super) fn upsert_many(&self, recs: &[Record]) -> Result<(), IndexError> {
        self.write(|b| recs.iter().try_for_each(|r| b.upsert(r)))
    }

    /// See [`crate::index::Index::set_vectors`].
    pub(super) fn set_vectors(
        &self,
        uri: &VPath,
        level: Level,
        version: &str,
        parts: &[PassageVector],
    ) -> Result<bool, IndexError> {
        self.write(|b| {
            let Some(p) = b
                .placed(
                    "SELECT id, places FROM records WHERE uri = ?1 AND level = ?2 AND version = ?3",
                    params![uri.as_str(), level as i64, version],
                )?
                .pop()
            else {
                return Ok(false);
            };
            b.put_vectors(p.id, &p.places, parts)?;
            crate::crash_point!("index.set_vector.before_commit");
            Ok(true)
        })
    }

    /// Delete every level of `uri` (not what lies below it). Returns the records removed.
    pub(super) fn delete(&self, uri: &VPath) -> Result<usize, IndexError> {
        self.write(|b| {
            let rows = b.placed(
                "SELECT id, places FROM records WHERE uri = ?1",
                [uri.as_str()],
            )?;
            b.remove(&rows)
        })
    }

    /// Delete `prefix` itself and everything below it (component-wise), in one transaction.
    pub(super) fn delete_prefixes(&self, prefixes: &[&VPath]) -> Result<usize, IndexError> {
        self.write(|b| {
            let mut n = 0;
            for prefix in prefixes {
                let rows = b.rows_under(prefix)?;
                n += b.remove(&rows)?;
            }
            Ok(n)
        })
    }

    /// Delete each record named if it still has the version given. Returns how many were
    /// deleted.
    pub(super) fn delete_if_versions(
        &self,
        which: &[(&VPath, Level, &str)],
    ) -> Result<usize, IndexError> {
        if which.is_empty() {
            return Ok(0);
        }
        self.write(|b| {
            let mut n = 0;
            for (uri, level, version) in which {
                let rows = b.placed(
                    "SELECT id, places FROM records WHERE uri = ?1 AND level = ?2 AND version = ?3",
                    params![uri.as_str(), *level as i64, version],
                )?;
                n += b.remove(&rows)?;
            }
            Ok(n)
        })
    }

    /// Move `from` and everything below it to `to`, in one transaction. Records already at the
    /// destination names are replaced (as `rename(2)` replaces the target). Returns the records moved.
    pub(super) fn rename_prefix(&self, from: &VPath, to: &VPath) -> Result<usize, IndexError> {
        if from == to {
            return Ok(0);
        }
        if to.starts_with(from) {
            return Err(IndexError::RenameIntoSelf {
                from: from.clone(),
                to: to.clone(),
            });
        }
        self.write(|b| {
            let (sql, params): (String, Vec<String>) = if from.is_root() {
                ("SELECT id, uri, level FROM records".into(), vec![])
            } else {
                (
                    format!("SELECT id, uri, level FROM records WHERE {UNDER_SQL}"),
                    under_params(from).to_vec(),
                )
            };
            let moving: Vec<(i64, String, i64)> =
                b.tx.prepare_cached(&sql)
                    .and_then(|mut s| {
                        s.query_map(rusqlite::params_from_iter(params), |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })?
                        .collect()
                    })
                    .map_err(|e| b.eng.sql(e))?;
            let ids: HashSet<i64> = moving.iter().map(|m| m.0).collect();
            let mut renamed = Vec::with_capacity(moving.len());
            for (id, uri, level) in &moving {
                let old = b.eng.vpath(uri)?;
                let new = old
                    .rebase(from, to)
                    .ok_or_else(|| b.eng.corrupt(format!("{uri} is not under {from}")))?;
                renamed.push((*id, new, *level));
            }
            // Records the move replaces.
            for (_, new, level) in &renamed {
                let victims: Vec<Placed> = b
                    .placed(
                        "SELECT id, places FROM records WHERE uri = ?1 AND level = ?2",
                        params![new.as_str(), level],
                    )?
                    .into_iter()
                    .filter(|p| !ids.contains(&p.id))
                    .collect();
                b.remove(&victims)?;
            }
            // Two passes through names no path can have, so no intermediate state breaks
            // UNIQUE(uri, level) however the old and new names interleave.
            let set_uri = |id: i64, uri: &str| {
                b.tx.prepare_cached("UPDATE records SET uri = ?2 WHERE id = ?1")
                    .and_then(|mut s| s.execute(params![id, uri]))
                    .map_err(|e| b.eng.sql(e))
            };
            for (id, _, _) in &renamed {
                set_uri(*id, &format!("\u{1}{id}"))?;
            }
            crate::crash_point!("index.rename.between_passes");
            for (id, new, _) in &renamed {
                set_uri(*id, new.as_str())?;
            }
            // Only the moved path itself changes its name; what lies below keeps its own.
            if from.name() != to.name() {
                for (id, new, level) in renamed.iter().filter(|r| r.1 == *to) {
                    let level = b.eng.level(*level)?;
                    // The contentless row is made again from its text, under the new name.
                    let body: String =
                        b.tx.prepare_cached("SELECT body FROM lex_text WHERE id = ?1")
                            .and_then(|mut s| s.query_row([id], |r| r.get(0)))
                            .map_err(|e| b.eng.sql(e))?;
                    b.lex_row(*id, level, &text::document(new.name()), &body)?;
                }
            }
            Ok(renamed.len())
        })
    }
}
