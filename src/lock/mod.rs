//! Path locks, shared on disk with OpenViking (see `shared/design/openviking-compat.md`).
//!
//! This module owns the lock engine: which file a lock lives in ([`resolver`]), what a token says
//! and whose it is ([`codec`]), how a token is created, rewritten and removed safely
//! ([`provider`]), and the semantics on top — the conflict table, waiting, batches, refresh
//! ([`manager`]). Everything above (ops, fuse, cli) only sees [`LockManager`] and [`LockGuard`].
//!
//! Every system call on a lock file names it relative to a descriptor of the data root (or of
//! the directory a walk is in), never by absolute path: a lock file's path is longer than its
//! file's, and the absolute one longer still, so a path near PATH_MAX through the mount must
//! still be lockable ([`crate::sys::DataRoot`] walks a relative path of PATH_MAX or more in chunks).
//!
//! Conflict table (`—` = no conflict):
//!
//! | held \ wanted   | EXACT same | TREE same | EXACT below | TREE above |
//! |-----------------|------------|-----------|-------------|------------|
//! | EXACT           | conflict   | conflict  | —           | conflict   |
//! | TREE            | conflict   | conflict  | conflict    | conflict   |

pub mod codec;
mod engine;
pub mod manager;
mod pool;
pub mod provider;
pub mod resolver;
mod table;
mod walk;

use std::io;
use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;

use crate::uri::VPath;

pub use manager::{without_waiting, LockGuard, LockManager};

/// The two lock kinds of OpenViking's design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    /// One concrete path (a file, a directory's name, a path not created yet).
    Exact,
    /// A whole subtree, written as one lock file at its root.
    Tree,
}

impl LockKind {
    /// The letter written in the token.
    pub fn letter(self) -> char {
        match self {
            LockKind::Exact => 'E',
            LockKind::Tree => 'T',
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Exact => "exact",
            LockKind::Tree => "tree",
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The design's locks for a move, the one place the rule is written: a directory takes TREE
/// on the source, a file EXACT; the destination EXACT (never a TREE on its parent: OpenViking
/// #4718, where that made every move into a busy directory fail).
pub fn mv_batch(src: &VPath, dst: &VPath, src_is_dir: bool) -> [(VPath, LockKind); 2] {
    let src_kind = if src_is_dir {
        LockKind::Tree
    } else {
        LockKind::Exact
    };
    [(src.clone(), src_kind), (dst.clone(), LockKind::Exact)]
}

/// Whether a lock `a` of kind `ka` and a lock `b` of kind `kb` exclude each other (the design's
/// table): the same path always; a path below another only when the upper one is a TREE.
pub fn conflicts(a: &VPath, ka: LockKind, b: &VPath, kb: LockKind) -> bool {
    if a == b {
        return true;
    }
    (a.starts_with(b) && kb == LockKind::Tree) || (b.starts_with(a) && ka == LockKind::Tree)
}

#[derive(Debug, Error)]
pub enum LockError {
    /// Another holder keeps a conflicting lock (after waiting up to the timeout).
    #[error("{path} is busy: held ({kind}) by {owner}")]
    Busy {
        /// URI of the conflicting lock.
        path: String,
        kind: LockKind,
        owner: String,
    },
    /// A lock file whose content is not a token. It is never treated as free nor deleted.
    #[error("corrupt lock token in {file}: {content:?} (once its owner is known to be gone: vikingfs fsck --repair --break-corrupt-locks)")]
    CorruptToken { file: PathBuf, content: String },
    /// A lock was asked on a path below a regular file.
    #[error("{path} is not a directory, nothing can be locked below it")]
    NotADirectory { path: String },
    /// The directory the lock file goes in is gone, and this lock may not create it
    /// ([`LockManager::acquire_existing`]): the path was removed meanwhile.
    #[error("{path}: its directory is gone")]
    Gone { path: String },
    /// A lock this guard held was taken away (it had not been refreshed in time).
    #[error("lock file {file} no longer holds our token")]
    Lost { file: PathBuf },
    #[error("lock file {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl LockError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        LockError::Io {
            path: path.into(),
            source,
        }
    }
}

/// One lock file found on disk, as `vikingfs locks` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct LockInfo {
    /// URI of the locked path.
    pub uri: String,
    /// The lock file.
    #[serde(skip)]
    pub file: PathBuf,
    pub kind: LockKind,
    /// Owner field of the token (empty when the file is empty or corrupt).
    pub owner: String,
    /// Seconds since the token was written or refreshed.
    pub age_secs: f64,
    pub stale: bool,
    /// Why the lock is stale, or why it is not usable (corrupt token).
    pub stale_reason: Option<String>,
}
