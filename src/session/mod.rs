//! Sessions: how a conversation becomes long-term memory without ever losing a message.
//!
//! Owns everything under `viking://user/{uid}/sessions/` ([`layout`]) and the memory files a
//! commit writes under `viking://user/{uid}/memories/`:
//! - [`messages`]: appending lines to the live `messages.jsonl` (EXACT lock, `O_APPEND`, one
//!   `write` per line) and reading them back;
//! - [`phase1`]: `commit` under the session's TREE lock — record the exact bytes archived in
//!   `.meta.json`, write `history/archive_NNN/messages.jsonl`, enqueue the `session_commit` job,
//!   cut exactly those bytes from the live file in place ([`trim`]), mark the archive ready —
//!   and the recovery that finishes a phase 1 a crash interrupted;
//! - [`phase2`]: the `session_commit` job handler (summary, memories, `memory_diff.json`,
//!   `.done` last), resumable at every step;
//! - [`rollback`]: taking exactly one commit's memory facts out again.
//!
//! Invariant: every byte appended to the live file is, at every moment, either still in the
//! live file or in exactly one archive — or named by a pending commit in `.meta.json` that
//! recovery (the next commit, the job, an append, `vikingfs wait`) turns into one of the two.

pub mod fsx;
pub mod layout;
pub mod messages;
pub mod meta;
pub mod phase1;
pub mod phase2;
pub mod report;
pub mod rollback;
pub mod trim;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::index::IndexError;
use crate::lock::{LockError, LockGuard, LockKind};
use crate::ops::{Light, Ops};
use crate::queue::QueueError;
use crate::uri::{UriError, VPath};
use crate::workspace::Workspace;

pub use layout::SessionPath;
pub use phase1::{CommitReport, RecoverAll};
pub use phase2::{handler_spec, SessionCommitHandler};

/// How long a commit or an append waits for the session's lock (OpenViking waits 30 s).
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Uri(#[from] UriError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("index")]
    Index(#[source] IndexError),
    #[error("{0:?} names no session (expected SID, viking://session/SID or viking://user/UID/sessions/SID)")]
    NotASession(String),
    #[error("session {0} does not exist")]
    NoSuchSession(String),
    #[error("not a valid message: {0}")]
    BadMessage(String),
    #[error("{}: unreadable session metadata", path.display())]
    Meta {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: session metadata: {reason}", path.display())]
    MetaIncomplete { path: PathBuf, reason: &'static str },
    /// A pending commit's record no longer matches the files: nothing is touched, so that a
    /// person can look (no byte is ever dropped on a guess).
    #[error("{path}: {reason}; left untouched, inspect .meta.json's pending_commit")]
    Diverged { path: PathBuf, reason: String },
    /// A symbolic link where a session's file or directory (or a memory it writes) should be:
    /// never followed (see [`fsx`]), so a link made through the mount cannot lead a session's
    /// reads or writes out of the workspace or into another user's tree.
    #[error("{0} is a symbolic link, which sessions do not follow")]
    Link(String),
    /// A rollback that cannot be done as asked (the reason says what to do).
    #[error("{0}")]
    Rollback(String),
}

impl SessionError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        SessionError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether waiting may help (a busy lock).
    pub fn is_busy(&self) -> bool {
        matches!(self, SessionError::Lock(LockError::Busy { .. }))
    }
}

/// What every session operation works with: the files, and through `ops` their locks and
/// the durable queue ([`Light`]) and — for the commands that index — the whole engine, so that
/// a commit can drop the live file's record before cutting text out of it.
#[derive(Clone)]
pub struct Sessions {
    pub ws: Workspace,
    light: Light,
    ops: Option<Arc<Ops>>,
}

impl Sessions {
    /// Sessions without the index (appending and reading need none).
    pub fn new(ws: Workspace, light: Light) -> Sessions {
        Sessions {
            ws,
            light,
            ops: None,
        }
    }

    /// Sessions sharing an operations engine's workspace, locks, queue and index.
    pub fn from_ops(ops: &Arc<Ops>) -> Sessions {
        Sessions {
            ws: ops.workspace().clone(),
            light: ops.light(),
            ops: Some(ops.clone()),
        }
    }

    /// Drop the index records of `p` (records first: a search misses the file until its job
    /// re-indexes it, rather than naming it for text it no longer holds). Without an index
    /// at hand, the queued embedding job replaces the record a little later.
    fn forget_records(&self, p: &VPath) -> Result<(), SessionError> {
        if let Some(ops) = &self.ops {
            ops.forget_records(p).map_err(SessionError::Index)?;
        }
        Ok(())
    }

    /// Files changed: queue their embeddings and their directories' summaries, as the
    /// operations' write path does (one transaction; pending jobs of the same keys coalesce).
    pub fn notify_written(&self, files: &[VPath]) -> Result<(), SessionError> {
        Ok(self.light.files_written(files)?)
    }

    /// Files changed in a directory whose summary this module writes itself (an archive):
    /// queue their embeddings only.
    pub fn notify_written_quiet(&self, files: &[VPath]) -> Result<(), SessionError> {
        Ok(self.light.files_written_quiet(files)?)
    }

    /// Directories whose summaries must be regenerated.
    pub fn notify_dirs(&self, dirs: &[VPath]) -> Result<(), SessionError> {
        Ok(self.light.dirs_changed(dirs)?)
    }

    /// Take `reqs` together, waiting up to [`LOCK_WAIT`].
    pub(crate) fn lock(&self, reqs: &[(VPath, LockKind)]) -> Result<LockGuard, LockError> {
        self.light.lock(reqs, LOCK_WAIT)
    }

    /// Bring the dead phase 2 jobs back to life (one superseded by a job queued since goes).
    pub fn retry_dead_commits(&self) -> Result<usize, SessionError> {
        Ok(self.light.retry_dead(crate::queue::SESSION_COMMIT)?)
    }

    /// The session's TREE lock: excludes every append (EXACT on `messages.jsonl`) and every
    /// other commit of the session.
    fn lock_tree(&self, s: &SessionPath) -> Result<LockGuard, SessionError> {
        Ok(self.lock(&[(s.dir.clone(), LockKind::Tree)])?)
    }
}
