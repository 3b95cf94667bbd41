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
        Ok(self
            .word_terms(words)?
            .into_iter()
            .map(|w| w.into_iter().map(|(_, token)| token).collect())
            .collect())
    }

    /// [`Analyzer::word_tokens`], each token with a term of the document that the tokenizer
    /// makes it of: what to search for to find the token (a stem searched for is stemmed
    /// again, and the porter stemmer does not always leave a stem as it is).
    pub fn word_terms(&mut self, words: &[&str]) -> rusqlite::Result<Vec<Vec<(String, String)>>> {
        // Every distinct term of every word one row, tokenized in one transaction.
        let docs: Vec<String> = words.iter().map(|w| super::text::document(w)).collect();
        let mut terms: Vec<&str> = docs
            .iter()
            .flat_map(|d| d.split(' '))
            .filter(|t| !t.is_empty())
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let tx = self.conn.transaction()?;
        {
            let mut ins =
                tx.prepare_cached("INSERT INTO t(rowid, name, body) VALUES (?1, '', ?2)")?;
            for (i, t) in terms.iter().enumerate() {
                ins.execute(rusqlite::params![i as i64 + 1, t])?;
            }
        }
        let mut token_of: Vec<Vec<String>> = vec![Vec::new(); terms.len()];
        {
            let mut q = tx.prepare_cached("SELECT doc, term FROM v")?;
            let mut rows = q.query([])?;
            while let Some(r) = rows.next()? {
                let doc: i64 = r.get(0)?;
                token_of[doc as usize - 1].push(r.get(1)?);
            }
        }
        tx.execute("DELETE FROM t", [])?;
        tx.commit()?;
        Ok(docs
            .iter()
            .map(|d| {
                let mut out: Vec<(String, String)> = Vec::new();
                for term in d.split(' ').filter(|t| !t.is_empty()) {
                    let i = terms.binary_search(&term).expect("listed above");
                    // Each term of a document is one token (letters and digits only).
                    if let [token] = token_of[i].as_slice() {
                        if !out.iter().any(|(_, t)| t == token) {
                            out.push((term.to_string(), token.clone()));
                        }
                    }
                }
                out.sort_by(|a, b| a.1.cmp(&b.1));
                out
            })
            .collect())
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
        assert_eq!(
            a.word_terms(&["Agreed"]).unwrap(),
            [vec![("agreed".to_string(), "agre".to_string())]]
        );
        assert_eq!(a.tokens("agre").unwrap(), ["agr"], "a stem stemmed again");
        // The table is empty again after each call.
        assert_eq!(a.tokens("").unwrap(), Vec::<String>::new());
    }
}
