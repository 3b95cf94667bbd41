//! The queue's state machine, written once for every SQL database ([`crate::sql`]): each
//! [`Engine`] call as the statements of one transaction and the decisions between them. An
//! engine ([`super::sqlite`], [`super::postgres`]) only opens its transactions and names its
//! [`Dialect`](crate::sql::Dialect) — whatever else they did differently is a bug.
//!
//! Row layout (both databases): `state` is pending (0), running (1) or dead (2); `due` is the
//! instant (ms) the row is next claimable (see [`super::engine`]); ids are never reused;
//! `{keys}` keeps each key's version while a row of the key exists.

use std::time::Duration;

use super::engine::{
    bad_payload, expired_message, export_filter, Engine, Failure, JobRow, KeyVersion, QueueRows,
};
use super::stats::DeadJob;
use super::{Job, NewJob, QueueError, QueueStats};
use crate::sql::{age, ms, Result, Sql, Val};

/// `state` of a pending row.
const PENDING: i64 = 0;
/// `state` of a claimed row.
const RUNNING: i64 = 1;
/// `state` of a dead row.
const DEAD: i64 = 2;

/// How a database keeps the queue's rows: transactions, and where the rows are.
pub(crate) trait Backend: Send + Sync {
    /// Where the rows live, for messages.
    fn location(&self) -> String;
    /// Run `f` as one write transaction: whole or not at all, and no other claim in between.
    fn write<T>(&self, f: impl FnOnce(&mut dyn Sql) -> Result<T>) -> Result<T, QueueError>;
    /// Run `f`'s reads (no transaction needed).
    fn read<T>(&self, f: impl FnOnce(&mut dyn Sql) -> Result<T>) -> Result<T, QueueError>;
    /// See [`Engine::heal_in_place`].
    fn heal_in_place(&self, healed: Box<dyn Fn() + Send + Sync>) {
        drop(healed);
    }
    /// See [`Engine::last_heal`].
    fn last_heal(&self) -> Option<super::engine::Heal> {
        None
    }
}

/// True when the job's key has been enqueued again since this job's version.
fn superseded(s: &mut dyn Sql, queue: &str, key: Option<&str>, version: i64) -> Result<bool> {
    let Some(key) = key else { return Ok(false) };
    Ok(key_version(s, queue, key)?.is_some_and(|c| c > version))
}

/// [`superseded`], for a held job about to go back to pending: the key's version row is
/// locked until commit first. An enqueue of the key locks that row too (its version bump), so
/// the two are serialised: either the enqueue committed first and the job is superseded (it
/// is dropped), or the enqueue waits and then finds the job's row pending and coalesces into
/// it. Unlocked, a server let both through: the job went back to pending beside the new row
/// the enqueue inserted, and the partial unique index refused one of them (a lost failure or
/// a lost enqueue, `duplicate key … vq_jobs_pending_key`, seen with two hosts).
///
/// Taken before the job's own row ([`held`]), as an enqueue takes them: the key's row, then
/// (when its update waited for a claim and re-checks the row) the job's. The other order
/// deadlocked against an enqueue that re-checked the job's row while the failure held it.
fn superseded_locked(s: &mut dyn Sql, job: &Job) -> Result<bool> {
    let Some(key) = job.key.as_deref() else {
        return Ok(false);
    };
    let current = s
        .opt(
            "SELECT version FROM {keys} WHERE queue = ?1 AND key = ?2 {for_update}",
            &[job.queue.as_str().into(), key.into()],
        )?
        .map(|r| r.int(0));
    Ok(current.is_some_and(|c| c > job.version))
}

fn key_version(s: &mut dyn Sql, queue: &str, key: &str) -> Result<Option<i64>> {
    Ok(s.opt(
        "SELECT version FROM {keys} WHERE queue = ?1 AND key = ?2",
        &[queue.into(), key.into()],
    )?
    .map(|r| r.int(0)))
}

/// Forget a key's version once no row uses it, so the table does not grow with every path
/// ever written. Safe: versions are only compared against rows that exist.
fn prune_key(s: &mut dyn Sql, queue: &str, key: Option<&str>) -> Result<()> {
    if let Some(key) = key {
        s.exec(
            "DELETE FROM {keys} WHERE queue = ?1 AND key = ?2
               AND NOT EXISTS (SELECT 1 FROM {jobs} WHERE queue = ?1 AND key = ?2)",
            &[queue.into(), key.into()],
        )?;
    }
    Ok(())
}

