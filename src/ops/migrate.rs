//! `vikingfs migrate`: moving a workspace's derived stores — the queue, the journal and the
//! index — from one storage backend to the other (SQLite files in the workspace, or a
//! PostgreSQL database), with no daemon of the workspace running.
//!
//! The move is copy-then-switch:
//! 1. refuse, changing nothing, while a daemon of the workspace runs, when the target is the
//!    current backend, or when the target already holds this workspace's stores with data
//!    (unless `force`, which empties them first);
//! 2. mark the target incomplete ([`MARKER`], in the workspace), empty it when needed, and
//!    copy every job that is not done and every key version ([`crate::queue::engine`] says
//!    what a move keeps), then every intent and lifecycle; the target's index is emptied and
//!    marked for a rebuild from the files ([`super::rebuild`]);
//! 3. the switch — the configuration file's `storage` rewritten atomically — is the commit
//!    point ([`switch`]). A crash before it leaves the old backend in force, untouched, and the
//!    target partly filled but marked: the next migrate to it starts over by itself;
//! 4. after the switch the old SQLite files are renamed `*.migrated-<unix seconds>` (never
//!    deleted; a server's tables are left as they are), and the next open of the stores
//!    rebuilds the index on the new backend and queues its vectors.
//!
//! The index is rebuilt rather than copied: the SQLite store keeps a record's text only as
//! FTS5 terms and its vector quantised, and the server keeps postings, so neither holds what
//! the other's writes take; the files are the truth and the rebuild machinery
//! ([`super::Ops::reindex`]) is what every lost index heals with already.

use std::path::{Path, PathBuf};

use super::stores::server_of;
use super::OpsError;
use crate::config::Backend;
use crate::index::{Index, IndexError, Store};
use crate::journal::{self, JournalError, JournalRows};
use crate::queue::engine::{Engine as QueueEngine, QueueRows};
use crate::queue::QueueError;
use crate::workspace::Workspace;

/// The marker of a copy not switched to yet, in the workspace's internal directory: it holds
/// the target's backend name.
pub const MARKER: &str = super::stores::MIGRATE_MARKER;

/// Jobs moved per transaction (and per step of the progress bar).
const BATCH: usize = 500;

/// Why a migration refused or failed. Each refusal is one line naming the problem and what
/// to do about it.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("a daemon of this workspace runs (pid {pid}{}): stop it (`vikingfs umount`) and migrate again", mountpoint.as_ref().map(|m| format!(", mounted on {}", m.display())).unwrap_or_default())]
    DaemonRunning {
        pid: u32,
        mountpoint: Option<PathBuf>,
    },
    #[error("the workspace's stores are on {0} already (storage.backend): nothing to migrate")]
    SameBackend(&'static str),
    #[error("{location} already holds this workspace's {what}: pass --force to empty it and migrate over it")]
    TargetHasData { location: String, what: String },
    #[error(
        "the copy to {location} does not match its source ({what}); the old backend stays in force"
    )]
    Mismatch { location: String, what: String },
    #[error("migrate: {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Ops(#[from] OpsError),
}

impl From<QueueError> for MigrateError {
    fn from(e: QueueError) -> Self {
        MigrateError::Ops(e.into())
    }
}

impl From<JournalError> for MigrateError {
    fn from(e: JournalError) -> Self {
        MigrateError::Ops(e.into())
    }
}

impl From<IndexError> for MigrateError {
    fn from(e: IndexError) -> Self {
        MigrateError::Ops(e.into())
    }
}

pub type Result<T, E = MigrateError> = std::result::Result<T, E>;

/// What was copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// Jobs moved pending (leased ones included).
    pub pending: u64,
    /// Jobs moved dead.
    pub dead: u64,
    /// Key versions moved.
    pub keys: u64,
    pub intents: u64,
    pub lifecycles: u64,
    /// History entries moved (their kept content stays where it is, in the workspace).
    pub history: u64,
    /// Where the stores are now.
    pub location: String,
    /// The target had data that was emptied first (`--force`, or an unfinished copy).
    pub emptied: bool,
}

/// One backend's queue, journal and index engines.
struct Stores {
    queue: Box<dyn QueueEngine>,
    journal: Box<dyn journal::Engine>,
    index: Index,
    location: String,
}

