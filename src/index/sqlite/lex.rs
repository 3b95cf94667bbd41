//! The writes of `lex`, the contentless FTS5 table, and the BM25 totals FTS5 does not keep
//! for it.
//!
//! A contentless table with `contentless_delete` deletes a row by tombstoning it: FTS5 has no
//! text to find the row's postings by, and it leaves its BM25 totals (the number of rows and
//! each column's token count, `lex_data` row 1) as they were — SQLite 3.50 does, measured at
//! open by [`Quirks::probe`]. Left so, every rewrite of a record would add to both, and BM25's
//! idf and average length would drift from the corpus's with every change (scores 1.7× those
//! of the same records written once, after 120 rewrites of 200). Each row's token counts are in
//! `lex_docsize` (its `sz`: one varint a column), so a transaction takes the rows it deletes
//! out of the totals itself, before FTS5 first reads the totals in that transaction: FTS5
//! keeps them from that read until the commit, then writes them back. Hence a transaction's
//! `lex` changes are gathered ([`LexChanges`]) and applied at its end: the totals first, then
//! the deletes, then the inserts.
//!
//! Invariant: after every commit the totals record is what FTS5 would keep for the live rows
//! alone (tested against a table with content: the same BM25 scores after rewrites).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// FTS5's `lex_data` row holding the totals (`FTS5_AVERAGES_ROWID`).
const TOTALS_ROW: i64 = 1;

/// What this SQLite's FTS5 leaves undone when a contentless row is deleted by its rowid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Quirks {
    /// The row count is not decremented.
    rows: bool,
    /// The columns' token counts are not decremented.
    sizes: bool,
}

impl Quirks {
    /// This build's FTS5, asked once: a row written and deleted in a scratch table. A later
    /// SQLite that keeps the totals itself is then not corrected twice.
    pub(super) fn get() -> Quirks {
        static Q: OnceLock<Quirks> = OnceLock::new();
        *Q.get_or_init(|| {
            Quirks::probe().unwrap_or_else(|e| {
                tracing::warn!("probing FTS5's contentless deletes: {e}; assuming SQLite 3.50's");
                Quirks {
                    rows: true,
                    sizes: true,
                }
            })
        })
    }

    fn probe() -> rusqlite::Result<Quirks> {
        let c = Connection::open_in_memory()?;
        c.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(a, content = '', contentless_delete = 1);
             INSERT INTO t(rowid, a) VALUES (1, 'one two'), (2, 'three');
             DELETE FROM t WHERE rowid = 1;",
        )?;
        let totals: Vec<u8> = c.query_row(
            "SELECT block FROM t_data WHERE id = ?1",
            [TOTALS_ROW],
            |r| r.get(0),
        )?;
        let v = varints(&totals);
        Ok(Quirks {
            rows: v.first() == Some(&2),
            sizes: v.get(1) == Some(&3),
        })
    }
}

/// The terms of one `lex` row: its name's, its text's, and whether its record is a summary
/// (whose row `lex_sum` repeats, see [`super`]).
pub(super) struct LexRow {
    pub name: String,
    pub body: String,
    pub summary: bool,
}

/// The `lex` rows one transaction changes: each id's last state (a row of these terms, or
/// none), applied by [`LexChanges::apply`] before the commit.
#[derive(Default)]
pub(super) struct LexChanges {
    rows: BTreeMap<i64, Option<LexRow>>,
}

impl LexChanges {
    /// Row `id` is to hold these terms (replacing what it holds).
    pub(super) fn put(&mut self, id: i64, row: LexRow) {
        self.rows.insert(id, Some(row));
    }

    /// Row `id` is to go.
    pub(super) fn delete(&mut self, id: i64) {
        self.rows.insert(id, None);
    }

