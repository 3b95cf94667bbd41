//! The journal's statements, written once for every SQL database ([`crate::sql`]): an engine
//! ([`super::sqlite`], [`super::postgres`]) only opens its connections and names its
//! [`Dialect`](crate::sql::Dialect). Instants are the store's clock (`{now}`: this host's for
//! SQLite, the server's for PostgreSQL), and ages are taken on the same clock.

use std::time::Duration;

use super::history::{self, Entry, Recorded};
use super::{Engine, IntentData, JournalError, JournalRows, LifecycleData, LifecycleRow, Result};
use crate::sql::{ms, Row, Sql, Val};

/// How a database keeps the journal's rows.
pub(crate) trait Backend: Send + Sync {
    /// Where the rows live, for messages.
    fn location(&self) -> String;
    /// Run `f`'s statements each on its own (one statement needs no transaction).
    fn each<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T>;
    /// Run `f` as one write transaction.
    fn write<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T>;
    /// Run `f`'s reads from one snapshot.
    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T>;
}

/// Open a lifecycle (kept when it is open already): `?1` handle, `?2` target, `?3` kind,
/// `?4` its age in ms.
const OPEN_LIFECYCLE: &str = "INSERT INTO {lifecycles} (handle, target, kind, created)
     VALUES (?1, ?2, ?3, {now} - ?4) ON CONFLICT (handle) DO NOTHING";

/// Record an intent: `?1` body, `?2` owner, `?3` its age in ms; returns its id.
const INSERT_INTENT: &str =
    "INSERT INTO {intents} (body, owner, created) VALUES (?1, ?2, {now} - ?3)";

/// Add a key to a lifecycle (kept if it is there).
const ADD_KEY: &str =
    "INSERT INTO {keys} (handle, key) VALUES (?1, ?2) ON CONFLICT (handle, key) DO NOTHING";

/// Keys added by one statement (a resource of many files has many keys: one round trip per
/// this many, on a server).
const KEYS_AT_ONCE: usize = 64;

/// Add `keys` to lifecycle `handle` (those there already are kept).
fn add_keys(s: &mut dyn Sql, handle: &str, keys: &[String]) -> crate::sql::Result<()> {
    for chunk in keys.chunks(KEYS_AT_ONCE) {
        if chunk.len() < KEYS_AT_ONCE {
            for k in chunk {
                s.exec(ADD_KEY, &[handle.into(), k.into()])?;
            }
            continue;
        }
        let rows: Vec<String> = (0..chunk.len())
            .map(|i| format!("(?1, ?{})", i + 2))
            .collect();
        let sql = format!(
            "INSERT INTO {{keys}} (handle, key) VALUES {} ON CONFLICT (handle, key) DO NOTHING",
            rows.join(", ")
        );
        let params: Vec<Val<'_>> = std::iter::once(handle.into())
            .chain(chunk.iter().map(Val::from))
            .collect();
        s.exec(&sql, &params)?;
    }
    Ok(())
}

fn age(r: &Row, i: usize) -> Duration {
    Duration::from_millis(r.int(i).max(0) as u64)
}

fn intents(s: &mut dyn Sql) -> crate::sql::Result<Vec<IntentData>> {
    Ok(s.rows(
        "SELECT id, body, owner, {now} - created FROM {intents} ORDER BY id",
        &[],
    )?
    .into_iter()
    .map(|r| IntentData {
        id: r.int(0),
        body: r.text(1),
        owner: r.text(2),
        age: age(&r, 3),
    })
    .collect())
}

fn insert_intent(s: &mut dyn Sql, body: &str, owner: &str, age: i64) -> crate::sql::Result<i64> {
    s.insert(INSERT_INTENT, &[body.into(), owner.into(), age.into()])
}

impl<B: Backend> Engine for B {
    fn location(&self) -> String {
        Backend::location(self)
    }

    fn begin(&self, body: &str, owner: &str) -> Result<i64> {
        self.each(|s| insert_intent(s, body, owner, 0))
    }

