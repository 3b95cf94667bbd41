//! Writes to the server's index: records in batches with their postings, their removal, and
//! a moved record's name terms. Every function runs inside the caller's
//! transaction ([`Tx`]) and adds what it changes to the transaction's counts.

use super::{PgIndex, Tx};
use crate::index::analyze::Postings;
use crate::index::engine::Result;
use crate::index::Record;
use std::collections::HashMap;

use postgres::types::ToSql;

impl PgIndex {
    /// Delete the records `where_` selects (binding `params`); returns how many.
    pub(super) fn remove(
        &self,
        s: &mut Tx<'_, '_, '_>,
        where_: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<usize> {
        let row = s
            .one(
                &format!(
                    "WITH d AS (DELETE FROM vi_records r WHERE {where_} RETURNING len)
                     SELECT count(*), COALESCE(sum(len), 0)::bigint FROM d"
                ),
                params,
            )
            .map_err(self.e())?;
        let (n, tokens): (i64, i64) = (row.get(0), row.get(1));
        self.count_in(s, -n, -tokens)?;
        Ok(n as usize)
    }
}

/// The record columns of some of a batch's records, as arrays for `unnest`.
struct Columns<'a> {
    versions: Vec<&'a str>,
    snippets: Vec<&'a str>,
    partial: Vec<bool>,
    name_lens: Vec<i32>,
    lens: Vec<i32>,
    vecs: Vec<Option<pgvector::Vector>>,
}