/// The stores of `ws` on `backend` as engines, without the queue's front: opening the front
/// replays the spool, which must go into the source, never a target not switched to yet.
fn open_stores(ws: &Workspace, backend: &Backend) -> Result<Stores> {
    Ok(match backend {
        Backend::Sqlite => Stores {
            queue: Box::new(crate::queue::sqlite::SqliteEngine::open(
                &ws.queue_db(),
                crate::queue::QueueOptions::default().busy_timeout,
            )?),
            journal: Box::new(journal::sqlite::SqliteJournal::open(
                &ws.internal_dir().join("ops.db"),
            )?),
            index: Index::open_lexical_in(Store::File(&ws.index_db()))?,
            location: format!("SQLite files in {}", ws.internal_dir().display()),
        },
        Backend::Postgres { dsn } => {
            let pg = server_of(ws, dsn)?;
            Stores {
                location: format!("PostgreSQL {}", pg.location()),
                queue: Box::new(crate::queue::postgres::PgEngine::open(pg.clone())?),
                journal: Box::new(journal::postgres::PgJournal::open(pg.clone())?),
                index: Index::open_lexical_in(Store::Server(pg))?,
            }
        }
    })
}

/// Refuse (changing nothing) while a daemon of `ws` runs or when `to` is `from`.
pub fn check(ws: &Workspace, from: &Backend, to: &Backend) -> Result<()> {
    if from.name() == to.name() {
        return Err(MigrateError::SameBackend(to.name()));
    }
    let daemons = crate::daemon::running(ws).map_err(|source| MigrateError::Io {
        path: ws.internal_dir(),
        source,
    })?;
    if let Some(d) = daemons.into_iter().next() {
        return Err(MigrateError::DaemonRunning {
            pid: d.pid,
            mountpoint: d.mountpoint,
        });
    }
    Ok(())
}

/// Steps 1 and 2 of the module doc: copy every row of `ws`'s stores on `from` to `to`,
/// telling `progress` (rows done, rows in all). The old backend stays in force.
pub fn copy(
    ws: &Workspace,
    from: &Backend,
    to: &Backend,
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Copied> {
    check(ws, from, to)?;
    let marker = ws.internal_dir().join(MARKER);
    // A copy to the same target that never switched: its rows are ours to replace.
    let unfinished = std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == to.name());
    // The source first: its queue's front replays any spool of a dead process into it.
    let source_queue = super::open_queue_of(ws, from)?;
    let queue = source_queue.engine().export()?;
    let source_journal = match from {
        Backend::Sqlite => journal::Journal::open(&ws.internal_dir().join("ops.db"))?,
        Backend::Postgres { dsn } => journal::Journal::with_engine(Box::new(
            journal::postgres::PgJournal::open(server_of(ws, dsn)?)?,
        )),
    };
    let journal = source_journal.engine().export()?;

    let target = open_stores(ws, to)?;
    let held = held(&target)?;
    if !held.is_empty() && !force && !unfinished {
        return Err(MigrateError::TargetHasData {
            location: target.location.clone(),
            what: held.join(", "),
        });
    }
    write_marker(&marker, to)?;
    let emptied = !held.is_empty();
    if emptied {
        target.queue.clear()?;
        target.journal.clear()?;
        for scope in crate::uri::SCOPES {
            target
                .index
                .delete_prefix(&crate::uri::VPath::from_rel(scope).map_err(OpsError::from)?)?;
        }
    }

    let total = (queue.jobs.len() + queue.keys.len() + journal.intents.len()) as u64
        + (journal.lifecycles.len() + journal.history.len()) as u64;
    let mut done = queue.keys.len() as u64;
    // Key versions first, so that every job lands beside the version it is fenced by.
    target.queue.import(&[], &queue.keys)?;
    progress(done, total);
    for chunk in queue.jobs.chunks(BATCH) {
        target.queue.import(chunk, &[])?;
        done += chunk.len() as u64;
        progress(done, total);
    }
    target.journal.import(&journal)?;
    progress(total, total);
    // The files rebuild the index at the first open after the switch (see the module doc).
    target.index.set_meta(super::rebuild::META_KEY, "pending")?;
    verify(&target, &queue, &journal)?;
    crate::crash_point!("migrate.copied");
    let dead = queue.jobs.iter().filter(|j| j.dead).count() as u64;
    Ok(Copied {
        pending: queue.jobs.len() as u64 - dead,
        dead,
        keys: queue.keys.len() as u64,
        intents: journal.intents.len() as u64,
        lifecycles: journal.lifecycles.len() as u64,
        history: journal.history.len() as u64,
        location: target.location,
        emptied,
    })
}

