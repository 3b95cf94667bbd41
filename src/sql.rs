//! The seam under the stores whose rules are written once for every SQL database (the queue,
//! the journal), as JuiceFS's one `dbMeta` serves every SQL database: a store writes its
//! statements in one spelling, and each database answers through [`Sql`] — SQLite through a
//! connection or transaction, PostgreSQL through a [`Session`].
//!
//! The spelling: placeholders `?1`, `?2`… (PostgreSQL's `$1`, `$2`… are derived), table names
//! as `{name}` looked up in the [`Dialect`], and the few clauses only one database has as
//! `{skip_locked}` (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so workers of several hosts each
//! take a different row; nothing on SQLite, whose write transaction is the only writer),
//! `{for_update}` and `{for_share}` (row locks; nothing on SQLite), and `{now}` (the store's
//! clock: this host's for SQLite, the server's for PostgreSQL). Everything else is SQL both
//! speak: `CASE` rather than the scalar `MAX`/`GREATEST`, `ON CONFLICT … DO …` upserts,
//! `RETURNING`. Values go in as [`Val`] and come back as [`Cell`]s, whatever width each
//! database gives an integer column.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use postgres::types::{private::BytesMut, IsNull, ToSql, Type};
use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::pg::{Session, NOW_SQL};

/// What a database refused, before its store names it.
#[derive(Debug)]
pub(crate) enum Error {
    Sqlite(rusqlite::Error),
    Pg(postgres::Error),
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        Error::Sqlite(e)
    }
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Error {
        Error::Pg(e)
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// A statement's parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
}

impl<'a> From<Option<i64>> for Val<'a> {
    fn from(v: Option<i64>) -> Val<'a> {
        Val::OptInt(v)
    }
}

impl<'a> From<i64> for Val<'a> {
    fn from(v: i64) -> Val<'a> {
        Val::Int(v)
    }
}

impl<'a> From<&'a str> for Val<'a> {
    fn from(v: &'a str) -> Val<'a> {
        Val::Text(v)
    }
}

impl<'a> From<&'a String> for Val<'a> {
    fn from(v: &'a String) -> Val<'a> {
        Val::Text(v)
    }
}

impl<'a> From<Option<&'a str>> for Val<'a> {
    fn from(v: Option<&'a str>) -> Val<'a> {
        Val::OptText(v)
    }
}

/// One value of a row read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// A row read, its cells in column order.
#[derive(Debug, Clone)]
pub(crate) struct Row(pub Vec<Cell>);

impl Row {
    /// Column `i` as an integer (0 for NULL: a `SUM` over no row).
    pub fn int(&self, i: usize) -> i64 {
        match &self.0[i] {
            Cell::Int(v) => *v,
            _ => 0,
        }
    }

