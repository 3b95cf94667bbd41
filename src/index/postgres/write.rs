//! Writes to the server's index: records one at a time or in batches, their postings, their
//! removal, and a moved record's name terms. Every function runs inside the caller's
//! transaction ([`Tx`]) and adds what it changes to the transaction's counts.

use super::{PgIndex, Tx};
use crate::index::analyze::Postings;
use crate::index::engine::Result;
use crate::index::Record;
use postgres::types::ToSql;

impl PgIndex {
    /// One record: its row locked (or inserted), its postings replaced, its counts noted.
    pub(super) fn upsert(&self, s: &mut Tx<'_, '_, '_>, rec: &Record, p: &Postings) -> Result<()> {
        let e = self.e();
        let level = rec.level as i16;
        let vec = rec
            .vector
            .as_ref()
            .map(|v| pgvector::Vector::from(crate::index::sqlite::quant::normalised(v)));
        let (id, old_len) = loop {
            let existing = s
                .opt(
                    "SELECT id, version, len FROM vi_records WHERE uri = $1 AND level = $2
                     FOR UPDATE",
                    &[&rec.uri.as_str(), &level],
                )
                .map_err(&e)?;
            if let Some(row) = existing {
                let (id, version, len): (i64, String, i32) = (row.get(0), row.get(1), row.get(2));
                // A new version without a vector: the old vector described other text.
                let clear = version != rec.source_version && vec.is_none();
                s.exec(
                    "UPDATE vi_records SET version = $2, snippet = $3, partial = $4,
                            name_len = $5, len = $6,
                            vec = CASE WHEN $7::vector IS NOT NULL THEN $7::vector
                                       WHEN $8 THEN NULL ELSE vec END
                      WHERE id = $1",
                    &[
                        &id,
                        &rec.source_version,
                        &rec.snippet,
                        &rec.partial,
                        &p.name_len,
                        &p.len,
                        &vec,
                        &clear,
                    ],
                )
                .map_err(&e)?;
                s.exec("DELETE FROM vi_postings WHERE rid = $1", &[&id])
                    .map_err(&e)?;
                break (id, Some(len));
            }
            let inserted = s
                .opt(
                    "INSERT INTO vi_records (uri, level, version, snippet, partial, name_len, len, vec)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (uri, level) DO NOTHING RETURNING id",
                    &[
                        &rec.uri.as_str(),
                        &level,
                        &rec.source_version,
                        &rec.snippet,
                        &rec.partial,
                        &p.name_len,
                        &p.len,
                        &vec,
                    ],
                )
                .map_err(&e)?;
            // None: another host inserted it meanwhile; update that row instead.
            if let Some(row) = inserted {
                break (row.get(0), None);
            }
        };
        self.put_postings(s, id, p)?;
        match old_len {
            Some(old) => self.count_in(s, 0, (p.len - old) as i64),
            None => self.count_in(s, 1, p.len as i64),
        }
    }

