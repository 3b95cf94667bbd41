//! The journal's rows on the PostgreSQL server of `storage.backend = "postgres"`, beside the
//! queue: intents of every host, so a host can finish what a dead host's process left
//! half-done once that process's locks expire. Times are the server's clock.

use std::sync::Arc;
use std::time::Duration;

use super::{Engine, IntentData, JournalRows, LifecycleData, LifecycleRow, Result};
use crate::pg::{Pg, NOW_MS, NOW_SQL};

const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE vj_intents (
    id      bigserial PRIMARY KEY,
    body    text NOT NULL,
    owner   text NOT NULL,
    created bigint NOT NULL
);
CREATE TABLE vj_lifecycles (
    handle  text PRIMARY KEY,
    target  text NOT NULL,
    kind    text NOT NULL,
    created bigint NOT NULL
);
CREATE INDEX vj_lifecycles_target ON vj_lifecycles (target);
CREATE TABLE vj_lifecycle_keys (
    handle text NOT NULL,
    key    text NOT NULL,
    PRIMARY KEY (handle, key)
);";

/// Open a lifecycle (kept when it is open already): `$1` handle, `$2` target, `$3` kind.
fn open_lifecycle() -> String {
    format!(
        "INSERT INTO vj_lifecycles (handle, target, kind, created)
         VALUES ($1, $2, $3, {NOW_MS}) ON CONFLICT (handle) DO NOTHING"
    )
}

/// Record an intent: `$1` body, `$2` owner; returns its id.
fn insert_intent() -> String {
    format!("INSERT INTO vj_intents (body, owner, created) VALUES ($1, $2, {NOW_MS}) RETURNING id")
}

pub struct PgJournal {
    pg: Arc<Pg>,
}

/// Every intent, oldest first, with its age at `now` (the server's clock).
fn all_intents(
    c: &mut impl postgres::GenericClient,
    now: i64,
) -> std::result::Result<Vec<IntentData>, postgres::Error> {
    Ok(c.query(
        "SELECT id, body, owner, created FROM vj_intents ORDER BY id",
        &[],
    )?
    .iter()
    .map(|r| IntentData {
        id: r.get(0),
        body: r.get(1),
        owner: r.get(2),
        age: age(now, r.get(3)),
    })
    .collect())
}

