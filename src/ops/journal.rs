//! The operations journal (`WORKSPACE/.vikingfs/ops.db`, SQLite WAL): what a process was in the
//! middle of, so that another one can finish it after a crash.
//!
//! - *intents*: an rm, mv or add that took its locks and has not finished. Written after the
//!   locks are held and removed before they are released, so while its process lives an
//!   intent's paths are locked, and once it died [`super::Ops::recover`] can take the same locks
//!   and finish the operation forward.
//! - *lifecycles*: an added resource whose TREE lock must be held until every summary and
//!   embedding of it is done. The lock's owner is the lifecycle handle, not a process, so it
//!   outlives the CLI that added it; the keys of its outstanding jobs are listed here, and the job
//!   that finishes the last one releases the lock.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::lock::LockKind;
use crate::uri::VPath;

/// An operation in progress. Paths are namespace-relative (`VPath::as_str`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Intent {
    /// Index records of `path` are being deleted, then the file or tree.
    Rm { path: String, dir: bool },
    /// `src` is being renamed to `dst`, then its records.
    Mv { src: String, dst: String, dir: bool },
    /// The content staged in `temp` is being synced into `target` under lifecycle `handle`.
    Add {
        temp: PathBuf,
        target: String,
        handle: String,
        file: bool,
    },
}

impl Intent {
    pub fn describe(&self) -> String {
        match self {
            Intent::Rm { path, .. } => format!("rm viking://{path}"),
            Intent::Mv { src, dst, .. } => format!("mv viking://{src} viking://{dst}"),
            Intent::Add { temp, target, .. } => {
                format!("add {} -> viking://{target}", temp.display())
            }
        }
    }
}

/// An unfinished intent as stored.
#[derive(Debug, Clone)]
pub struct IntentRow {
    pub id: i64,
    pub intent: Intent,
    /// The process (lock-owner name) finishing it.
    pub owner: String,
    pub age: Duration,
}

/// A resource whose lifecycle lock is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    pub handle: String,
    pub target: VPath,
    pub kind: LockKind,
    pub age: Duration,
    /// Keys of jobs not done yet.
    pub pending: u64,
}