/// Is `job` still claimed under this very claim? Locks its row until commit.
fn held(s: &mut dyn Sql, job: &Job) -> Result<bool> {
    Ok(s.opt(
        "SELECT 1 FROM {jobs} WHERE id = ?1 AND state = 1 AND attempts = ?2 {for_update}",
        &[job.id.into(), i64::from(job.attempts).into()],
    )?
    .is_some())
}

/// Drop the job (its key moved on) and the key's version if nothing else uses it.
fn drop_job(s: &mut dyn Sql, id: i64, queue: &str, key: Option<&str>) -> Result<()> {
    s.exec("DELETE FROM {jobs} WHERE id = ?1", &[id.into()])?;
    prune_key(s, queue, key)
}

/// Make row `id` dead with `message`.
fn kill(s: &mut dyn Sql, id: i64, message: &str, now: i64) -> Result<()> {
    s.exec(
        "UPDATE {jobs} SET state = 2, worker = NULL, last_error = ?2, updated = ?3 WHERE id = ?1",
        &[id.into(), message.into(), now.into()],
    )?;
    Ok(())
}

/// What a claim does with the row at the head of the line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Its key moved on: the row is moot.
    Drop,
    /// Dead with this error.
    Dead(String),
    /// Leased to the claimer.
    Lease(serde_json::Value),
}

/// The claim's rules for one due row (pending, or running with its lease run out).
pub(crate) fn decide(
    state: i64,
    superseded: bool,
    attempts: i64,
    max_attempts: i64,
    last_error: Option<&str>,
    payload: &str,
) -> Decision {
    if state == RUNNING {
        // Its worker died or hung. A newer version makes it moot; too many deaths make it a
        // poison job rather than a reason to crash workers forever.
        if superseded {
            return Decision::Drop;
        }
        if attempts >= max_attempts {
            return Decision::Dead(expired_message(attempts, last_error));
        }
    }
    match serde_json::from_str(payload) {
        Ok(p) => Decision::Lease(p),
        // Damaged, not transient: it would stand at the head of the line forever.
        Err(e) => Decision::Dead(bad_payload(&e)),
    }
}

fn claim(
    s: &mut dyn Sql,
    queue: &str,
    worker: &str,
    lease: Duration,
    max_attempts: u32,
) -> Result<Option<Job>> {
    let now = s.now()?;
    loop {
        let Some(r) = s.opt(
            "SELECT id, key, version, payload, attempts, state, last_error FROM {jobs}
             WHERE queue = ?1 AND state < 2 AND due <= ?2 ORDER BY due, id LIMIT 1
             {skip_locked}",
            &[queue.into(), now.into()],
        )?
        else {
            return Ok(None);
        };
        let (id, key, version, attempts, state) =
            (r.int(0), r.opt_text(1), r.int(2), r.int(4), r.int(5));
        let moved_on = state == RUNNING && superseded(s, queue, key.as_deref(), version)?;
        let last_error = r.opt_text(6);
        match decide(
            state,
            moved_on,
            attempts,
            i64::from(max_attempts),
            last_error.as_deref(),
            &r.text(3),
        ) {
            Decision::Drop => drop_job(s, id, queue, key.as_deref())?,
            Decision::Dead(message) => kill(s, id, &message, now)?,
            Decision::Lease(payload) => {
                s.exec(
                    "UPDATE {jobs} SET state = 1, due = ?2, attempts = attempts + 1, worker = ?3,
                                       updated = ?4
                     WHERE id = ?1",
                    &[
                        id.into(),
                        now.saturating_add(ms(lease)).into(),
                        worker.into(),
                        now.into(),
                    ],
                )?;
                return Ok(Some(Job {
                    id,
                    queue: queue.to_string(),
                    key,
                    version,
                    payload,
                    attempts: (attempts + 1) as u32,
                }));
            }
        }
    }
}