    /// Write the changes in `tx`, the totals kept right: every changed row that exists now is
    /// deleted (and taken out of the totals), then the rows to hold terms are inserted; a
    /// summary's row the same way in `lex_sum` too.
    pub(super) fn apply(self, tx: &Transaction) -> rusqlite::Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let quirks = Quirks::get();
        let mut gone_rows = 0u64;
        let mut gone_sizes: Vec<u64> = Vec::new();
        let mut existing = Vec::with_capacity(self.rows.len());
        let mut summaries = Vec::new();
        {
            let mut size_of = tx.prepare_cached("SELECT sz FROM lex_docsize WHERE id = ?1")?;
            let mut in_sum = tx.prepare_cached("SELECT 1 FROM lex_sum_docsize WHERE id = ?1")?;
            for &id in self.rows.keys() {
                if in_sum.exists([id])? {
                    summaries.push(id);
                }
                let Some(sz) = size_of
                    .query_row([id], |r| r.get::<_, Vec<u8>>(0))
                    .optional()?
                else {
                    continue;
                };
                existing.push(id);
                gone_rows += 1;
                for (i, n) in varints(&sz).into_iter().enumerate() {
                    if gone_sizes.len() <= i {
                        gone_sizes.resize(i + 1, 0);
                    }
                    gone_sizes[i] += n;
                }
            }
        }
        if gone_rows > 0 && (quirks.rows || quirks.sizes) {
            let totals: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT block FROM lex_data WHERE id = ?1",
                    [TOTALS_ROW],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(totals) = totals {
                let mut v = varints(&totals);
                if quirks.rows {
                    if let Some(n) = v.first_mut() {
                        *n = n.saturating_sub(gone_rows);
                    }
                }
                if quirks.sizes {
                    for (t, g) in v.iter_mut().skip(1).zip(&gone_sizes) {
                        *t = t.saturating_sub(*g);
                    }
                }
                let mut block = Vec::with_capacity(totals.len());
                for n in v {
                    put_varint(n, &mut block);
                }
                tx.prepare_cached("UPDATE lex_data SET block = ?2 WHERE id = ?1")?
                    .execute(params![TOTALS_ROW, block])?;
            }
        }
        let mut delete = tx.prepare_cached("DELETE FROM lex WHERE rowid = ?1")?;
        for id in existing {
            delete.execute([id])?;
        }
        let mut delete = tx.prepare_cached("DELETE FROM lex_sum WHERE rowid = ?1")?;
        for id in summaries {
            delete.execute([id])?;
        }
        let mut insert =
            tx.prepare_cached("INSERT INTO lex(rowid, name, body) VALUES (?1, ?2, ?3)")?;
        let mut insert_sum =
            tx.prepare_cached("INSERT INTO lex_sum(rowid, name, body) VALUES (?1, ?2, ?3)")?;
        for (id, row) in self.rows {
            if let Some(r) = row {
                insert.execute(params![id, r.name, r.body])?;
                if r.summary {
                    insert_sum.execute(params![id, r.name, r.body])?;
                }
            }
        }
        Ok(())
    }
}

/// The varints of `b` (SQLite's: big-endian, 7 bits a byte with the high bit saying more
/// follow, the ninth byte whole), as FTS5 writes its totals and column sizes.
fn varints(b: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let mut v: u64 = 0;
        let mut j = 0;
        loop {
            let Some(&byte) = b.get(i + j) else {
                return out; // a torn varint: what was whole
            };
            if j == 8 {
                v = (v << 8) | u64::from(byte);
                j += 1;
                break;
            }
            v = (v << 7) | u64::from(byte & 0x7f);
            j += 1;
            if byte & 0x80 == 0 {
                break;
            }
        }
        out.push(v);
        i += j;
    }
    out
}

