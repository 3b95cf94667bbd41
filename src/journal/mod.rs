//! The operations journal: what a process was in the middle of, so that another one can finish
//! it after a crash. Its rows live in `WORKSPACE/.vikingfs/ops.db` (SQLite, [`sqlite`]) or, with
//! `storage.backend = "postgres"`, on the server beside the queue ([`postgres`]); [`Journal`]
//! is the front both share, [`Engine`] the seam.
//!
//! - *intents*: an rm, mv or add that took its locks and has not finished. Written after the
//!   locks are held and removed before they are released, so while its process lives an
//!   intent's paths are locked, and once it died [`crate::ops::Locked::recover`] can take the same locks
//!   and finish the operation forward. The intent of a removal that keeps its content is
//!   instead a line of the process's intent [`spool`] (an append, no commit), closed by the
//!   history entry of its blob; recovery journals a dead process's open lines first
//!   ([`Journal::replay_spools`]).
//! - *lifecycles*: an added resource whose TREE lock must be held until every summary and
//!   embedding of it is done. The lock's owner is the lifecycle handle, not a process, so it
//!   outlives the CLI that added it; the keys of its outstanding jobs are listed here, and the job
//!   that finishes the last one releases the lock.
//!
//! [`Engine::export`] and [`Engine::import`] move every row to another engine (`vikingfs
//! migrate`, with no process of the workspace running): intents keep their bodies, owners and
//! order (new ids; the owners are dead processes whose locks are free, so the next start's
//! recovery finishes them as it would have), lifecycles their targets, kinds and keys; ages
//! go as offsets, each engine having its own clock.

mod history;
pub mod postgres;
mod rules;
pub mod spool;
pub mod sqlite;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::LockKind;
use crate::uri::VPath;

pub use history::{Entry, Recorded};
pub use spool::Spooled;

/// An operation in progress. Paths are namespace-relative (`VPath::as_str`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Intent {
    /// The file or tree at `path` is being removed (into history blob `blob` when kept),
    /// then its index records.
    Rm {
        path: String,
        dir: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    /// `src` is being renamed to `dst`, then its records.
    Mv { src: String, dst: String, dir: bool },
    /// The content staged in `temp` is being synced into `target` under lifecycle `handle`;
    /// with `overlay` (a skill installed again, a copy into an existing directory) what the
    /// target holds beyond the staged content is kept.
    Add {
        temp: PathBuf,
        target: String,
        handle: String,
        file: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        overlay: bool,
    },
    /// `path` is being put back as it was at `point_ms` (`crate::ops::undo`): its plan, so
    /// that recovery finishes it as planned. Each version is made in a temporary of an
    /// internal name beside its target (`.vikingfs.tmp.undo.{token}.N`), then renamed into
    /// place without replacing anything: a target is absent or whole, never partly made.
    Undo {
        path: String,
        point_ms: i64,
        token: String,
        /// A rewind (`--since`): `created` are taken out, `moves` moved back first.
        #[serde(default)]
        rewind: bool,
        /// The versions to put back, parents first.
        restore: Vec<UndoItem>,
        /// What a rewind takes out (made since the point), files first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        created: Vec<String>,
        /// Renames since the point, newest first: (from, to), moved back to `from`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        moves: Vec<(String, String)>,
    },
}

/// One version an undo puts back ([`Intent::Undo`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoItem {
    pub path: String,
    pub blob: String,
    /// Into the directory there (a kept tree over an existing directory).
    #[serde(default)]
    pub merge: bool,
    /// What is there is moved into the history first.
    #[serde(default)]
    pub replace: bool,
}

