//! The lexical analyser both backends share: SQLite FTS5's own tokenizer
//! ([`TOKENIZER`]: unicode61 with diacritics folded, then the porter stemmer) over the terms
//! [`super::text`] makes.
//!
//! The SQLite index runs it inside its `lex` table. An index on a server keeps postings
//! instead, and makes them here, by passing the text through an in-memory FTS5 table and
//! reading its instances back (`fts5vocab`): the server's postings then hold exactly the
//! terms, counts and lengths the `lex` table would, so BM25 ranks alike on both backends.

use rusqlite::Connection;

/// The FTS5 tokenizer of every index.
pub const TOKENIZER: &str = "porter unicode61 remove_diacritics 2";

/// What BM25 needs of one record: each term's frequencies and the record's length.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Postings {
    /// (term, occurrences in the name, occurrences in the text), sorted by term.
    pub terms: Vec<(String, i32, i32)>,
    /// Tokens in the name.
    pub name_len: i32,
    /// Tokens in name and text together (FTS5's row size).
    pub len: i32,
}

/// An in-memory FTS5 table to tokenize with. Not `Sync`: one per thread, or behind a lock.
pub struct Analyzer {
    conn: Connection,
}

impl Analyzer {
    pub fn new() -> rusqlite::Result<Analyzer> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5(name, body, tokenize = '{TOKENIZER}');
             CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');"
        ))?;
        Ok(Analyzer { conn })
    }

    /// The postings of each (name, text) pair, both already [`super::text::document`]s.
    pub fn postings(&mut self, docs: &[(&str, &str)]) -> rusqlite::Result<Vec<Postings>> {
        let tx = self.conn.transaction()?;
        {
            let mut ins =
                tx.prepare_cached("INSERT INTO t(rowid, name, body) VALUES (?1, ?2, ?3)")?;
            for (i, (name, body)) in docs.iter().enumerate() {
                ins.execute(rusqlite::params![i as i64 + 1, name, body])?;
            }
        }
        let mut out = vec![Postings::default(); docs.len()];
        {
            let mut q = tx.prepare_cached(
                "SELECT doc, term, sum(col = 'name'), sum(col = 'body') FROM v
                  GROUP BY doc, term ORDER BY doc, term",
            )?;
            let mut rows = q.query([])?;
            while let Some(r) = rows.next()? {
                let doc: i64 = r.get(0)?;
                let (in_name, in_body): (i32, i32) = (r.get(2)?, r.get(3)?);
                let p = &mut out[doc as usize - 1];
                p.terms.push((r.get(1)?, in_name, in_body));
                p.name_len += in_name;
                p.len += in_name + in_body;
            }
        }
        tx.execute("DELETE FROM t", [])?;
        tx.commit()?;
        Ok(out)
    }

    /// The tokens of one text, in order (a query term may stem, or split into several).
    pub fn tokens(&mut self, text: &str) -> rusqlite::Result<Vec<String>> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO t(rowid, name, body) VALUES (1, '', ?1)",
            [text],
        )?;
        let out = tx
            .prepare_cached("SELECT term FROM v ORDER BY offset")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        tx.execute("DELETE FROM t", [])?;
        tx.commit()?;
        Ok(out)
    }

    /// The distinct index terms of each of `words` as a document holds them (made by
    /// [`super::text::document`], then stemmed): what [`super::Index::doc_freq`] counts a
    /// word by. A word without any (punctuation) has none.
    pub fn word_tokens(&mut self, words: &[&str]) -> rusqlite::Result<Vec<Vec<String>>> {
        words
            .iter()
            .map(|w| {
                let doc = super::text::document(w);
                let mut t = if doc.is_empty() {
                    Vec::new()
                } else {
                    self.tokens(&doc)?
                };
                t.sort();
                t.dedup();
                Ok(t)
            })
            .collect()
    }
}

/// How many of a set of documents hold each term: the documents go into an in-memory FTS5
/// table (postings only, `detail=none`) and its vocabulary answers. For the records of one
/// subtree, whose terms the index's own vocabulary cannot tell apart from the rest.
pub struct DocCounter {
    conn: Connection,
    added: i64,
}

impl DocCounter {
    pub fn new() -> rusqlite::Result<DocCounter> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE d USING fts5(name, body, tokenize = '{TOKENIZER}', detail = none);
             CREATE VIRTUAL TABLE dv USING fts5vocab(d, 'row');
             BEGIN;"
        ))?;
        Ok(DocCounter { conn, added: 0 })
    }

    /// One document: its name's and its text's terms ([`super::text::document`]s).
    pub fn add(&mut self, name: &str, body: &str) -> rusqlite::Result<()> {
        self.added += 1;
        self.conn
            .prepare_cached("INSERT INTO d(rowid, name, body) VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![self.added, name, body])
            .map(drop)
    }

    /// How many documents added hold each of `terms` (index terms, stemmed); a term none
    /// holds is left out.
    pub fn counts(&self, terms: &[&str]) -> rusqlite::Result<Vec<(String, u64)>> {
        let list = serde_json::to_string(terms).expect("strings serialise");
        let mut q = self.conn.prepare_cached(
            "SELECT term, doc FROM dv WHERE term IN (SELECT value FROM json_each(?1))",
        )?;
        let rows = q.query_map([list], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        rows.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_folds_and_counts_by_column() {
        let mut a = Analyzer::new().unwrap();
        let p = a
            .postings(&[("locks", "locking the lock wörld"), ("", "")])
            .unwrap();
        assert_eq!(
            p[0].terms,
            [
                ("lock".to_string(), 1, 2),
                ("the".to_string(), 0, 1),
                ("world".to_string(), 0, 1)
            ]
        );
        assert_eq!((p[0].name_len, p[0].len), (1, 5));
        assert_eq!(p[1], Postings::default());
        assert_eq!(a.tokens("running").unwrap(), ["run"]);
        assert_eq!(
            a.word_tokens(&["LockGuard", "locks", "..."]).unwrap(),
            [vec!["guard", "lock", "lockguard"], vec!["lock"], vec![]]
        );
        let mut c = DocCounter::new().unwrap();
        c.add("locks", "the lock").unwrap();
        c.add("", "locking guard").unwrap();
        c.add("x", "y").unwrap();
        let mut n = c.counts(&["lock", "guard", "absent"]).unwrap();
        n.sort();
        assert_eq!(n, [("guard".to_string(), 1), ("lock".to_string(), 2)]);
        // The table is empty again after each call.
        assert_eq!(a.tokens("").unwrap(), Vec::<String>::new());
    }
}