/// Append `v` as SQLite's varint (see [`varints`]).
fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    if v > 0x00ff_ffff_ffff_ffff {
        let mut buf = [0u8; 9];
        buf[8] = v as u8;
        v >>= 8;
        for b in buf[..8].iter_mut().rev() {
            *b = ((v & 0x7f) as u8) | 0x80;
            v >>= 7;
        }
        out.extend_from_slice(&buf);
        return;
    }
    let start = out.len();
    loop {
        out.push(((v & 0x7f) as u8) | 0x80);
        v >>= 7;
        if v == 0 {
            break;
        }
    }
    out[start] &= 0x7f;
    out[start..].reverse();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            1 << 40,
            u64::MAX >> 8,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(v, &mut b);
            put_varint(7, &mut b);
            assert_eq!(varints(&b), vec![v, 7], "{v}");
        }
    }

    /// Rows written, some rewritten and some deleted through [`LexChanges`] score as a table
    /// with content holding the same rows scores them: the totals FTS5 leaves are corrected.
    #[test]
    fn bm25_after_rewrites_and_deletes_is_a_content_tables() {
        let docs: Vec<String> = (0..200)
            .map(|i| {
                format!(
                    "alpha beta {} gamma {}",
                    "word ".repeat(i % 17),
                    if i % 3 == 0 { "apache" } else { "" }
                )
            })
            .collect();
        let plain = Connection::open_in_memory().unwrap();
        plain
            .execute_batch("CREATE VIRTUAL TABLE lex USING fts5(name, body)")
            .unwrap();
        let mut ours = Connection::open_in_memory().unwrap();
        ours.execute_batch(
            "CREATE VIRTUAL TABLE lex USING fts5(name, body, content = '', contentless_delete = 1);
             INSERT INTO lex(lex, rank) VALUES('deletemerge', 0);",
        )
        .unwrap();
        ours.execute_batch(&super::super::lex_sum_sql()).unwrap();
        let row = |body: String| LexRow {
            name: "n".into(),
            body,
            summary: false,
        };
        let write = |ours: &mut Connection, f: &dyn Fn(&mut LexChanges)| {
            let tx = ours.transaction().unwrap();
            let mut c = LexChanges::default();
            f(&mut c);
            c.apply(&tx).unwrap();
            tx.commit().unwrap();
        };
        for (i, d) in docs.iter().enumerate() {
            plain
                .execute(
                    "INSERT INTO lex(rowid, name, body) VALUES (?1, 'n', ?2)",
                    params![i as i64 + 1, d],
                )
                .unwrap();
        }
        write(&mut ours, &|c| {
            for (i, d) in docs.iter().enumerate() {
                c.put(i as i64 + 1, row(d.clone()));
            }
        });
        // Rewrite 120 (half with new text), delete 30, in two transactions.
        for (i, d) in docs.iter().enumerate().take(120) {
            let t = if i % 2 == 0 {
                format!("{d} amended heliotrope")
            } else {
                d.clone()
            };
            plain
                .execute("DELETE FROM lex WHERE rowid = ?1", [i as i64 + 1])
                .unwrap();
            plain
                .execute(
                    "INSERT INTO lex(rowid, name, body) VALUES (?1, 'n', ?2)",
                    params![i as i64 + 1, t],
                )
                .unwrap();
        }
        write(&mut ours, &|c| {
            for (i, d) in docs.iter().enumerate().take(120) {
                let t = if i % 2 == 0 {
                    format!("{d} amended heliotrope")
                } else {
                    d.clone()
                };
                c.delete(i as i64 + 1);
                c.put(i as i64 + 1, row(t));
            }
        });
        for id in 150..180 {
            plain
                .execute("DELETE FROM lex WHERE rowid = ?1", [id])
                .unwrap();
        }
        write(&mut ours, &|c| (150..180).for_each(|id| c.delete(id)));
        let scores = |c: &Connection, q: &str| -> Vec<(i64, f64)> {
            let mut s = c
                .prepare(
                    "SELECT rowid, bm25(lex, 2.0, 1.0) FROM lex WHERE lex MATCH ?1
                     ORDER BY 2, 1 LIMIT 20",
                )
                .unwrap();
            s.query_map([q], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(|x| x.unwrap())
                .collect()
        };
        for q in ["apache", "heliotrope", "word gamma", "alpha"] {
            let (a, b) = (scores(&plain, q), scores(&ours, q));
            assert_eq!(a.len(), b.len(), "{q}");
            for ((ia, sa), (ib, sb)) in a.iter().zip(&b) {
                assert_eq!(ia, ib, "{q}");
                assert!((sa - sb).abs() < 1e-9, "{q}: {sa} vs {sb}");
            }
        }
    }

    /// An index written with the old layout (`lex` holding its own content, no `lex_text`)
    /// is converted when opened: its records keep their ids and it finds what it found, a
    /// rename still re-makes a row under the new name, and `verify` finds nothing wrong.
    #[test]
    fn an_index_of_the_old_layout_is_converted_in_place() {
        use crate::index::{Index, Level, Record};
        use crate::uri::VPath;
        let rec = |uri: &str, text: &str| Record {
            uri: VPath::from_rel(uri).unwrap(),
            level: Level::Content,
            text: text.to_string(),
            vector: None,
            snippet: String::new(),
            source_version: "v1".into(),
            partial: false,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.db");
        let ix = Index::open_lexical(&path).unwrap();
        ix.upsert_many(&[
            rec("resources/a/one.md", "marigold ledger of accounts"),
            rec("resources/a/two.md", "obsidian ledger"),
        ])
        .unwrap();
        drop(ix);
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "CREATE TEMP TABLE t AS SELECT id, name, body FROM lex_text;
             DROP TABLE lex; DROP TABLE lex_text; DROP TABLE lex_sum;
             CREATE VIRTUAL TABLE lex USING fts5(name, body, tokenize = '{}');
             INSERT INTO lex(rowid, name, body) SELECT id, name, body FROM temp.t;",
            crate::index::analyze::TOKENIZER
        ))
        .unwrap();
        drop(c);
        let ix = Index::open_lexical(&path).unwrap();
        let uris = |q: &str| -> Vec<String> {
            ix.search_lexical(q, 10, None)
                .unwrap()
                .into_iter()
                .map(|h| h.uri.uri())
                .collect()
        };
        assert_eq!(uris("marigold"), ["viking://resources/a/one.md"]);
        assert_eq!(uris("ledger").len(), 2);
        ix.rename_prefix(
            &VPath::from_rel("resources/a/two.md").unwrap(),
            &VPath::from_rel("resources/a/tamarind.md").unwrap(),
        )
        .unwrap();
        assert_eq!(uris("tamarind"), ["viking://resources/a/tamarind.md"]);
        assert_eq!(uris("obsidian"), ["viking://resources/a/tamarind.md"]);
        ix.delete_prefixes(&[&VPath::from_rel("resources/a/one.md").unwrap()])
            .unwrap();
        assert!(uris("marigold").is_empty());
        assert_eq!(ix.verify().unwrap(), Vec::<String>::new());
    }
}