fn age(now: i64, then: i64) -> Duration {
    Duration::from_millis((now - then).max(0) as u64)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl PgJournal {
    /// The journal's tables on `pg`, created when missing.
    pub fn open(pg: Arc<Pg>) -> Result<PgJournal> {
        pg.migrate("journal", SCHEMA_VERSION, SCHEMA)?;
        Ok(PgJournal { pg })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut c = self.pg.get()?;
        Ok(f(&mut c).map_err(|e| self.pg.err(e))?)
    }
}

impl Engine for PgJournal {
    fn location(&self) -> String {
        format!("PostgreSQL {}", self.pg.location())
    }

    fn begin(&self, body: &str, owner: &str) -> Result<i64> {
        self.with(|c| Ok(c.query_one(&insert_intent(), &[&body, &owner])?.get(0)))
    }

    fn begin_with_lifecycle(
        &self,
        body: &str,
        owner: &str,
        handle: &str,
        target: &str,
        kind: &str,
    ) -> Result<i64> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute(&open_lifecycle(), &[&handle, &target, &kind])?;
            let id: i64 = tx.query_one(&insert_intent(), &[&body, &owner])?.get(0);
            tx.commit()?;
            Ok(id)
        })
    }

    fn claim(&self, id: i64, from: &str, me: &str) -> Result<bool> {
        self.with(|c| {
            Ok(c.execute(
                "UPDATE vj_intents SET owner = $3 WHERE id = $1 AND owner = $2",
                &[&id, &from, &me],
            )? == 1)
        })
    }

    fn finish(&self, id: i64) -> Result<()> {
        self.with(|c| {
            c.execute("DELETE FROM vj_intents WHERE id = $1", &[&id])?;
            Ok(())
        })
    }

    fn intents(&self) -> Result<Vec<IntentData>> {
        self.with(|c| {
            let now: i64 = c.query_one(NOW_SQL, &[])?.get(0);
            all_intents(c, now)
        })
    }

    fn lifecycle_start(
        &self,
        handle: &str,
        target: &str,
        kind: &str,
        keys: &[String],
    ) -> Result<()> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute(&open_lifecycle(), &[&handle, &target, &kind])?;
            tx.execute(
                "INSERT INTO vj_lifecycle_keys (handle, key) SELECT $1, unnest($2::text[])
                 ON CONFLICT DO NOTHING",
                &[&handle, &keys],
            )?;
            tx.commit()
        })
    }

    fn lifecycle_add_key(&self, handle: &str, key: &str) -> Result<bool> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            // The lifecycle's row locked: an end racing this add waits, then finds the key.
            let live = tx
                .query_opt(
                    "SELECT 1 FROM vj_lifecycles WHERE handle = $1 FOR SHARE",
                    &[&handle],
                )?
                .is_some();
            if live {
                tx.execute(
                    "INSERT INTO vj_lifecycle_keys (handle, key) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&handle, &key],
                )?;
            }
            tx.commit()?;
            Ok(live)
        })
    }

    fn lifecycle_done_key(&self, handle: &str, key: &str) -> Result<u64> {
        self.with(|c| {
            c.execute(
                "DELETE FROM vj_lifecycle_keys WHERE handle = $1 AND key = $2",
                &[&handle, &key],
            )?;
            let n: i64 = c
                .query_one(
                    "SELECT COUNT(*) FROM vj_lifecycle_keys WHERE handle = $1",
                    &[&handle],
                )?
                .get(0);
            Ok(n as u64)
        })
    }

    fn lifecycles(&self) -> Result<Vec<LifecycleData>> {
        self.with(|c| {
            let now: i64 = c.query_one(NOW_SQL, &[])?.get(0);
            Ok(c.query(
                "SELECT l.handle, l.target, l.kind, l.created,
                            (SELECT COUNT(*) FROM vj_lifecycle_keys k WHERE k.handle = l.handle)
                     FROM vj_lifecycles l ORDER BY l.created",
                &[],
            )?
            .iter()
            .map(|r| LifecycleData {
                handle: r.get(0),
                target: r.get(1),
                kind: r.get(2),
                age: age(now, r.get(3)),
                pending: r.get::<_, i64>(4) as u64,
            })
            .collect())
        })
    }

    fn lifecycle_end(&self, handle: &str) -> Result<()> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "DELETE FROM vj_lifecycle_keys WHERE handle = $1",
                &[&handle],
            )?;
            tx.execute("DELETE FROM vj_lifecycles WHERE handle = $1", &[&handle])?;
            tx.commit()
        })
    }

    fn lifecycle_of_target(&self, target: &str) -> Result<Option<String>> {
        self.with(|c| {
            Ok(c.query_opt(
                "SELECT handle FROM vj_lifecycles WHERE target = $1 LIMIT 1",
                &[&target],
            )?
            .map(|r| r.get(0)))
        })
    }

    fn export(&self) -> Result<JournalRows> {
        self.with(|c| {
            // REPEATABLE READ: the three tables from one snapshot.
            let mut tx = c
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let now: i64 = tx.query_one(NOW_SQL, &[])?.get(0);
            let intents = all_intents(&mut tx, now)?;
            let mut lifecycles: Vec<LifecycleRow> = tx
                .query(
                    "SELECT handle, target, kind, created FROM vj_lifecycles
                     ORDER BY created, handle",
                    &[],
                )?
                .iter()
                .map(|r| LifecycleRow {
                    handle: r.get(0),
                    target: r.get(1),
                    kind: r.get(2),
                    age: age(now, r.get(3)),
                    keys: Vec::new(),
                })
                .collect();
            for l in &mut lifecycles {
                l.keys = tx
                    .query(
                        "SELECT key FROM vj_lifecycle_keys WHERE handle = $1 ORDER BY key",
                        &[&l.handle],
                    )?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
            }
            tx.commit()?;
            Ok(JournalRows {
                intents,
                lifecycles,
            })
        })
    }

    fn import(&self, rows: &JournalRows) -> Result<()> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let now: i64 = tx.query_one(NOW_SQL, &[])?.get(0);
            for i in &rows.intents {
                tx.execute(
                    "INSERT INTO vj_intents (body, owner, created) VALUES ($1, $2, $3)",
                    &[&i.body, &i.owner, &(now - ms(i.age))],
                )?;
            }
            for l in &rows.lifecycles {
                tx.execute(
                    "INSERT INTO vj_lifecycles (handle, target, kind, created)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (handle) DO NOTHING",
                    &[&l.handle, &l.target, &l.kind, &(now - ms(l.age))],
                )?;
                tx.execute(
                    "INSERT INTO vj_lifecycle_keys (handle, key) SELECT $1, unnest($2::text[])
                     ON CONFLICT DO NOTHING",
                    &[&l.handle, &l.keys],
                )?;
            }
            tx.commit()
        })
    }

    fn clear(&self) -> Result<()> {
        self.with(|c| {
            c.batch_execute(
                "BEGIN; DELETE FROM vj_intents; DELETE FROM vj_lifecycles;
                 DELETE FROM vj_lifecycle_keys; COMMIT;",
            )
        })
    }
}