    pub(super) fn put_postings(&self, s: &mut Tx<'_, '_, '_>, id: i64, p: &Postings) -> Result<()> {
        if p.terms.is_empty() {
            return Ok(());
        }
        let terms: Vec<&str> = p.terms.iter().map(|t| t.0.as_str()).collect();
        let name: Vec<i32> = p.terms.iter().map(|t| t.1).collect();
        let body: Vec<i32> = p.terms.iter().map(|t| t.2).collect();
        s.exec(
            "INSERT INTO vi_postings (term, rid, name_tf, body_tf, len)
             SELECT t, $1, n, b, $2 FROM unnest($3::text[], $4::int4[], $5::int4[]) AS u(t, n, b)",
            &[&id, &p.len, &terms, &name, &body],
        )
        .map_err(self.e())?;
        Ok(())
    }

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

impl PgIndex {
    /// Many records (each named once) in a few statements: the existing rows locked in
    /// `order`, updated from arrays, the new ones inserted from arrays, all their postings in
    /// one insert. A record another writer inserted meanwhile goes the one-at-a-time way.
    pub(super) fn upsert_batch(
        &self,
        s: &mut Tx<'_, '_, '_>,
        recs: &[Record],
        postings: &[Postings],
        order: &[usize],
    ) -> Result<()> {
        let e = self.e();
        let uris: Vec<&str> = order.iter().map(|&i| recs[i].uri.as_str()).collect();
        let levels: Vec<i16> = order.iter().map(|&i| recs[i].level as i16).collect();
        let rows = s
            .all(
                "SELECT r.id, r.uri, r.level, r.version, r.len FROM vi_records r
                  JOIN unnest($1::text[], $2::int2[]) AS w(uri, level)
                    ON r.uri = w.uri AND r.level = w.level
                  ORDER BY r.uri, r.level FOR UPDATE OF r",
                &[&uris, &levels],
            )
            .map_err(&e)?;
        let mut existing = std::collections::HashMap::new();
        for r in &rows {
            let key: (String, i16) = (r.get(1), r.get(2));
            existing.insert(
                key,
                (
                    r.get::<_, i64>(0),
                    r.get::<_, String>(3),
                    r.get::<_, i32>(4),
                ),
            );
        }
        let unit = |i: usize| {
            recs[i]
                .vector
                .as_ref()
                .map(|v| pgvector::Vector::from(crate::index::sqlite::quant::normalised(v)))
        };
        // Existing rows: new values, postings replaced.
        let (mut old, mut new): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for &i in order {
            let key = (recs[i].uri.as_str().to_string(), recs[i].level as i16);
            if existing.contains_key(&key) {
                old.push(i);
            } else {
                new.push(i);
            }
        }
        let mut ids: Vec<(usize, i64)> = Vec::with_capacity(recs.len());
        if !old.is_empty() {
            let mut u_ids = Vec::new();
            let mut clear = Vec::new();
            for &i in &old {
                let (id, version, len) =
                    &existing[&(recs[i].uri.as_str().to_string(), recs[i].level as i16)];
                u_ids.push(*id);
                // A new version without a vector: the old vector described other text.
                clear.push(*version != recs[i].source_version && recs[i].vector.is_none());
                s.tokens += (postings[i].len - len) as i64;
                ids.push((i, *id));
            }
            let versions: Vec<&str> = old
                .iter()
                .map(|&i| recs[i].source_version.as_str())
                .collect();
            let snippets: Vec<&str> = old.iter().map(|&i| recs[i].snippet.as_str()).collect();
            let partial: Vec<bool> = old.iter().map(|&i| recs[i].partial).collect();
            let name_lens: Vec<i32> = old.iter().map(|&i| postings[i].name_len).collect();
            let lens: Vec<i32> = old.iter().map(|&i| postings[i].len).collect();
            let vecs: Vec<Option<pgvector::Vector>> = old.iter().map(|&i| unit(i)).collect();
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
                    &u_ids, &versions, &snippets, &partial, &name_lens, &lens, &vecs, &clear,
                ],
            )
            .map_err(&e)?;
            s.exec("DELETE FROM vi_postings WHERE rid = ANY($1)", &[&u_ids])
                .map_err(&e)?;
        }
        if !new.is_empty() {
            let n_uris: Vec<&str> = new.iter().map(|&i| recs[i].uri.as_str()).collect();
            let n_levels: Vec<i16> = new.iter().map(|&i| recs[i].level as i16).collect();
            let versions: Vec<&str> = new
                .iter()
                .map(|&i| recs[i].source_version.as_str())
                .collect();
            let snippets: Vec<&str> = new.iter().map(|&i| recs[i].snippet.as_str()).collect();
            let partial: Vec<bool> = new.iter().map(|&i| recs[i].partial).collect();
            let name_lens: Vec<i32> = new.iter().map(|&i| postings[i].name_len).collect();
            let lens: Vec<i32> = new.iter().map(|&i| postings[i].len).collect();
            let vecs: Vec<Option<pgvector::Vector>> = new.iter().map(|&i| unit(i)).collect();
            let made = s
                .all(
                    "INSERT INTO vi_records (uri, level, version, snippet, partial, name_len, len, vec)
                     SELECT * FROM unnest($1::text[], $2::int2[], $3::text[], $4::text[],
                                          $5::bool[], $6::int4[], $7::int4[], $8::vector[])
                     ON CONFLICT (uri, level) DO NOTHING RETURNING id, uri, level",
                    &[&n_uris, &n_levels, &versions, &snippets, &partial, &name_lens, &lens, &vecs],
                )
                .map_err(&e)?;
            let mut made_ids = std::collections::HashMap::new();
            for r in &made {
                made_ids.insert(
                    (r.get::<_, String>(1), r.get::<_, i16>(2)),
                    r.get::<_, i64>(0),
                );
            }
            for &i in &new {
                match made_ids.get(&(recs[i].uri.as_str().to_string(), recs[i].level as i16)) {
                    Some(&id) => {
                        s.docs += 1;
                        s.tokens += postings[i].len as i64;
                        ids.push((i, id));
                    }
                    // Another writer inserted it meanwhile: update that row instead.
                    None => self.upsert(s, &recs[i], &postings[i])?,
                }
            }
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
        Ok(())
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
