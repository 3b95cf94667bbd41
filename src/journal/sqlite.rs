//! The journal's rows in `WORKSPACE/.vikingfs/ops.db` (SQLite, WAL): the default engine. Its
//! statements are [`super::rules`]' (the same for every database); here are the connection and
//! the schema.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};

use super::rules::{journal_err, Backend};
use super::Result;
use crate::sql::{Dialect, Lite, Sql};

/// The journal's spelling on SQLite: one connection, one writer at a time.
static DIALECT: Dialect = Dialect::sqlite(&[
    ("intents", "intents"),
    ("lifecycles", "lifecycles"),
    ("keys", "lifecycle_keys"),
    ("history", "history"),
]);

pub struct SqliteJournal {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl SqliteJournal {
    pub fn open(path: &Path) -> Result<SqliteJournal> {
        let how = crate::db::Open::default();
        let conn = crate::db::open(path, how)?;
        // A first schema write may meet another process's and be answered busy at once.
        crate::db::retry_busy(how.busy_timeout, || {
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS intents (
                     id INTEGER PRIMARY KEY, body TEXT NOT NULL, owner TEXT NOT NULL,
                     created INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS lifecycles (
                     handle TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL,
                     created INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS lifecycle_keys (
                     handle TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (handle, key))
                     WITHOUT ROWID;
                 CREATE TABLE IF NOT EXISTS history (
                     id INTEGER PRIMARY KEY, created INTEGER NOT NULL, op TEXT NOT NULL,
                     path TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL,
                     blob TEXT, reason TEXT, mode INTEGER NOT NULL, uid INTEGER NOT NULL,
                     gid INTEGER NOT NULL, pid INTEGER, cmd TEXT, new_path TEXT,
                     born INTEGER, sha256 TEXT);
                 CREATE INDEX IF NOT EXISTS history_path ON history (path);",
            )?;
            // A history made before entries had hashes gets the column.
            if conn.prepare("SELECT sha256 FROM history LIMIT 0").is_err() {
                conn.execute_batch("ALTER TABLE history ADD COLUMN sha256 TEXT")?;
            }
            Ok(())
        })?;
        Ok(SqliteJournal {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn tx<T>(
        &self,
        how: TransactionBehavior,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T> {
        let mut c = self.conn.lock();
        let tx = c.transaction_with_behavior(how)?;
        let out = f(&mut Lite {
            conn: &tx,
            dialect: &DIALECT,
        })
        .map_err(|e| journal_err(None, e))?;
        tx.commit()?;
        Ok(out)
    }
}

impl Backend for SqliteJournal {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn each<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        f(&mut Lite {
            conn: &self.conn.lock(),
            dialect: &DIALECT,
        })
        .map_err(|e| journal_err(None, e))
    }

    /// `BEGIN IMMEDIATE`: the write lock up front, so two processes never deadlock upgrading
    /// a read to a write.
    fn write<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        self.tx(TransactionBehavior::Immediate, f)
    }

    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        self.tx(TransactionBehavior::Deferred, f)
    }
}