    fn begin_with_lifecycle(
        &self,
        body: &str,
        owner: &str,
        handle: &str,
        target: &str,
        kind: &str,
    ) -> Result<i64> {
        self.write(|s| {
            s.exec(
                OPEN_LIFECYCLE,
                &[handle.into(), target.into(), kind.into(), 0i64.into()],
            )?;
            insert_intent(s, body, owner, 0)
        })
    }

    fn claim(&self, id: i64, from: &str, me: &str) -> Result<bool> {
        self.each(|s| {
            Ok(s.exec(
                "UPDATE {intents} SET owner = ?3 WHERE id = ?1 AND owner = ?2",
                &[id.into(), from.into(), me.into()],
            )? == 1)
        })
    }

    fn finish(&self, ids: &[i64]) -> Result<()> {
        let close = |s: &mut dyn Sql| {
            for id in ids {
                s.exec("DELETE FROM {intents} WHERE id = ?1", &[(*id).into()])?;
            }
            Ok(())
        };
        match ids {
            [_] => self.each(close),
            _ => self.write(close),
        }
    }

    fn finish_recording(&self, ids: &[i64], entries: &[Entry]) -> Result<()> {
        self.write(|s| {
            for id in ids {
                s.exec("DELETE FROM {intents} WHERE id = ?1", &[(*id).into()])?;
            }
            for e in entries {
                history::insert(s, e)?;
            }
            Ok(())
        })
    }

    fn history(&self, under: Option<&str>, since_ms: i64) -> Result<Vec<Recorded>> {
        self.each(|s| history::list(s, under, since_ms))
    }

    fn record(&self, entries: &[Entry]) -> Result<()> {
        self.write(|s| {
            for e in entries {
                history::insert(s, e)?;
            }
            Ok(())
        })
    }

    fn forget_history(&self, ids: &[i64]) -> Result<()> {
        self.write(|s| history::forget(s, ids))
    }

    fn unhashed(&self, limit: usize) -> Result<Vec<(i64, String)>> {
        self.each(|s| history::unhashed(s, limit))
    }

    fn set_hashes(&self, hashes: &[(i64, String)]) -> Result<()> {
        self.write(|s| history::set_hashes(s, hashes))
    }

    fn set_hash_failures(&self, failures: &[(i64, String)]) -> Result<()> {
        self.write(|s| history::set_hash_failures(s, failures))
    }

    fn intents(&self) -> Result<Vec<IntentData>> {
        self.each(intents)
    }

    fn lifecycle_start(
        &self,
        handle: &str,
        target: &str,
        kind: &str,
        keys: &[String],
    ) -> Result<()> {
        self.write(|s| {
            s.exec(
                OPEN_LIFECYCLE,
                &[handle.into(), target.into(), kind.into(), 0i64.into()],
            )?;
            add_keys(s, handle, keys)
        })
    }

    fn lifecycle_add_key(&self, handle: &str, key: &str) -> Result<bool> {
        self.write(|s| {
            // The lifecycle's row locked: an end racing this add waits, then finds the key.
            let live = s
                .opt(
                    "SELECT 1 FROM {lifecycles} WHERE handle = ?1 {for_share}",
                    &[handle.into()],
                )?
                .is_some();
            if live {
                s.exec(ADD_KEY, &[handle.into(), key.into()])?;
            }
            Ok(live)
        })
    }

    fn lifecycle_done_key(&self, handle: &str, key: &str) -> Result<u64> {
        self.each(|s| {
            s.exec(
                "DELETE FROM {keys} WHERE handle = ?1 AND key = ?2",
                &[handle.into(), key.into()],
            )?;
            Ok(s.opt(
                "SELECT COUNT(*) FROM {keys} WHERE handle = ?1",
                &[handle.into()],
            )?
            .map_or(0, |r| r.int(0)) as u64)
        })
    }

    fn lifecycles(&self) -> Result<Vec<LifecycleData>> {
        self.each(|s| {
            Ok(s.rows(
                "SELECT l.handle, l.target, l.kind, {now} - l.created,
                        (SELECT COUNT(*) FROM {keys} k WHERE k.handle = l.handle)
                 FROM {lifecycles} l ORDER BY l.created",
                &[],
            )?
            .into_iter()
            .map(|r| LifecycleData {
                handle: r.text(0),
                target: r.text(1),
                kind: r.text(2),
                age: age(&r, 3),
                pending: r.int(4) as u64,
            })
            .collect())
        })
    }