fn enqueue(s: &mut dyn Sql, now: i64, rerun_delay_ms: i64, job: &NewJob) -> Result<i64> {
    let queue = job.queue.as_str();
    let payload = job.payload.to_string();
    // The row's values, ?1 to ?6 in both the insert and the coalescing update.
    let row = |version: i64, due: i64| -> [Val<'_>; 6] {
        [
            queue.into(),
            job.key.as_deref().into(),
            version.into(),
            payload.as_str().into(),
            now.into(),
            due.into(),
        ]
    };
    let insert = |s: &mut dyn Sql, version: i64, due: i64| -> Result<i64> {
        s.insert(
            "INSERT INTO {jobs} (queue, key, version, payload, state, due, created, updated)
             VALUES (?1, ?2, ?3, ?4, 0, ?6, ?5, ?5)",
            &row(version, due),
        )
    };
    let Some(key) = job.key.as_deref() else {
        return insert(s, 0, now);
    };
    // Bumping the key's version locks its row until commit (on a server: two enqueues of one
    // key are serialised, so at most one pending row of a key exists).
    let version = s
        .opt(
            "INSERT INTO {keys} (queue, key, version) VALUES (?1, ?2, 1)
             ON CONFLICT (queue, key) DO UPDATE SET version = {keys}.version + 1
             RETURNING version",
            &[queue.into(), key.into()],
        )?
        .map_or(1, |r| r.int(0));
    // An older dead job of this key is moot now: the new version redoes its work.
    s.exec(
        "DELETE FROM {jobs} WHERE queue = ?1 AND key = ?2 AND state = 2",
        &[queue.into(), key.into()],
    )?;
    // While the key's job runs, its next run waits `rerun_delay` (see QueueOptions).
    let running = s
        .opt(
            "SELECT 1 FROM {jobs} WHERE queue = ?1 AND key = ?2 AND state = 1 LIMIT 1",
            &[queue.into(), key.into()],
        )?
        .is_some();
    let due = if running { now + rerun_delay_ms } else { now };
    // Coalesce into the pending job, keeping its place in line: its due stays, unless it was
    // backing off after a failure or waiting (a file open for writing, a full disk: it has a
    // last error): new input ends a back-off or a wait. A re-run waiting out its delay is
    // held back while its key keeps coming (`rm -rf` or `cp -r` of a big directory queue its
    // summary, which reads every child, at every batch): each enqueue moves it to half the
    // delay from now, up to ten delays after it was queued, so a burst is summarised once
    // after it rather than every delay during it. A claim racing this enqueue holds its row:
    // the update waits, then no longer matches, and a new row goes in.
    let mut params = row(version, due).to_vec();
    params.push((now + rerun_delay_ms / 2).into());
    params.push((rerun_delay_ms * 10).into());
    let updated = s.opt(
        "UPDATE {jobs} SET version = ?3, payload = ?4,
                           due = CASE WHEN attempts > 0 OR last_error IS NOT NULL THEN ?6
                                      WHEN due <= ?5 OR due >= ?7 THEN due
                                      WHEN ?7 <= created + ?8 THEN ?7
                                      WHEN due >= created + ?8 THEN due
                                      ELSE created + ?8 END,
                           attempts = 0, last_error = NULL, updated = ?5
         WHERE queue = ?1 AND key = ?2 AND state = 0 RETURNING id",
        &params,
    )?;
    match updated {
        Some(r) => Ok(r.int(0)),
        None => insert(s, version, due),
    }
}

/// How a held job leaves the running state.
fn fail(s: &mut dyn Sql, job: &Job, failure: Failure<'_>) -> Result<bool> {
    let now = s.now()?;
    // The key's row before the job's: in the order an enqueue takes them (see
    // `superseded_locked`).
    let superseded = superseded_locked(s, job)?;
    if !held(s, job)? {
        return Ok(false);
    }
    if superseded {
        drop_job(s, job.id, &job.queue, job.key.as_deref())?;
        return Ok(true);
    }
    let (message, after, give_back) = match failure {
        Failure::Dead { message } => {
            kill(s, job.id, message, now)?;
            return Ok(true);
        }
        Failure::Wait { message, after } => (message, after, 1),
        Failure::Retry { message, after } => (message, after, 0),
    };
    s.exec(
        "UPDATE {jobs} SET state = 0, worker = NULL, last_error = ?2, due = ?3,
                           attempts = CASE WHEN attempts > ?5 THEN attempts - ?5 ELSE 0 END,
                           updated = ?4
         WHERE id = ?1",
        &[
            job.id.into(),
            message.into(),
            now.saturating_add(ms(after)).into(),
            now.into(),
            Val::Int(give_back),
        ],
    )?;
    Ok(true)
}

