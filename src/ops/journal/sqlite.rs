//! The journal's rows in `WORKSPACE/.vikingfs/ops.db` (SQLite, WAL): the default engine.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};

use super::{Engine, IntentData, JournalRows, LifecycleData, LifecycleRow, Result};

/// Open a lifecycle (kept when it is open already).
const OPEN_LIFECYCLE: &str =
    "INSERT OR IGNORE INTO lifecycles (handle, target, kind, created) VALUES (?1, ?2, ?3, ?4)";

pub struct SqliteJournal {
    path: PathBuf,
    conn: Mutex<Connection>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn age(now: i64, then: i64) -> Duration {
    Duration::from_millis((now - then).max(0) as u64)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl SqliteJournal {
    pub fn open(path: &Path) -> Result<SqliteJournal> {
        let conn = crate::db::open(path, crate::db::Open::default())?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS intents (
                 id INTEGER PRIMARY KEY, body TEXT NOT NULL, owner TEXT NOT NULL,
                 created INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS lifecycles (
                 handle TEXT PRIMARY KEY, target TEXT NOT NULL, kind TEXT NOT NULL,
                 created INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS lifecycle_keys (
                 handle TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (handle, key))
                 WITHOUT ROWID;",
        )?;
        Ok(SqliteJournal {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }
}

impl Engine for SqliteJournal {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn begin(&self, body: &str, owner: &str) -> Result<i64> {
        let c = self.conn.lock();
        c.prepare_cached("INSERT INTO intents (body, owner, created) VALUES (?1, ?2, ?3)")?
            .execute(params![body, owner, now_ms()])?;
        Ok(c.last_insert_rowid())
    }

    fn begin_with_lifecycle(
        &self,
        body: &str,
        owner: &str,
        handle: &str,
        target: &str,
        kind: &str,
    ) -> Result<i64> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute(OPEN_LIFECYCLE, params![handle, target, kind, now_ms()])?;
        tx.execute(
            "INSERT INTO intents (body, owner, created) VALUES (?1, ?2, ?3)",
            params![body, owner, now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    fn claim(&self, id: i64, from: &str, me: &str) -> Result<bool> {
        let n = self
            .conn
            .lock()
            .prepare_cached("UPDATE intents SET owner = ?3 WHERE id = ?1 AND owner = ?2")?
            .execute(params![id, from, me])?;
        Ok(n == 1)
    }

    fn finish(&self, id: i64) -> Result<()> {
        self.conn
            .lock()
            .prepare_cached("DELETE FROM intents WHERE id = ?1")?
            .execute([id])?;
        Ok(())
    }

    fn intents(&self) -> Result<Vec<IntentData>> {
        let c = self.conn.lock();
        let mut st =
            c.prepare_cached("SELECT id, body, owner, created FROM intents ORDER BY id")?;
        let now = now_ms();
        let rows = st.query_map([], |r| {
            Ok(IntentData {
                id: r.get(0)?,
                body: r.get(1)?,
                owner: r.get(2)?,
                age: age(now, r.get(3)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn lifecycle_start(
        &self,
        handle: &str,
        target: &str,
        kind: &str,
        keys: &[String],
    ) -> Result<()> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute(OPEN_LIFECYCLE, params![handle, target, kind, now_ms()])?;
        {
            let mut st = tx.prepare_cached(
                "INSERT OR IGNORE INTO lifecycle_keys (handle, key) VALUES (?1, ?2)",
            )?;
            for k in keys {
                st.execute(params![handle, k])?;
            }
        }
        Ok(tx.commit()?)
    }

    fn lifecycle_add_key(&self, handle: &str, key: &str) -> Result<bool> {
        let c = self.conn.lock();
        let n = c
            .prepare_cached(
                "INSERT OR IGNORE INTO lifecycle_keys (handle, key)
                 SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM lifecycles WHERE handle = ?1)",
            )?
            .execute(params![handle, key])?;
        Ok(n > 0
            || c.query_row(
                "SELECT EXISTS(SELECT 1 FROM lifecycles WHERE handle = ?1)",
                [handle],
                |r| r.get(0),
            )?)
    }

    fn lifecycle_done_key(&self, handle: &str, key: &str) -> Result<u64> {
        let c = self.conn.lock();
        c.prepare_cached("DELETE FROM lifecycle_keys WHERE handle = ?1 AND key = ?2")?
            .execute(params![handle, key])?;
        let n: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM lifecycle_keys WHERE handle = ?1")?
            .query_row([handle], |r| r.get(0))?;
        Ok(n as u64)
    }

    fn lifecycles(&self) -> Result<Vec<LifecycleData>> {
        let c = self.conn.lock();
        let mut st = c.prepare_cached(
            "SELECT l.handle, l.target, l.kind, l.created,
                    (SELECT COUNT(*) FROM lifecycle_keys k WHERE k.handle = l.handle)
             FROM lifecycles l ORDER BY l.created",
        )?;
        let now = now_ms();
        let rows = st.query_map([], |r| {
            Ok(LifecycleData {
                handle: r.get(0)?,
                target: r.get(1)?,
                kind: r.get(2)?,
                age: age(now, r.get(3)?),
                pending: r.get::<_, i64>(4)? as u64,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn lifecycle_end(&self, handle: &str) -> Result<()> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute("DELETE FROM lifecycle_keys WHERE handle = ?1", [handle])?;
        tx.execute("DELETE FROM lifecycles WHERE handle = ?1", [handle])?;
        Ok(tx.commit()?)
    }

    fn lifecycle_of_target(&self, target: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .lock()
            .query_row(
                "SELECT handle FROM lifecycles WHERE target = ?1",
                [target],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn export(&self) -> Result<JournalRows> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        let now = now_ms();
        let intents = tx
            .prepare("SELECT id, body, owner, created FROM intents ORDER BY id")?
            .query_map([], |r| {
                Ok(IntentData {
                    id: r.get(0)?,
                    body: r.get(1)?,
                    owner: r.get(2)?,
                    age: age(now, r.get(3)?),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut lifecycles: Vec<LifecycleRow> = tx
            .prepare(
                "SELECT handle, target, kind, created FROM lifecycles ORDER BY created, handle",
            )?
            .query_map([], |r| {
                Ok(LifecycleRow {
                    handle: r.get(0)?,
                    target: r.get(1)?,
                    kind: r.get(2)?,
                    age: age(now, r.get(3)?),
                    keys: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut keys =
            tx.prepare("SELECT key FROM lifecycle_keys WHERE handle = ?1 ORDER BY key")?;
        for l in &mut lifecycles {
            l.keys = keys
                .query_map([&l.handle], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
        }
        Ok(JournalRows {
            intents,
            lifecycles,
        })
    }

    fn import(&self, rows: &JournalRows) -> Result<()> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        let now = now_ms();
        for i in &rows.intents {
            tx.execute(
                "INSERT INTO intents (body, owner, created) VALUES (?1, ?2, ?3)",
                params![i.body, i.owner, now - ms(i.age)],
            )?;
        }
        for l in &rows.lifecycles {
            tx.execute(
                OPEN_LIFECYCLE,
                params![l.handle, l.target, l.kind, now - ms(l.age)],
            )?;
            for k in &l.keys {
                tx.execute(
                    "INSERT OR IGNORE INTO lifecycle_keys (handle, key) VALUES (?1, ?2)",
                    params![l.handle, k],
                )?;
            }
        }
        Ok(tx.commit()?)
    }

    fn clear(&self) -> Result<()> {
        Ok(self.conn.lock().execute_batch(
            "DELETE FROM intents; DELETE FROM lifecycles; DELETE FROM lifecycle_keys;",
        )?)
    }
}