    pub fn opt_int(&self, i: usize) -> Option<i64> {
        match &self.0[i] {
            Cell::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn text(&self, i: usize) -> String {
        self.opt_text(i).unwrap_or_default()
    }

    pub fn opt_text(&self, i: usize) -> Option<String> {
        match &self.0[i] {
            Cell::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

/// What differs in how a database spells a statement.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Placeholders as `$1` rather than `?1`.
    pub dollar: bool,
    /// `{name}` → table name.
    pub tables: &'static [(&'static str, &'static str)],
    /// `{skip_locked}`: a claim's row lock that other claimers pass over.
    pub skip_locked: &'static str,
    /// `{for_update}`: the row locked until commit.
    pub for_update: &'static str,
    /// `{for_share}`: the rows kept from change until commit.
    pub for_share: &'static str,
    /// `{now}`: the store's clock in ms since the epoch, as SQL.
    pub now: &'static str,
    /// Statements spelled so far, by their text (a store has a bounded set of them): each is
    /// spelled once, not at every call of the FUSE write path.
    pub spelled: Mutex<BTreeMap<String, Arc<str>>>,
}

/// `{now}` on SQLite: this host's clock, as [`now_ms`] reads it.
/// (SQLite keeps the instant in whole ms; rounded, the day fraction gives them back exactly.)
pub(crate) const SQLITE_NOW: &str =
    "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

impl Dialect {
    /// SQLite's spelling, with a store's `tables`: `?N`, no row locks (a write transaction
    /// locks the database), this host's clock.
    pub const fn sqlite(tables: &'static [(&'static str, &'static str)]) -> Dialect {
        Dialect {
            dollar: false,
            tables,
            skip_locked: "",
            for_update: "",
            for_share: "",
            now: SQLITE_NOW,
            spelled: Mutex::new(BTreeMap::new()),
        }
    }

    /// PostgreSQL's spelling, with a store's `tables`: `$N`, row locks, the server's clock.
    pub const fn postgres(tables: &'static [(&'static str, &'static str)]) -> Dialect {
        Dialect {
            dollar: true,
            tables,
            skip_locked: "FOR UPDATE SKIP LOCKED",
            for_update: "FOR UPDATE",
            for_share: "FOR SHARE",
            now: crate::pg::NOW_MS,
            spelled: Mutex::new(BTreeMap::new()),
        }
    }

    /// `sql` in this database's spelling.
    pub fn spell(&self, sql: &str) -> Arc<str> {
        let mut spelled = self.spelled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = spelled.get(sql) {
            return s.clone();
        }
        let s: Arc<str> = self.spell_anew(sql).into();
        spelled.insert(sql.to_string(), s.clone());
        s
    }

    fn spell_anew(&self, sql: &str) -> String {
        let mut out = sql.to_string();
        for (name, table) in self.tables {
            out = out.replace(&format!("{{{name}}}"), table);
        }
        out = out
            .replace("{skip_locked}", self.skip_locked)
            .replace("{for_update}", self.for_update)
            .replace("{for_share}", self.for_share)
            .replace("{now}", self.now);
        if self.dollar {
            out = out.replace('?', "$");
        }
        out
    }
}

/// One database's answer to statements, inside a transaction or not (as its store opened it).
pub(crate) trait Sql {
    /// Run a statement; how many rows it changed.
    fn exec(&mut self, sql: &str, p: &[Val<'_>]) -> Result<u64>;
    /// Every row a statement answers.
    fn rows(&mut self, sql: &str, p: &[Val<'_>]) -> Result<Vec<Row>>;
    /// The store's clock, in ms since the epoch: this host's for SQLite, the server's for
    /// PostgreSQL (hosts whose clocks differ still agree on it).
    fn now(&mut self) -> Result<i64>;

    /// The first row a statement answers.
    fn opt(&mut self, sql: &str, p: &[Val<'_>]) -> Result<Option<Row>> {
        Ok(self.rows(sql, p)?.into_iter().next())
    }

    /// Run an `INSERT` of one row into a table keyed by `id`; the new row's id. (SQLite
    /// answers it without a result row: the FUSE write path enqueues through this.)
    fn insert(&mut self, sql: &str, p: &[Val<'_>]) -> Result<i64> {
        Ok(self
            .opt(&format!("{sql} RETURNING id"), p)?
            .map_or(0, |r| r.int(0)))
    }
}

/// This host's clock in ms since the epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A duration in ms, as instants are stored.
pub(crate) fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// How long before `now` the instant `then` was (zero if after).
pub(crate) fn age(now: i64, then: i64) -> std::time::Duration {
    std::time::Duration::from_millis(now.saturating_sub(then).max(0) as u64)
}

// --- SQLite -------------------------------------------------------------------------------

impl rusqlite::ToSql for Val<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Val::Int(v) | Val::OptInt(Some(v)) => ToSqlOutput::from(v),
            Val::Text(s) | Val::OptText(Some(s)) => {
                ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes()))
            }
            Val::OptText(None) | Val::OptInt(None) => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}

/// A SQLite connection (or a transaction of it, which derefs to one) with its dialect.
pub(crate) struct Lite<'c> {
    pub conn: &'c rusqlite::Connection,
    pub dialect: &'static Dialect,
}

impl Sql for Lite<'_> {
    fn exec(&mut self, sql: &str, p: &[Val<'_>]) -> Result<u64> {
        let sql = self.dialect.spell(sql);
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .execute(rusqlite::params_from_iter(p))? as u64)
    }

    fn rows(&mut self, sql: &str, p: &[Val<'_>]) -> Result<Vec<Row>> {
        let sql = self.dialect.spell(sql);
        let mut st = self.conn.prepare_cached(&sql)?;
        let n = st.column_count();
        let rows = st.query_map(rusqlite::params_from_iter(p), |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        ValueRef::Null => Cell::Null,
                        ValueRef::Integer(v) => Cell::Int(v),
                        ValueRef::Real(v) => Cell::Int(v as i64),
                        ValueRef::Text(t) | ValueRef::Blob(t) => {
                            Cell::Text(String::from_utf8_lossy(t).into_owned())
                        }
                    })
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(Row)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn insert(&mut self, sql: &str, p: &[Val<'_>]) -> Result<i64> {
        self.exec(sql, p)?;
        Ok(self.conn.last_insert_rowid())
    }

    fn now(&mut self) -> Result<i64> {
        Ok(now_ms())
    }
}

// --- PostgreSQL ---------------------------------------------------------------------------

impl ToSql for Val<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Val::Int(v) | Val::OptInt(Some(v)) => match *ty {
                Type::INT2 => i16::try_from(v)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(v)?.to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
            Val::Text(s) | Val::OptText(Some(s)) => s.to_sql(ty, out),
            Val::OptText(None) | Val::OptInt(None) => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT2 | Type::INT4 | Type::INT8 | Type::TEXT | Type::VARCHAR
        )
    }

    postgres::types::to_sql_checked!();
}

/// A PostgreSQL session (a client or a transaction of it) with its dialect.
pub(crate) struct Remote<'s, 'c, 'p, C: postgres::GenericClient> {
    pub session: &'s mut Session<'c, 'p, C>,
    pub dialect: &'static Dialect,
}

fn params<'v>(p: &'v [Val<'_>]) -> Vec<&'v (dyn ToSql + Sync)> {
    p.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl<C: postgres::GenericClient> Sql for Remote<'_, '_, '_, C> {
    fn exec(&mut self, sql: &str, p: &[Val<'_>]) -> Result<u64> {
        let sql = self.dialect.spell(sql);
        Ok(self.session.exec(&sql, &params(p))?)
    }

    fn rows(&mut self, sql: &str, p: &[Val<'_>]) -> Result<Vec<Row>> {
        let sql = self.dialect.spell(sql);
        let rows = self.session.all(&sql, &params(p))?;
        rows.iter().map(pg_row).collect()
    }

    fn now(&mut self) -> Result<i64> {
        Ok(self.session.one(NOW_SQL, &[])?.get(0))
    }
}

fn pg_row(r: &postgres::Row) -> Result<Row> {
    let cells = r
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cell = match *c.type_() {
                Type::INT2 => r.try_get::<_, Option<i16>>(i)?.map(|v| Cell::Int(v.into())),
                Type::INT4 => r.try_get::<_, Option<i32>>(i)?.map(|v| Cell::Int(v.into())),
                Type::BOOL => r
                    .try_get::<_, Option<bool>>(i)?
                    .map(|v| Cell::Int(v.into())),
                Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Cell::Int),
                _ => r.try_get::<_, Option<String>>(i)?.map(Cell::Text),
            };
            Ok(cell.unwrap_or(Cell::Null))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Row(cells))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_now_is_this_hosts_clock_in_ms() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        let before = now_ms();
        let now: i64 = c
            .query_row(&format!("SELECT {SQLITE_NOW}"), [], |r| r.get(0))
            .unwrap();
        assert!(before <= now && now <= now_ms(), "{before} {now}");
    }

    #[test]
    fn a_statement_is_spelled_for_its_database() {
        let sql = "SELECT 1 FROM {jobs} WHERE a = ?1 AND b <= {now} {skip_locked}";
        let pg = Dialect::postgres(&[("jobs", "vq_jobs")]);
        let want = format!(
            "SELECT 1 FROM vq_jobs WHERE a = $1 AND b <= {} FOR UPDATE SKIP LOCKED",
            crate::pg::NOW_MS
        );
        assert_eq!(&*pg.spell(sql), want);
        assert_eq!(&*pg.spell(sql), want, "from the cache");
        let lite = Dialect::sqlite(&[("jobs", "jobs")]);
        let want = format!("SELECT 1 FROM jobs WHERE a = ?1 AND b <= {SQLITE_NOW} ");
        assert_eq!(&*lite.spell(sql), want);
    }
}