fn release(s: &mut dyn Sql, job: &Job) -> Result<()> {
    let now = s.now()?;
    let superseded = superseded_locked(s, job)?;
    if !held(s, job)? {
        return Ok(());
    }
    if superseded {
        return drop_job(s, job.id, &job.queue, job.key.as_deref());
    }
    s.exec(
        "UPDATE {jobs} SET state = 0, worker = NULL, due = ?2, attempts = attempts - 1,
                           updated = ?2
         WHERE id = ?1",
        &[job.id.into(), now.into()],
    )?;
    Ok(())
}

fn stats(s: &mut dyn Sql, dead_shown: usize) -> Result<Vec<QueueStats>> {
    let now = s.now()?;
    let rows = s.rows(
        "SELECT queue,
                SUM(CASE WHEN state = 0 THEN 1 ELSE 0 END),
                SUM(CASE WHEN state = 0 AND attempts > 0 THEN 1 ELSE 0 END),
                SUM(CASE WHEN state = 1 AND due > ?1 THEN 1 ELSE 0 END),
                SUM(CASE WHEN state = 1 AND due <= ?1 THEN 1 ELSE 0 END),
                SUM(CASE WHEN state = 2 THEN 1 ELSE 0 END),
                MIN(CASE WHEN state < 2 THEN created END)
         FROM {jobs} GROUP BY queue ORDER BY queue",
        &[now.into()],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut q = QueueStats {
            queue: r.text(0),
            pending: r.int(1) as u64,
            retrying: r.int(2) as u64,
            running: r.int(3) as u64,
            expired: r.int(4) as u64,
            expired_by: Vec::new(),
            dead: r.int(5) as u64,
            oldest_age: r.opt_int(6).map(|t| age(now, t)),
            dead_jobs: Vec::new(),
        };
        if q.dead > 0 {
            q.dead_jobs = s
                .rows(
                    "SELECT id, key, attempts, last_error, updated FROM {jobs}
                     WHERE queue = ?1 AND state = 2 ORDER BY updated DESC, id DESC LIMIT ?2",
                    &[q.queue.as_str().into(), (dead_shown as i64).into()],
                )?
                .into_iter()
                .map(|r| DeadJob {
                    id: r.int(0),
                    key: r.opt_text(1),
                    attempts: r.int(2) as u32,
                    error: r.text(3),
                    age: age(now, r.int(4)),
                })
                .collect();
        }
        if q.expired > 0 {
            q.expired_by = s
                .rows(
                    "SELECT COALESCE(worker, ''), COUNT(*) FROM {jobs}
                     WHERE queue = ?1 AND state = 1 AND due <= ?2
                     GROUP BY worker ORDER BY worker",
                    &[q.queue.as_str().into(), now.into()],
                )?
                .into_iter()
                .map(|r| (r.text(0), r.int(1) as u64))
                .collect();
        }
        out.push(q);
    }
    Ok(out)
}

fn export(s: &mut dyn Sql) -> Result<QueueRows> {
    let now = s.now()?;
    let jobs = s
        .rows(
            &format!(
                "SELECT j.queue, j.key, j.version, j.payload, j.state, j.attempts, j.last_error,
                        CASE WHEN j.state = 0 AND j.due > ?1 THEN j.due - ?1 ELSE 0 END,
                        CASE WHEN ?1 > j.created THEN ?1 - j.created ELSE 0 END,
                        CASE WHEN ?1 > j.updated THEN ?1 - j.updated ELSE 0 END
                 FROM {{jobs}} j WHERE {} ORDER BY j.id {{for_share}}",
                export_filter("{keys}")
            ),
            &[now.into()],
        )?
        .into_iter()
        .map(|r| JobRow {
            queue: r.text(0),
            key: r.opt_text(1),
            version: r.int(2),
            payload: r.text(3),
            dead: r.int(4) == DEAD,
            attempts: r.int(5) as u32,
            last_error: r.opt_text(6),
            due_in_ms: r.int(7),
            age_ms: r.int(8),
            updated_ms: r.int(9),
        })
        .collect();
    let keys = s
        .rows(
            "SELECT queue, key, version FROM {keys} ORDER BY queue, key",
            &[],
        )?
        .into_iter()
        .map(|r| KeyVersion {
            queue: r.text(0),
            key: r.text(1),
            version: r.int(2),
        })
        .collect();
    Ok(QueueRows { jobs, keys }.in_claim_order())
}

