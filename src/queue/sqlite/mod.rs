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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};

use super::engine::Heal;
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
    /// Bumped each time the file is set aside and started anew: a connection of an earlier
    /// generation is on the damaged file, so it never goes back to `idle` and its failure
    /// heals nothing more.
    generation: AtomicU64,
    /// Set by [`super::engine::Engine::heal_in_place`]: called after each heal.
    healed: OnceLock<Box<dyn Fn() + Send + Sync>>,
    last_heal: Mutex<Option<Heal>>,
}

/// A pooled connection, handed back on drop.
struct PooledConn<'a> {
    engine: &'a SqliteEngine,
    conn: Option<Connection>,
    generation: u64,
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
            let current = self.engine.generation.load(Ordering::Acquire) == self.generation;
            if current && idle.len() < MAX_IDLE_CONNECTIONS {
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
        let conn = open_checked(path, busy_timeout).map_err(|e| match e {
            QueueError::Sql(source) => open_err(source),
            other => other,
        })?;
        Ok(SqliteEngine {
            path: path.to_path_buf(),
            busy_timeout,
            idle: Mutex::new(vec![conn]),
            writer: Mutex::new(()),
            generation: AtomicU64::new(0),
            healed: OnceLock::new(),
            last_heal: Mutex::new(None),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> Result<PooledConn<'_>, QueueError> {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = self.idle.lock().pop();
        let conn = match cached {
            Some(c) => c,
            None => schema::open_connection(&self.path, self.busy_timeout)?,
        };
        Ok(PooledConn {
            engine: self,
            conn: Some(conn),
            generation,
        })
    }

    /// After `e`, met on a connection of `generation`: if it says a page is damaged and this
    /// process heals in place, set the file aside and start a new one (once, however many
    /// threads met the damage), then say so to whoever derives the jobs again.
    fn heal(&self, generation: u64, e: &QueueError) {
        let (QueueError::Sql(source) | QueueError::Open { source, .. }) = e else {
            return;
        };
        let Some(healed) = self.healed.get() else {
            return;
        };
        if !crate::db::is_damage_code(source) {
            return;
        }
        // No write transaction of this process runs while the file moves.
        let _writer = self.writer.lock();
        if self.generation.load(Ordering::Acquire) != generation {
            return; // another thread healed it already
        }
        self.idle.lock().clear();
        let aside = match crate::db::move_aside(&self.path) {
            Ok(a) => a,
            Err(io) => {
                tracing::error!(
                    "queue {} is damaged ({source}) and could not be moved aside: {io}; \
                     restart the daemon",
                    self.path.display()
                );
                return;
            }
        };
        self.generation.fetch_add(1, Ordering::AcqRel);
        let why = source.to_string();
        crate::db::said_set_aside("queue", &self.path, &aside, &why);
        match open_checked(&self.path, self.busy_timeout) {
            Ok(conn) => self.idle.lock().push(conn),
            Err(e) => tracing::error!(
                "queue {}: a new database could not be started: {}; restart the daemon",
                self.path.display(),
                crate::error::Chain(&e)
            ),
        }
        *self.last_heal.lock() = Some(Heal {
            why,
            aside,
            at: std::time::SystemTime::now(),
        });
        healed();
    }
}

/// A connection to the queue database at `path`, its pages checked (`PRAGMA quick_check`: a
/// file whose header is whole may still have damaged pages, which SQLite would meet only at
/// the statement that reads them) and its schema brought up to date.
fn open_checked(path: &Path, busy_timeout: Duration) -> Result<Connection, QueueError> {
    let mut conn = schema::open_connection(path, busy_timeout)?;
    crate::db::check_pages(&conn)?;
    schema::migrate(&mut conn, path)?;
    Ok(conn)
}

impl Backend for SqliteEngine {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn heal_in_place(&self, healed: Box<dyn Fn() + Send + Sync>) {
        let _ = self.healed.set(healed);
    }

    fn last_heal(&self) -> Option<Heal> {
        self.last_heal.lock().clone()
    }

    /// One `BEGIN IMMEDIATE` transaction (taking the write lock up front, so two processes
    /// never deadlock upgrading a read to a write).
    fn write<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut conn = self.conn().inspect_err(|e| self.heal(generation, e))?;
        let generation = conn.generation;
        let out = {
            let _writer = self.writer.lock();
            let conn = conn.conn.as_mut().expect("connection present until drop");
            (|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let out = f(&mut Lite {
                    conn: &tx,
                    dialect: &DIALECT,
                })
                .map_err(sqlite_err)?;
                tx.commit()?;
                Ok(out)
            })()
        };
        drop(conn);
        if let Err(e) = &out {
            self.heal(generation, e);
        }
        out
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let generation = self.generation.load(Ordering::Acquire);
        let conn = self.conn().inspect_err(|e| self.heal(generation, e))?;
        let generation = conn.generation;
        let out = f(&mut Lite {
            conn: &conn,
            dialect: &DIALECT,
        })
        .map_err(sqlite_err);
        drop(conn);
        if let Err(e) = &out {
            self.heal(generation, e);
        }
        out
    }
}

fn sqlite_err(e: crate::sql::Error) -> QueueError {
    match e {
        crate::sql::Error::Sqlite(e) => QueueError::Sql(e),
        crate::sql::Error::Pg(e) => unreachable!("a PostgreSQL error from SQLite: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;
    use crate::queue::engine::Engine;
    use crate::queue::NewJob;

    /// Everything past the first page of `db` and every frame of its WAL overwritten.
    fn damage(db: &Path) {
        let wal = PathBuf::from(format!("{}-wal", db.display()));
        for (f, from) in [(db.to_path_buf(), 4096), (wal, 32)] {
            let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
            let len = file.metadata().unwrap().len();
            if len > from {
                file.write_all_at(&vec![0x5a; (len - from) as usize], from)
                    .unwrap();
            }
        }
    }

    fn jobs(n: usize) -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob::new("q", Some(format!("k{i}")), serde_json::json!(i)))
            .collect()
    }

    /// Damage met by several threads at once is healed once: the file goes aside, a new
    /// one takes every later statement, and the caller hears of it once. Without a healer
    /// the damage stays an error.
    #[test]
    fn damage_met_while_open_is_healed_once_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("queue.db");
        let e = SqliteEngine::open(&db, Duration::from_secs(5)).unwrap();
        let delay = Duration::ZERO;
        e.enqueue(&jobs(500), delay).unwrap();
        damage(&db);
        // Each connection trusts the pages it cached: new ones meet the damage.
        let fresh = |e: &SqliteEngine| e.idle.lock().clear();
        assert!(
            SqliteEngine::open(&db, delay).is_err(),
            "the page check at open"
        );
        fresh(&e);
        assert!(e.stats(1).is_err(), "no healer: the damage is an error");
        assert!(Backend::last_heal(&e).is_none());
        let heals = Arc::new(AtomicUsize::new(0));
        let h = heals.clone();
        Backend::heal_in_place(
            &e,
            Box::new(move || {
                h.fetch_add(1, Ordering::SeqCst);
            }),
        );
        fresh(&e);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| drop(e.stats(1)));
            }
        });
        assert_eq!(heals.load(Ordering::SeqCst), 1);
        let heal = Backend::last_heal(&e).unwrap();
        assert!(heal.aside.exists(), "{heal:?}");
        e.enqueue(&jobs(3), delay).unwrap();
        assert_eq!(e.unfinished(None).unwrap(), 3);
        // A fresh open of the new file passes the page check.
        drop(SqliteEngine::open(&db, delay).unwrap());
    }
}