impl Intent {
    pub fn describe(&self) -> String {
        match self {
            Intent::Rm { path, .. } => format!("rm viking://{path}"),
            Intent::Mv { src, dst, .. } => format!("mv viking://{src} viking://{dst}"),
            Intent::Add { temp, target, .. } => {
                format!("add {} -> viking://{target}", temp.display())
            }
            Intent::Undo { path, restore, .. } => {
                format!(
                    "undo viking://{path} ({} version(s) to put back)",
                    restore.len()
                )
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

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("operations journal")]
    Sqlite(#[from] rusqlite::Error),
    #[error("operations journal")]
    Pg(#[from] crate::pg::PgError),
    #[error("intent spool {}", .0.display())]
    Spool(PathBuf, #[source] std::io::Error),
}

pub type Result<T, E = JournalError> = std::result::Result<T, E>;

/// An intent as an engine stores it: its JSON body, owner and age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentData {
    pub id: i64,
    pub body: String,
    pub owner: String,
    pub age: Duration,
}

/// A lifecycle as an engine stores it (target and kind as written).
pub struct LifecycleData {
    pub handle: String,
    pub target: String,
    pub kind: String,
    pub age: Duration,
    pub pending: u64,
}

/// A lifecycle with its keys, as it moves between engines ([`Engine::export`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleRow {
    pub handle: String,
    pub target: String,
    pub kind: String,
    pub age: Duration,
    /// Keys of jobs not done yet, sorted.
    pub keys: Vec<String>,
}

/// Every row of a journal ([`Engine::export`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalRows {
    /// Oldest first.
    pub intents: Vec<IntentData>,
    /// Oldest first.
    pub lifecycles: Vec<LifecycleRow>,
    /// The history's entries, in the order recorded, each with when (an import keeps the
    /// times: the past is where it was).
    pub history: Vec<Recorded>,
}

impl JournalRows {
    pub fn is_empty(&self) -> bool {
        self.intents.is_empty() && self.lifecycles.is_empty() && self.history.is_empty()
    }
}

/// One database's rows of the journal; each call one transaction.
pub trait Engine: Send + Sync {
    /// Where the rows live, for messages.
    fn location(&self) -> String;
    /// Insert an intent; its id.
    fn begin(&self, body: &str, owner: &str) -> Result<i64>;
    /// Insert an intent and its lifecycle (kept if it exists) in one transaction.
    fn begin_with_lifecycle(
        &self,
        body: &str,
        owner: &str,
        handle: &str,
        target: &str,
        kind: &str,
    ) -> Result<i64>;
    /// Set the owner of intent `id` to `me` if it is `from`; whether it was.
    fn claim(&self, id: i64, from: &str, me: &str) -> Result<bool>;
    /// Close the intents `ids` (one transaction for several).
    fn finish(&self, ids: &[i64]) -> Result<()>;
    /// Close the intents `ids` and record `entries` in the history, in one transaction.
    fn finish_recording(&self, ids: &[i64], entries: &[Entry]) -> Result<()>;
    /// History entries of `under` and below (all for `None`), at or after `since_ms`,
    /// newest first.
    fn history(&self, under: Option<&str>, since_ms: i64) -> Result<Vec<Recorded>>;
    /// Record `entries` on their own (an undo's).
    fn record(&self, entries: &[Entry]) -> Result<()>;
    /// Remove the history entries `ids` (pruned).
    fn forget_history(&self, ids: &[i64]) -> Result<()>;
    /// Up to `limit` entries with content and no hash yet, oldest first: (id, blob).
    fn unhashed(&self, limit: usize) -> Result<Vec<(i64, String)>>;
    /// Set the content hashes of entries.
    fn set_hashes(&self, hashes: &[(i64, String)]) -> Result<()>;
    /// Mark entries whose content could not be hashed, with why.
    fn set_hash_failures(&self, failures: &[(i64, String)]) -> Result<()>;
    /// Every intent, oldest first.
    fn intents(&self) -> Result<Vec<IntentData>>;
    /// Insert the lifecycle (kept if it exists) and its keys (kept if they exist).
    fn lifecycle_start(
        &self,
        handle: &str,
        target: &str,
        kind: &str,
        keys: &[String],
    ) -> Result<()>;
    /// Add a key to an existing lifecycle; false when there is no such lifecycle.
    fn lifecycle_add_key(&self, handle: &str, key: &str) -> Result<bool>;
    /// Remove a key; how many keys the lifecycle still has.
    fn lifecycle_done_key(&self, handle: &str, key: &str) -> Result<u64>;
    /// Every lifecycle, oldest first.
    fn lifecycles(&self) -> Result<Vec<LifecycleData>>;
    /// Remove a lifecycle and its keys.
    fn lifecycle_end(&self, handle: &str) -> Result<()>;
    /// The handle of the lifecycle whose target is exactly `target`.
    fn lifecycle_of_target(&self, target: &str) -> Result<Option<String>>;
    /// Every row, from one snapshot (see the module doc).
    fn export(&self) -> Result<JournalRows>;
    /// Add `rows` as exported (intents get new ids, in order) in one transaction.
    fn import(&self, rows: &JournalRows) -> Result<()>;
    /// Remove every row (a migration target emptied before its copy).
    fn clear(&self) -> Result<()>;
}

/// The journal of one workspace.
pub struct Journal {
    engine: Box<dyn Engine>,
    /// Counts this process's changes of the history (what reads of it may cache on).
    history_changes: std::sync::atomic::AtomicU64,
    /// The entries, and the bytes of content they keep, this process has recorded: what the
    /// history's running tally (`ops/history.rs`) adds to its last count, so that the cap is
    /// checked without reading every row.
    history_recorded: (std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
    /// Where this process spools the intents of removals that keep their content
    /// ([`spool`]); `None`: every intent is a row.
    spool: Option<spool::IntentSpool>,
}

/// An open intent: a row of the journal, or a line of this process's spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentId {
    Row(i64),
    Spooled(Spooled),
}

impl Journal {
    /// The SQLite journal at `path` (created when missing).
    pub fn open(path: &Path) -> Result<Journal> {
        Ok(Journal::with_engine(Box::new(sqlite::SqliteJournal::open(
            path,
        )?)))
    }

    pub fn with_engine(engine: Box<dyn Engine>) -> Journal {
        Journal {
            engine,
            history_changes: Default::default(),
            history_recorded: Default::default(),
            spool: None,
        }
    }

    /// This journal, spooling the intents of removals that keep their content in `dir`
    /// ([`spool`]; the workspace's `.vikingfs/intents`).
    pub fn with_spool(mut self, dir: PathBuf) -> Journal {
        self.spool = Some(spool::IntentSpool::new(dir));
        self
    }

    /// Record the intent of a removal that keeps its content as a blob (`Intent::Rm` with a
    /// blob): a line of the spool when there is one (closed by the blob's history entry),
    /// else a row. Durable against a crash of this process either way.
    pub fn begin_kept(&self, intent: &Intent, owner: &str) -> Result<IntentId> {
        debug_assert!(matches!(intent, Intent::Rm { blob: Some(_), .. }));
        match &self.spool {
            Some(s) => s
                .append(intent, owner)
                .map(IntentId::Spooled)
                .map_err(|e| JournalError::Spool(s.dir().to_path_buf(), e)),
            None => self.begin(intent, owner).map(IntentId::Row),
        }
    }

    /// Close `ids` and record `entries` (which name the blobs of the spooled ones) in one
    /// transaction; then the spooled lines are settled.
    pub fn finish_ids(&self, ids: &[IntentId], entries: &[Entry]) -> Result<()> {
        let rows: Vec<i64> = ids
            .iter()
            .filter_map(|i| match i {
                IntentId::Row(r) => Some(*r),
                IntentId::Spooled(_) => None,
            })
            .collect();
        self.finish_recording(&rows, entries)?;
        self.settled(ids);
        Ok(())
    }

    /// The spooled ones of `ids` need nothing more: their entries are committed (or their
    /// blobs are gone).
    fn settled(&self, ids: &[IntentId]) {
        if let Some(s) = &self.spool {
            let spooled: Vec<Spooled> = ids
                .iter()
                .filter_map(|i| match i {
                    IntentId::Spooled(s) => Some(*s),
                    IntentId::Row(_) => None,
                })
                .collect();
            s.settled(&spooled);
        }
    }

    /// Journal the open intents of every dead process's spool file, then delete the file
    /// (recovery runs this first, then finishes what is journalled). An intent is open when
    /// no history entry names its blob and it is not journalled already (by a replay that
    /// died before deleting the file). Returns how many were journalled.
    pub fn replay_spools(&self, dir: &Path) -> Result<usize> {
        let orphans = spool::orphans(dir, self.spool.as_ref())
            .map_err(|e| JournalError::Spool(dir.into(), e))?;
        if orphans.iter().all(|o| o.lines.is_empty()) {
            // Spools of processes that settled everything and exited without removing them.
            for o in orphans {
                let _ = std::fs::remove_file(&o.path);
            }
            return Ok(0);
        }
        let mut recorded: std::collections::HashSet<String> = self
            .engine
            .history(None, i64::MIN)?
            .into_iter()
            .filter_map(|r| r.entry.blob)
            .collect();
        let journalled = self.intents()?;
        recorded.extend(spool::blobs_of(journalled.iter().map(|(_, i, _)| i)));
        let mut n = 0;
        for o in orphans {
            for (owner, intent) in &o.lines {
                let open = match intent {
                    Intent::Rm { blob: Some(b), .. } => !recorded.contains(b),
                    _ => !journalled.iter().any(|(_, i, _)| i == intent),
                };
                if open {
                    self.begin(intent, owner)?;
                    n += 1;
                }
            }
            crate::crash_point!("intents.replayed");
            std::fs::remove_file(&o.path).map_err(|e| JournalError::Spool(o.path.clone(), e))?;
            tracing::info!(file = %o.path.display(), intents = n, "journalled the spooled intents of a dead process");
        }
        Ok(n)
    }

    /// Where its rows live, for messages.
    pub fn location(&self) -> String {
        self.engine.location()
    }

    /// Record an intent of process `owner` (a lock-owner name, whose liveness can be checked);
    /// returns its id for [`finish`](Self::finish).
    pub fn begin(&self, intent: &Intent, owner: &str) -> Result<i64> {
        self.engine.begin(&body(intent), owner)
    }

    /// Record an add's intent and open its lifecycle in one transaction, so a crash leaves
    /// both or neither.
    pub fn begin_add(
        &self,
        intent: &Intent,
        owner: &str,
        target: &VPath,
        kind: LockKind,
    ) -> Result<i64> {
        let Intent::Add { handle, .. } = intent else {
            panic!("begin_add takes an add intent");
        };
        self.engine.begin_with_lifecycle(
            &body(intent),
            owner,
            handle,
            target.as_str(),
            kind.as_str(),
        )
    }

    /// Take over intent `id` for `me` if its owner is `from` (compare-and-swap, so two
    /// recovering processes never both finish the same operation).
    pub fn claim(&self, id: i64, from: &str, me: &str) -> Result<bool> {
        self.engine.claim(id, from, me)
    }

    pub fn finish(&self, id: i64) -> Result<()> {
        self.engine.finish(&[id])
    }

    /// Close the intents `ids` and record what their operations kept, in one transaction.
    pub fn finish_recording(&self, ids: &[i64], entries: &[Entry]) -> Result<()> {
        if entries.is_empty() {
            return self.finish_all(ids);
        }
        self.history_changed();
        self.engine.finish_recording(ids, entries)?;
        self.counted(entries);
        Ok(())
    }

    /// History entries of `under` and below (every entry for `None`) recorded at or after
    /// `since_ms` (ms since the epoch), newest first.
    pub fn history(&self, under: Option<&VPath>, since_ms: i64) -> Result<Vec<Recorded>> {
        self.engine.history(under.map(|p| p.as_str()), since_ms)
    }

    /// Record `entries` (an undo's) on their own.
    pub fn record(&self, entries: &[Entry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.history_changed();
        self.engine.record(entries)?;
        self.counted(entries);
        Ok(())
    }

    /// Remove the history entries `ids`.
    pub fn forget_history(&self, ids: &[i64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.history_changed();
        self.engine.forget_history(ids)
    }

    /// Up to `limit` entries whose content has no hash yet, oldest first: (id, blob).
    pub fn unhashed(&self, limit: usize) -> Result<Vec<(i64, String)>> {
        self.engine.unhashed(limit)
    }

    /// Record the content hashes of entries.
    pub fn set_hashes(&self, hashes: &[(i64, String)]) -> Result<()> {
        if hashes.is_empty() {
            return Ok(());
        }
        self.engine.set_hashes(hashes)
    }

    /// Mark entries whose content could not be hashed, each with why: [`Journal::unhashed`]
    /// passes them over from then on (`fsck` names them; a hash set later replaces the mark).
    pub fn set_hash_failures(&self, failures: &[(i64, String)]) -> Result<()> {
        if failures.is_empty() {
            return Ok(());
        }
        self.engine.set_hash_failures(failures)
    }

    /// How many times this process changed the history (recorded or forgot entries): a
    /// read of it cached at one count is current while the count stays.
    pub fn history_changes(&self) -> u64 {
        self.history_changes
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// (entries, bytes kept) this process has recorded so far.
    pub fn history_recorded(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Acquire;
        (
            self.history_recorded.0.load(Acquire),
            self.history_recorded.1.load(Acquire),
        )
    }

    fn counted(&self, entries: &[Entry]) {
        use std::sync::atomic::Ordering::AcqRel;
        let bytes = entries
            .iter()
            .filter(|e| e.blob.is_some())
            .map(|e| e.size)
            .sum();
        self.history_recorded
            .0
            .fetch_add(entries.len() as u64, AcqRel);
        self.history_recorded.1.fetch_add(bytes, AcqRel);
    }

    fn history_changed(&self) {
        self.history_changes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Close the intents `ids` together, in one transaction (a batch of removals).
    pub fn finish_all(&self, ids: &[i64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.engine.finish(ids)
    }

    /// Every unfinished intent, oldest first. Unreadable rows are skipped (logged): a newer
    /// vikingfs may have written them.
    pub fn intents(&self) -> Result<Vec<(i64, Intent, Duration)>> {
        Ok(self
            .intents_owned()?
            .into_iter()
            .map(|r| (r.id, r.intent, r.age))
            .collect())
    }

    /// [`intents`](Self::intents) with their owners.
    pub fn intents_owned(&self) -> Result<Vec<IntentRow>> {
        let mut out = Vec::new();
        for r in self.engine.intents()? {
            match serde_json::from_str(&r.body) {
                Ok(intent) => out.push(IntentRow {
                    id: r.id,
                    intent,
                    owner: r.owner,
                    age: r.age,
                }),
                Err(e) => tracing::warn!(id = r.id, "unreadable intent {:?}: {e}", r.body),
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
    ) -> Result<()> {
        self.engine
            .lifecycle_start(handle, target.as_str(), kind.as_str(), keys)
    }

    /// Add a job key to a running lifecycle (a summary propagated inside the resource).
    /// Returns false when the lifecycle is over.
    pub fn lifecycle_add_key(&self, handle: &str, key: &str) -> Result<bool> {
        self.engine.lifecycle_add_key(handle, key)
    }

    /// A job of the lifecycle is done; returns how many keys are still outstanding.
    pub fn lifecycle_done_key(&self, handle: &str, key: &str) -> Result<u64> {
        self.engine.lifecycle_done_key(handle, key)
    }

    pub fn lifecycle(&self, handle: &str) -> Result<Option<Lifecycle>> {
        Ok(self.lifecycles()?.into_iter().find(|l| l.handle == handle))
    }

    /// Every lifecycle still open.
    pub fn lifecycles(&self) -> Result<Vec<Lifecycle>> {
        Ok(self
            .engine
            .lifecycles()?
            .into_iter()
            .filter_map(|l| {
                Some(Lifecycle {
                    target: VPath::from_rel(&l.target).ok()?,
                    handle: l.handle,
                    kind: if l.kind == "tree" {
                        LockKind::Tree
                    } else {
                        LockKind::Exact
                    },
                    age: l.age,
                    pending: l.pending,
                })
            })
            .collect())
    }

    /// Forget a lifecycle (after its lock was released).
    pub fn lifecycle_end(&self, handle: &str) -> Result<()> {
        self.engine.lifecycle_end(handle)
    }

    /// The engine underneath (`vikingfs migrate` moves its rows).
    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// The handle of the open lifecycle whose target is `target` itself, if any.
    pub fn lifecycle_of_target(&self, target: &VPath) -> Result<Option<String>> {
        self.engine.lifecycle_of_target(target.as_str())
    }
}

fn body(intent: &Intent) -> String {
    serde_json::to_string(intent).expect("intent serialises")
}

// The engines' rules are tested on both engines by `tests/ops/journal_engines.rs`.

#[cfg(test)]
mod tests {
    use super::*;

    /// An add's `overlay` is written only when set, and an intent journalled before it
    /// existed reads as a plain add: recovery syncs as the add that wrote it would have.
    #[test]
    fn an_adds_overlay_is_kept_and_an_older_intent_reads_as_a_plain_add() {
        let add = |overlay| Intent::Add {
            temp: "/t".into(),
            target: "agent/skills/s".into(),
            handle: "h".into(),
            file: false,
            overlay,
        };
        let plain = serde_json::to_string(&add(false)).unwrap();
        assert!(!plain.contains("overlay"), "{plain}");
        let over = serde_json::to_string(&add(true)).unwrap();
        assert_eq!(serde_json::from_str::<Intent>(&over).unwrap(), add(true));
        let older =
            r#"{"op":"add","temp":"/t","target":"agent/skills/s","handle":"h","file":false}"#;
        assert_eq!(serde_json::from_str::<Intent>(older).unwrap(), add(false));
    }
}