fn import(s: &mut dyn Sql, jobs: &[JobRow], keys: &[KeyVersion]) -> Result<()> {
    let now = s.now()?;
    for k in keys {
        s.exec(
            "INSERT INTO {keys} (queue, key, version) VALUES (?1, ?2, ?3)
             ON CONFLICT (queue, key) DO UPDATE SET version =
                 CASE WHEN excluded.version > {keys}.version THEN excluded.version
                      ELSE {keys}.version END",
            &[
                k.queue.as_str().into(),
                k.key.as_str().into(),
                k.version.into(),
            ],
        )?;
    }
    for j in jobs {
        s.exec(
            "INSERT INTO {jobs} (queue, key, version, payload, state, due, attempts, last_error,
                                 created, updated)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &[
                j.queue.as_str().into(),
                j.key.as_deref().into(),
                j.version.into(),
                j.payload.as_str().into(),
                Val::Int(if j.dead { DEAD } else { PENDING }),
                now.saturating_add(j.due_in_ms).into(),
                i64::from(j.attempts).into(),
                j.last_error.as_deref().into(),
                now.saturating_sub(j.age_ms).into(),
                now.saturating_sub(j.updated_ms).into(),
            ],
        )?;
    }
    Ok(())
}

impl<B: Backend> Engine for B {
    fn location(&self) -> String {
        Backend::location(self)
    }

    fn enqueue(&self, jobs: &[NewJob], rerun_delay: Duration) -> Result<Vec<i64>, QueueError> {
        let delay = ms(rerun_delay);
        self.write(|s| {
            let now = s.now()?;
            jobs.iter().map(|j| enqueue(s, now, delay, j)).collect()
        })
    }

    fn any_due(&self, queue: &str) -> Result<bool, QueueError> {
        self.read(|s| {
            Ok(s.opt(
                "SELECT 1 FROM {jobs} WHERE queue = ?1 AND state < 2 AND due <= {now} LIMIT 1",
                &[queue.into()],
            )?
            .is_some())
        })
    }