impl<'a> Columns<'a> {
    fn of(recs: &'a [Record], postings: &[Postings], which: &[usize]) -> Columns<'a> {
        Columns {
            versions: which
                .iter()
                .map(|&i| recs[i].source_version.as_str())
                .collect(),
            snippets: which.iter().map(|&i| recs[i].snippet.as_str()).collect(),
            partial: which.iter().map(|&i| recs[i].partial).collect(),
            name_lens: which.iter().map(|&i| postings[i].name_len).collect(),
            lens: which.iter().map(|&i| postings[i].len).collect(),
            vecs: which
                .iter()
                .map(|&i| {
                    recs[i]
                        .vector
                        .as_ref()
                        .map(|v| pgvector::Vector::from(crate::index::sqlite::quant::normalised(v)))
                })
                .collect(),
        }
    }
}

impl PgIndex {
    /// Records `which` of `recs` (each named once among them) in a few statements: the
    /// existing rows locked in the order given, updated from arrays, the new ones inserted
    /// from arrays, all their postings in one insert. A record another writer inserted
    /// meanwhile is written again as an existing one.
    pub(super) fn upsert_batch(
        &self,
        s: &mut Tx<'_, '_, '_>,
        recs: &[Record],
        postings: &[Postings],
        which: &[usize],
    ) -> Result<()> {
        let e = self.e();
        let key = |i: usize| (recs[i].uri.as_str().to_string(), recs[i].level as i16);
        let uris: Vec<&str> = which.iter().map(|&i| recs[i].uri.as_str()).collect();
        let levels: Vec<i16> = which.iter().map(|&i| recs[i].level as i16).collect();
        let rows = s
            .all(
                "SELECT r.id, r.uri, r.level, r.version, r.len FROM vi_records r
                  JOIN unnest($1::text[], $2::int2[]) AS w(uri, level)
                    ON r.uri = w.uri AND r.level = w.level
                  ORDER BY r.uri, r.level FOR UPDATE OF r",
                &[&uris, &levels],
            )
            .map_err(&e)?;
        let existing: HashMap<(String, i16), (i64, String, i32)> = rows
            .iter()
            .map(|r| ((r.get(1), r.get(2)), (r.get(0), r.get(3), r.get(4))))
            .collect();
        let (old, new): (Vec<usize>, Vec<usize>) =
            which.iter().partition(|&&i| existing.contains_key(&key(i)));
        let mut ids: Vec<(usize, i64)> = Vec::with_capacity(which.len());
        // Records whose passages' vectors no longer hold: a vector given, or cleared.
        let mut stale: Vec<i64> = Vec::new();
        if !old.is_empty() {
            let mut u_ids = Vec::with_capacity(old.len());
            let mut clear = Vec::with_capacity(old.len());
            for &i in &old {
                let (id, version, len) = &existing[&key(i)];
                u_ids.push(*id);
                // A new version without a vector: the old vector described other text.
                let cleared = *version != recs[i].source_version && recs[i].vector.is_none();
                if cleared || recs[i].vector.is_some() {
                    stale.push(*id);
                }
                clear.push(cleared);
                s.tokens += (postings[i].len - len) as i64;
                ids.push((i, *id));
            }
            let c = Columns::of(recs, postings, &old);
            s.exec(
                "UPDATE vi_records r SET version = u.version, snippet = u.snippet,
                        partial = u.partial, name_len = u.name_len, len = u.len,
                        vec = CASE WHEN u.vec IS NOT NULL THEN u.vec
                                   WHEN u.clear THEN NULL ELSE r.vec END
                   FROM unnest($1::int8[], $2::text[], $3::text[], $4::bool[], $5::int4[],
                               $6::int4[], $7::vector[], $8::bool[])
                        AS u(id, version, snippet, partial, name_len, len, vec, clear)
                  WHERE r.id = u.id",
                &[
                    &u_ids,
                    &c.versions,
                    &c.snippets,
                    &c.partial,
                    &c.name_lens,
                    &c.lens,
                    &c.vecs,
                    &clear,
                ],
            )
            .map_err(&e)?;
            s.exec("DELETE FROM vi_postings WHERE rid = ANY($1)", &[&u_ids])
                .map_err(&e)?;
        }
        let mut raced = Vec::new();
        if !new.is_empty() {
            let n_uris: Vec<&str> = new.iter().map(|&i| recs[i].uri.as_str()).collect();
            let n_levels: Vec<i16> = new.iter().map(|&i| recs[i].level as i16).collect();
            let c = Columns::of(recs, postings, &new);
            let made: HashMap<(String, i16), i64> = s
                .all(
                    "INSERT INTO vi_records (uri, level, version, snippet, partial, name_len, len, vec)
                     SELECT * FROM unnest($1::text[], $2::int2[], $3::text[], $4::text[],
                                          $5::bool[], $6::int4[], $7::int4[], $8::vector[])
                     ON CONFLICT (uri, level) DO NOTHING RETURNING id, uri, level",
                    &[
                        &n_uris, &n_levels, &c.versions, &c.snippets, &c.partial, &c.name_lens,
                        &c.lens, &c.vecs,
                    ],
                )
                .map_err(&e)?
                .iter()
                .map(|r| ((r.get(1), r.get(2)), r.get(0)))
                .collect();
            for &i in &new {
                match made.get(&key(i)) {
                    Some(&id) => {
                        s.docs += 1;
                        s.tokens += postings[i].len as i64;
                        ids.push((i, id));
                    }
                    // Another writer inserted it meanwhile (the insert waited for its commit).
                    None => raced.push(i),
                }
            }
        }
        // A vector given for a record as a whole is its one passage.
        let fresh: Vec<i64> = ids
            .iter()
            .filter(|&&(i, _)| recs[i].vector.is_some())
            .map(|&(_, id)| id)
            .collect();
        if !stale.is_empty() {
            s.exec("DELETE FROM vi_parts WHERE rid = ANY($1)", &[&stale])
                .map_err(&e)?;
        }
        if !fresh.is_empty() {
            s.exec(
                "INSERT INTO vi_parts (rid, ord, first_line, last_line, vec)
                 SELECT id, 0, 0, 0, vec FROM vi_records WHERE id = ANY($1)",
                &[&fresh],
            )
            .map_err(&e)?;
        }
        let mut rid = Vec::new();
        let mut term = Vec::new();
        let mut name_tf = Vec::new();
        let mut body_tf = Vec::new();
        let mut len = Vec::new();
        for (i, id) in ids {
            for (t, n, b) in &postings[i].terms {
                rid.push(id);
                term.push(t.as_str());
                name_tf.push(*n);
                body_tf.push(*b);
                len.push(postings[i].len);
            }
        }
        if !rid.is_empty() {
            s.exec(
                "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::int4[], $5::int4[])",
                &[&term, &rid, &name_tf, &body_tf, &len],
            )
            .map_err(&e)?;
        }
        // Their rows are committed now: this time they are existing ones.
        if raced.is_empty() {
            Ok(())
        } else {
            self.upsert_batch(s, recs, postings, &raced)
        }
    }
}

impl PgIndex {
    /// Record `id`'s name changed from the one of `old` to the one of `new` (both postings
    /// of a name alone): its name counts and length follow, its text's stay.
    pub(super) fn rename_terms(
        &self,
        s: &mut Tx<'_, '_, '_>,
        id: i64,
        old: &Postings,
        new: &Postings,
    ) -> Result<()> {
        let e = self.e();
        let row = s
            .one("SELECT name_len, len FROM vi_records WHERE id = $1", &[&id])
            .map_err(&e)?;
        let (name_len, len): (i32, i32) = (row.get(0), row.get(1));
        debug_assert_eq!(name_len, old.name_len);
        let new_len = len - name_len + new.name_len;
        s.exec(
            "UPDATE vi_postings SET name_tf = 0 WHERE rid = $1 AND name_tf != 0",
            &[&id],
        )
        .map_err(&e)?;
        s.exec(
            "DELETE FROM vi_postings WHERE rid = $1 AND name_tf = 0 AND body_tf = 0",
            &[&id],
        )
        .map_err(&e)?;
        let terms: Vec<&str> = new.terms.iter().map(|t| t.0.as_str()).collect();
        let counts: Vec<i32> = new.terms.iter().map(|t| t.1).collect();
        s.exec(
            "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
             SELECT t, $1, n, 0, $2 FROM unnest($3::text[], $4::int4[]) AS u(t, n)
             ON CONFLICT (term, rid) DO UPDATE SET name_tf = EXCLUDED.name_tf",
            &[&id, &new_len, &terms, &counts],
        )
        .map_err(&e)?;
        s.exec(
            "UPDATE vi_postings SET len = $2 WHERE rid = $1",
            &[&id, &new_len],
        )
        .map_err(&e)?;
        s.exec(
            "UPDATE vi_records SET name_len = $2, len = $3 WHERE id = $1",
            &[&id, &new.name_len, &new_len],
        )
        .map_err(&e)?;
        self.count_in(s, 0, (new_len - len) as i64)
    }
}