pub struct Journal {
    path: PathBuf,
    conn: Mutex<Connection>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Journal {
    pub fn open(path: &Path) -> rusqlite::Result<Journal> {
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
        Ok(Journal {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Record an intent of process `owner` (a lock-owner name, whose liveness can be checked);
    /// returns its id for [`finish`](Self::finish).
    pub fn begin(&self, intent: &Intent, owner: &str) -> rusqlite::Result<i64> {
        let body = serde_json::to_string(intent).expect("intent serialises");
        let c = self.conn.lock();
        c.prepare_cached("INSERT INTO intents (body, owner, created) VALUES (?1, ?2, ?3)")?
            .execute(params![body, owner, now_ms()])?;
        Ok(c.last_insert_rowid())
    }

    /// Record an add's intent and open its lifecycle in one transaction, so a crash leaves
    /// both or neither.
    pub fn begin_add(
        &self,
        intent: &Intent,
        owner: &str,
        target: &VPath,
        kind: LockKind,
    ) -> rusqlite::Result<i64> {
        let Intent::Add { handle, .. } = intent else {
            panic!("begin_add takes an add intent");
        };
        let body = serde_json::to_string(intent).expect("intent serialises");
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute(
            "INSERT OR IGNORE INTO lifecycles (handle, target, kind, created) VALUES (?1, ?2, ?3, ?4)",
            params![handle, target.as_str(), kind.as_str(), now_ms()],
        )?;
        tx.execute(
            "INSERT INTO intents (body, owner, created) VALUES (?1, ?2, ?3)",
            params![body, owner, now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    /// Take over intent `id` for `me` if its owner is `from` (compare-and-swap, so two
    /// recovering processes never both finish the same operation).
    pub fn claim(&self, id: i64, from: &str, me: &str) -> rusqlite::Result<bool> {
        let n = self
            .conn
            .lock()
            .prepare_cached("UPDATE intents SET owner = ?3 WHERE id = ?1 AND owner = ?2")?
            .execute(params![id, from, me])?;
        Ok(n == 1)
    }

    pub fn finish(&self, id: i64) -> rusqlite::Result<()> {
        self.conn
            .lock()
            .prepare_cached("DELETE FROM intents WHERE id = ?1")?
            .execute([id])?;
        Ok(())
    }

    /// Every unfinished intent, oldest first. Unreadable rows are skipped (logged): a newer
    /// vikingfs may have written them.
    pub fn intents(&self) -> rusqlite::Result<Vec<(i64, Intent, Duration)>> {
        Ok(self
            .intents_owned()?
            .into_iter()
            .map(|r| (r.id, r.intent, r.age))
            .collect())
    }

    /// [`intents`](Self::intents) with their owners.
    pub fn intents_owned(&self) -> rusqlite::Result<Vec<IntentRow>> {
        let c = self.conn.lock();
        let mut st =
            c.prepare_cached("SELECT id, body, owner, created FROM intents ORDER BY id")?;
        let now = now_ms();
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body, owner, created) = row?;
            match serde_json::from_str(&body) {
                Ok(intent) => out.push(IntentRow {
                    id,
                    intent,
                    owner,
                    age: Duration::from_millis((now - created).max(0) as u64),
                }),
                Err(e) => tracing::warn!(id, "unreadable intent {body:?}: {e}"),
            }
        }
        Ok(out)
    }

    /// Start (or, after a crash, re-start) a lifecycle with the keys of its jobs.
    pub fn lifecycle_start(
        &self,
        handle: &str,
        target: &VPath,
        kind: LockKind,
        keys: &[String],
    ) -> rusqlite::Result<()> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute(
            "INSERT OR IGNORE INTO lifecycles (handle, target, kind, created) VALUES (?1, ?2, ?3, ?4)",
            params![handle, target.as_str(), kind.as_str(), now_ms()],
        )?;
        {
            let mut st = tx.prepare_cached(
                "INSERT OR IGNORE INTO lifecycle_keys (handle, key) VALUES (?1, ?2)",
            )?;
            for k in keys {
                st.execute(params![handle, k])?;
            }
        }
        tx.commit()
    }

    /// Add a job key to a running lifecycle (a summary propagated inside the resource).
    /// Returns false when the lifecycle is over.
    pub fn lifecycle_add_key(&self, handle: &str, key: &str) -> rusqlite::Result<bool> {
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

    /// A job of the lifecycle is done; returns how many keys are still outstanding.
    pub fn lifecycle_done_key(&self, handle: &str, key: &str) -> rusqlite::Result<u64> {
        let c = self.conn.lock();
        c.prepare_cached("DELETE FROM lifecycle_keys WHERE handle = ?1 AND key = ?2")?
            .execute(params![handle, key])?;
        let n: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM lifecycle_keys WHERE handle = ?1")?
            .query_row([handle], |r| r.get(0))?;
        Ok(n as u64)
    }

    pub fn lifecycle(&self, handle: &str) -> rusqlite::Result<Option<Lifecycle>> {
        Ok(self.lifecycles()?.into_iter().find(|l| l.handle == handle))
    }

    /// Every lifecycle still open.
    pub fn lifecycles(&self) -> rusqlite::Result<Vec<Lifecycle>> {
        let c = self.conn.lock();
        let mut st = c.prepare_cached(
            "SELECT l.handle, l.target, l.kind, l.created,
                    (SELECT COUNT(*) FROM lifecycle_keys k WHERE k.handle = l.handle)
             FROM lifecycles l ORDER BY l.created",
        )?;
        let now = now_ms();
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (handle, target, kind, created, pending) = row?;
            let Ok(target) = VPath::from_rel(&target) else {
                continue;
            };
            out.push(Lifecycle {
                handle,
                target,
                kind: if kind == "tree" {
                    LockKind::Tree
                } else {
                    LockKind::Exact
                },
                age: Duration::from_millis((now - created).max(0) as u64),
                pending: pending as u64,
            });
        }
        Ok(out)
    }

    /// Forget a lifecycle (after its lock was released).
    pub fn lifecycle_end(&self, handle: &str) -> rusqlite::Result<()> {
        let mut c = self.conn.lock();
        let tx = c.transaction()?;
        tx.execute("DELETE FROM lifecycle_keys WHERE handle = ?1", [handle])?;
        tx.execute("DELETE FROM lifecycles WHERE handle = ?1", [handle])?;
        tx.commit()
    }

    /// The handle of the open lifecycle whose target is `target` itself, if any.
    pub fn lifecycle_of_target(&self, target: &VPath) -> rusqlite::Result<Option<String>> {
        self.conn
            .lock()
            .query_row(
                "SELECT handle FROM lifecycles WHERE target = ?1",
                [target.as_str()],
                |r| r.get(0),
            )
            .optional()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_and_lifecycles_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("ops.db")).unwrap();
        let i = Intent::Mv {
            src: "resources/a".into(),
            dst: "resources/b".into(),
            dir: true,
        };
        let id = j.begin(&i, "p1").unwrap();
        assert_eq!(j.intents().unwrap()[0].1, i);
        assert!(!j.claim(id, "p0", "p2").unwrap(), "wrong owner");
        assert!(j.claim(id, "p1", "p2").unwrap());
        assert_eq!(j.intents_owned().unwrap()[0].owner, "p2");
        j.finish(id).unwrap();
        assert!(j.intents().unwrap().is_empty());

        let t = VPath::from_rel("resources/r").unwrap();
        j.lifecycle_start("h1", &t, LockKind::Tree, &["a".into(), "b".into()])
            .unwrap();
        assert!(j.lifecycle_add_key("h1", "c").unwrap());
        assert!(!j.lifecycle_add_key("nope", "c").unwrap());
        assert_eq!(j.lifecycle_done_key("h1", "a").unwrap(), 2);
        assert_eq!(j.lifecycle_done_key("h1", "a").unwrap(), 2, "idempotent");
        assert_eq!(j.lifecycle("h1").unwrap().unwrap().pending, 2);
        assert_eq!(j.lifecycle_of_target(&t).unwrap().as_deref(), Some("h1"));
        j.lifecycle_end("h1").unwrap();
        assert!(j.lifecycles().unwrap().is_empty());
    }
}