    fn lifecycle_end(&self, handle: &str) -> Result<()> {
        self.write(|s| {
            s.exec("DELETE FROM {keys} WHERE handle = ?1", &[handle.into()])?;
            s.exec(
                "DELETE FROM {lifecycles} WHERE handle = ?1",
                &[handle.into()],
            )?;
            Ok(())
        })
    }

    fn lifecycle_of_target(&self, target: &str) -> Result<Option<String>> {
        self.each(|s| {
            Ok(s.opt(
                "SELECT handle FROM {lifecycles} WHERE target = ?1 LIMIT 1",
                &[target.into()],
            )?
            .map(|r| r.text(0)))
        })
    }

    fn export(&self) -> Result<JournalRows> {
        self.snapshot(|s| {
            let intents = intents(s)?;
            let mut lifecycles: Vec<LifecycleRow> = s
                .rows(
                    "SELECT handle, target, kind, {now} - created FROM {lifecycles}
                     ORDER BY created, handle",
                    &[],
                )?
                .into_iter()
                .map(|r| LifecycleRow {
                    handle: r.text(0),
                    target: r.text(1),
                    kind: r.text(2),
                    age: age(&r, 3),
                    keys: Vec::new(),
                })
                .collect();
            for l in &mut lifecycles {
                l.keys = s
                    .rows(
                        "SELECT key FROM {keys} WHERE handle = ?1 ORDER BY key",
                        &[l.handle.as_str().into()],
                    )?
                    .into_iter()
                    .map(|r| r.text(0))
                    .collect();
            }
            let mut history = history::list(s, None, i64::MIN)?;
            history.reverse(); // oldest first
            Ok(JournalRows {
                intents,
                lifecycles,
                history,
            })
        })
    }

    fn import(&self, rows: &JournalRows) -> Result<()> {
        self.write(|s| {
            for i in &rows.intents {
                insert_intent(s, &i.body, &i.owner, ms(i.age))?;
            }
            for l in &rows.lifecycles {
                s.exec(
                    OPEN_LIFECYCLE,
                    &[
                        l.handle.as_str().into(),
                        l.target.as_str().into(),
                        l.kind.as_str().into(),
                        ms(l.age).into(),
                    ],
                )?;
                add_keys(s, &l.handle, &l.keys)?;
            }
            for r in &rows.history {
                history::insert_recorded(s, r)?;
            }
            Ok(())
        })
    }

    fn clear(&self) -> Result<()> {
        self.write(|s| {
            for t in ["{intents}", "{lifecycles}", "{keys}", "{history}"] {
                s.exec(&format!("DELETE FROM {t}"), &[])?;
            }
            Ok(())
        })
    }
}

/// A store's error as the journal names it.
pub(crate) fn journal_err(pg: Option<&crate::pg::Pg>, e: crate::sql::Error) -> JournalError {
    match (e, pg) {
        (crate::sql::Error::Pg(e), Some(pg)) => JournalError::Pg(pg.err(e)),
        (crate::sql::Error::Pg(e), None) => {
            unreachable!("a PostgreSQL error without a server: {e}")
        }
        (crate::sql::Error::Sqlite(e), _) => JournalError::Sqlite(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifecycle_of_many_keys_keeps_each_once() {
        let d = tempfile::tempdir().unwrap();
        let j = super::super::sqlite::SqliteJournal::open(&d.path().join("ops.db")).unwrap();
        let keys: Vec<String> = (0..KEYS_AT_ONCE * 2 + 5).map(|i| format!("k{i}")).collect();
        j.lifecycle_start("h", "t", "tree", &keys).unwrap();
        j.lifecycle_start("h", "t", "tree", &keys[..KEYS_AT_ONCE])
            .unwrap();
        let l = j.lifecycles().unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].pending, keys.len() as u64);
        assert_eq!(
            j.lifecycle_done_key("h", "k0").unwrap(),
            keys.len() as u64 - 1
        );
        let rows = j.export().unwrap();
        assert_eq!(rows.lifecycles[0].keys.len(), keys.len() - 1);
    }
}