/// What the target already holds of this workspace's, for the refusal.
fn held(target: &Stores) -> Result<Vec<String>> {
    let mut held = Vec::new();
    let q = target.queue.export()?;
    if !q.is_empty() {
        held.push(format!("queue ({} jobs)", q.jobs.len()));
    }
    let j = target.journal.export()?;
    if !j.is_empty() {
        held.push(format!(
            "journal ({} intents, {} lifecycles, {} history entries)",
            j.intents.len(),
            j.lifecycles.len(),
            j.history.len()
        ));
    }
    let n = target.index.count()?;
    if n > 0 {
        held.push(format!("index ({n} records)"));
    }
    Ok(held)
}

/// Read the copy back: the same jobs (ignoring the instants, which moved clocks) and the
/// same journal rows.
fn verify(target: &Stores, queue: &QueueRows, journal: &JournalRows) -> Result<()> {
    let mismatch = |what: &str| MigrateError::Mismatch {
        location: target.location.clone(),
        what: what.to_string(),
    };
    let got = target.queue.export()?;
    let key = |j: &crate::queue::engine::JobRow| {
        (
            j.queue.clone(),
            j.key.clone(),
            j.version,
            j.payload.clone(),
            j.dead,
            j.attempts,
            j.last_error.clone(),
        )
    };
    let mut a: Vec<_> = queue.jobs.iter().map(key).collect();
    let mut b: Vec<_> = got.jobs.iter().map(key).collect();
    a.sort();
    b.sort();
    if a != b {
        return Err(mismatch("jobs"));
    }
    if got.keys != queue.keys {
        return Err(mismatch("key versions"));
    }
    let got = target.journal.export()?;
    let bodies = |r: &JournalRows| {
        r.intents
            .iter()
            .map(|i| (i.body.clone(), i.owner.clone()))
            .collect::<Vec<_>>()
    };
    let handles = |r: &JournalRows| {
        let mut v: Vec<_> = r
            .lifecycles
            .iter()
            .map(|l| {
                (
                    l.handle.clone(),
                    l.target.clone(),
                    l.kind.clone(),
                    l.keys.clone(),
                )
            })
            .collect();
        v.sort();
        v
    };
    if bodies(&got) != bodies(journal) || handles(&got) != handles(journal) {
        return Err(mismatch("journal"));
    }
    // The history as it was, in its order and with its times (the ids are the target's).
    let entries = |r: &JournalRows| {
        r.history
            .iter()
            .map(|h| (h.at_ms, h.entry.clone()))
            .collect::<Vec<_>>()
    };
    if entries(&got) != entries(journal) {
        return Err(mismatch("history"));
    }
    Ok(())
}

fn write_marker(marker: &Path, to: &Backend) -> Result<()> {
    crate::fsx::replace(
        marker,
        to.name().as_bytes(),
        0o644,
        crate::fsx::Durable::Rename,
    )
    .map_err(|source| MigrateError::Io {
        path: marker.to_path_buf(),
        source,
    })
}

/// The commit point: `config_file`'s `storage` rewritten (atomically) to `to`. On failure the
/// old backend stays in force; the caller shows the operator `config` to put there.
pub fn switch(config_file: &Path, config: &serde_json::Value) -> std::io::Result<()> {
    if let Some(dir) = config_file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = serde_json::to_string_pretty(config).expect("JSON value serialises");
    text.push('\n');
    // A DSN may carry a password: a new file is the owner's only.
    crate::fsx::replace(
        config_file,
        text.as_bytes(),
        0o600,
        crate::fsx::Durable::Rename,
    )
}

/// After the switch: the marker goes, and the old SQLite files (when `from` was SQLite) are
/// renamed aside so that nothing opens them by mistake. Returns their new names.
pub fn retire(ws: &Workspace, from: &Backend) -> Result<Vec<PathBuf>> {
    let mut aside = Vec::new();
    if matches!(from, Backend::Sqlite) {
        for db in [
            ws.queue_db(),
            ws.internal_dir().join("ops.db"),
            ws.index_db(),
        ] {
            if db.exists() {
                aside.push(
                    crate::db::rename_aside(&db, "migrated")
                        .map_err(|source| MigrateError::Io { path: db, source })?,
                );
            }
        }
    }
    let marker = ws.internal_dir().join(MARKER);
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(MigrateError::Io {
                path: marker,
                source: e,
            })
        }
        _ => {}
    }
    Ok(aside)
}
