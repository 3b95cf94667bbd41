//! The queue's rows in one SQLite database (`WORKSPACE/.vikingfs/queue.db`): the default
//! [`Engine`](super::engine::Engine), each state change one `BEGIN IMMEDIATE` transaction.
//!
//! Its rules are [`super::rules`]' (the same for every database); here are the connections,
//! the transactions and the schema. Ids are AUTOINCREMENT, never reused; `key_versions` keeps
//! each key's version while a row of the key exists.
//!
//! Durability: WAL with `synchronous=NORMAL`. A committed enqueue survives a crash of any
//! process (it is in the WAL); only an OS crash or power loss may drop the last few commits,
//! as WAL mode documents. That trade keeps enqueue at tens of microseconds, cheap enough for
//! the FUSE write path.

mod schema;

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};

use super::rules::Backend;
use super::QueueError;
use crate::sql::{Dialect, Lite, Sql};

/// The queue's spelling on SQLite: its one write transaction at a time needs no row locks.
static DIALECT: Dialect = Dialect::sqlite(&[("jobs", "jobs"), ("keys", "key_versions")]);
/// Connections kept open for reuse (more may be open while busy).
const MAX_IDLE_CONNECTIONS: usize = 8;

/// The queue database at one path; shareable between threads.
pub struct SqliteEngine {
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Held around every write transaction of this process. SQLite makes a second writer
    /// wait in its busy handler, which sleeps 1, 2, 5… ms between tries: a FUSE create that
    /// met a worker's commit would stall a millisecond or more. Writers of one process queue
    /// here instead and are woken the moment the previous commit is done; the busy handler
    /// is left to arbitrate between processes.
    writer: Mutex<()>,
}

/// A pooled connection, handed back on drop.
struct PooledConn<'a> {
    engine: &'a SqliteEngine,
    conn: Option<Connection>,
}

impl std::ops::Deref for PooledConn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let mut idle = self.engine.idle.lock();
            if idle.len() < MAX_IDLE_CONNECTIONS {
                idle.push(c);
            }
        }
    }
}

impl SqliteEngine {
    /// Open (creating and migrating when needed) the queue database at `path`.
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<SqliteEngine, QueueError> {
        let open_err = |source| QueueError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut conn = schema::open_connection(path, busy_timeout).map_err(open_err)?;
        schema::migrate(&mut conn, path).map_err(|e| match e {
            QueueError::Sql(source) => open_err(source),
            other => other,
        })?;
        Ok(SqliteEngine {
            path: path.to_path_buf(),
            busy_timeout,
            idle: Mutex::new(vec![conn]),
            writer: Mutex::new(()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> Result<PooledConn<'_>, QueueError> {
        let cached = self.idle.lock().pop();
        let conn = match cached {
            Some(c) => c,
            None => schema::open_connection(&self.path, self.busy_timeout)?,
        };
        Ok(PooledConn {
            engine: self,
            conn: Some(conn),
        })
    }
}

impl Backend for SqliteEngine {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    /// One `BEGIN IMMEDIATE` transaction (taking the write lock up front, so two processes
    /// never deadlock upgrading a read to a write).
    fn write<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let mut conn = self.conn()?;
        let _writer = self.writer.lock();
        let conn = conn.conn.as_mut().expect("connection present until drop");
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&mut Lite {
            conn: &tx,
            dialect: &DIALECT,
        })
        .map_err(sqlite_err)?;
        tx.commit()?;
        Ok(out)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let conn = self.conn()?;
        f(&mut Lite {
            conn: &conn,
            dialect: &DIALECT,
        })
        .map_err(sqlite_err)
    }
}

fn sqlite_err(e: crate::sql::Error) -> QueueError {
    match e {
        crate::sql::Error::Sqlite(e) => QueueError::Sql(e),
        crate::sql::Error::Pg(e) => unreachable!("a PostgreSQL error from SQLite: {e}"),
    }
}