    fn claim(
        &self,
        queue: &str,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Job>, QueueError> {
        self.write(|s| claim(s, queue, worker, lease, max_attempts))
    }

    fn renew(&self, job: &Job, worker: &str, lease: Duration) -> Result<bool, QueueError> {
        self.write(|s| {
            let now = s.now()?;
            let n = s.exec(
                "UPDATE {jobs} SET due = ?3, worker = ?4, updated = ?5
                 WHERE id = ?1 AND state = 1 AND attempts = ?2",
                &[
                    job.id.into(),
                    i64::from(job.attempts).into(),
                    now.saturating_add(ms(lease)).into(),
                    worker.into(),
                    now.into(),
                ],
            )?;
            Ok(n == 1)
        })
    }

    fn complete(&self, job: &Job) -> Result<(), QueueError> {
        let done = self.write(|s| {
            let n = s.exec(
                "DELETE FROM {jobs} WHERE id = ?1 AND state = 1 AND attempts = ?2",
                &[job.id.into(), i64::from(job.attempts).into()],
            )?;
            if n == 1 {
                prune_key(s, &job.queue, job.key.as_deref())?;
            }
            Ok(n == 1)
        })?;
        done.then_some(())
            .ok_or(QueueError::NotClaimed { id: job.id })
    }

    fn fail(&self, job: &Job, failure: Failure<'_>) -> Result<(), QueueError> {
        self.write(|s| fail(s, job, failure))?
            .then_some(())
            .ok_or(QueueError::NotClaimed { id: job.id })
    }

    fn release(&self, job: &Job) -> Result<(), QueueError> {
        self.write(|s| release(s, job))
    }

    fn end_leases_of(&self, gone: &dyn Fn(&str) -> bool) -> Result<usize, QueueError> {
        self.write(|s| {
            let now = s.now()?;
            let workers = s.rows(
                "SELECT DISTINCT worker FROM {jobs}
                 WHERE state = 1 AND worker IS NOT NULL AND due > ?1",
                &[now.into()],
            )?;
            let mut n = 0;
            for w in workers.iter().map(|r| r.text(0)).filter(|w| gone(w)) {
                n += s.exec(
                    "UPDATE {jobs} SET due = ?2 WHERE state = 1 AND worker = ?1",
                    &[w.as_str().into(), now.into()],
                )?;
            }
            Ok(n as usize)
        })
    }

    fn is_current(&self, job: &Job) -> Result<bool, QueueError> {
        self.read(|s| {
            Ok(s.opt(
                "SELECT 1 FROM {jobs} j WHERE j.id = ?1 AND j.state = 1 AND j.attempts = ?2
                   AND (j.key IS NULL OR ?3 = (SELECT version FROM {keys} k
                                               WHERE k.queue = j.queue AND k.key = j.key))",
                &[
                    job.id.into(),
                    i64::from(job.attempts).into(),
                    job.version.into(),
                ],
            )?
            .is_some())
        })
    }

    fn has_pending(&self, queue: &str, key: &str) -> Result<bool, QueueError> {
        self.read(|s| {
            Ok(s.opt(
                "SELECT 1 FROM {jobs} WHERE queue = ?1 AND key = ?2 AND state < 2 LIMIT 1",
                &[queue.into(), key.into()],
            )?
            .is_some())
        })
    }

    fn key_version(&self, queue: &str, key: &str) -> Result<Option<i64>, QueueError> {
        self.read(|s| key_version(s, queue, key))
    }

    fn retry_dead(&self, queue: Option<&str>) -> Result<usize, QueueError> {
        self.write(|s| {
            let now = s.now()?;
            s.exec(
                "DELETE FROM {jobs} WHERE state = 2 AND key IS NOT NULL
                   AND (CAST(?1 AS TEXT) IS NULL OR queue = ?1)
                   AND EXISTS (SELECT 1 FROM {jobs} o WHERE o.queue = {jobs}.queue
                               AND o.key = {jobs}.key AND o.state < 2)",
                &[queue.into()],
            )?;
            let n = s.exec(
                "UPDATE {jobs} SET state = 0, attempts = 0, due = ?2, updated = ?2
                 WHERE state = 2 AND (CAST(?1 AS TEXT) IS NULL OR queue = ?1)",
                &[queue.into(), now.into()],
            )?;
            Ok(n as usize)
        })
    }

    fn stats(&self, dead_shown: usize) -> Result<Vec<QueueStats>, QueueError> {
        self.read(|s| stats(s, dead_shown))
    }

    fn unfinished(&self, queues: Option<&[&str]>) -> Result<u64, QueueError> {
        self.read(|s| {
            let n = match queues {
                None => s
                    .opt("SELECT COUNT(*) FROM {jobs} WHERE state < 2", &[])?
                    .map_or(0, |r| r.int(0)),
                Some(qs) => {
                    let mut sum = 0;
                    for q in qs {
                        sum += s
                            .opt(
                                "SELECT COUNT(*) FROM {jobs} WHERE queue = ?1 AND state < 2",
                                &[(*q).into()],
                            )?
                            .map_or(0, |r| r.int(0));
                    }
                    sum
                }
            };
            Ok(n as u64)
        })
    }

    fn export(&self) -> Result<QueueRows, QueueError> {
        // One write transaction: one snapshot of both tables, no claim in between (on a
        // server its rows are also locked `FOR SHARE` against claims of other hosts).
        self.write(export)
    }

    fn import(&self, jobs: &[JobRow], keys: &[KeyVersion]) -> Result<(), QueueError> {
        self.write(|s| import(s, jobs, keys))
    }

    fn clear(&self) -> Result<(), QueueError> {
        self.write(|s| {
            s.exec("DELETE FROM {jobs}", &[])?;
            s.exec("DELETE FROM {keys}", &[])?;
            Ok(())
        })
    }

    fn heal_in_place(&self, healed: Box<dyn Fn() + Send + Sync>) {
        Backend::heal_in_place(self, healed)
    }

    fn last_heal(&self) -> Option<super::engine::Heal> {
        Backend::last_heal(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_drops_a_moot_row_kills_a_poison_or_damaged_one_and_leases_the_rest() {
        assert_eq!(decide(RUNNING, true, 1, 5, None, "{}"), Decision::Drop);
        assert!(matches!(
            decide(RUNNING, false, 5, 5, None, "{}"),
            Decision::Dead(m) if m.starts_with("lease expired on attempt 5")
        ));
        assert!(matches!(
            decide(PENDING, false, 9, 5, None, "not json"),
            Decision::Dead(m) if m.starts_with("payload is not JSON")
        ));
        // A pending row is leased however many claims it used: only a lease running out
        // counts against it here (a failure's count is decided by the front).
        assert_eq!(
            decide(PENDING, true, 9, 5, None, "1"),
            Decision::Lease(serde_json::json!(1))
        );
    }
}
