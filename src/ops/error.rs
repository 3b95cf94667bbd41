//! Why a locked operation failed ([`OpsError`]), and the errno and log level of each failure
//! the mount can meet: the operations' own, and those of the stores under them (locks, index,
//! queue, SQLite), which are mapped here, the one layer that looks down on both the stores
//! and the filesystem core's [`ToErrno`].

use std::io;
use std::path::PathBuf;

use thiserror::Error;
use tracing::Level;

use crate::embed::EmbedError;
use crate::errno::{level_of, ToErrno};
use crate::index::IndexError;
use crate::lock::LockError;
use crate::queue::QueueError;
use crate::semantic::chat::ChatError;

pub type Result<T, E = OpsError> = std::result::Result<T, E>;

/// Why an operation failed. Each message is one line naming the problem; a variant that
/// wraps another error keeps it as its source (printed after it by [`crate::error::Chain`]).
#[derive(Debug, Error)]
pub enum OpsError {
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// A `find` query whose syntax says something impossible (a `path:` that is no glob).
    #[error("{0}")]
    BadQuery(String),
    #[error("{0}: already exists")]
    Exists(String),
    /// A checked write whose target is not what the caller expected (another version, a
    /// directory in its way): nothing was written.
    #[error("{0}")]
    Conflict(String),
    #[error("{0} is a directory (use -r to remove a directory)")]
    IsADirectory(String),
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("{0} is not empty")]
    NotEmpty(String),
    #[error("cannot move {src} into itself ({dst})")]
    IntoItself { src: String, dst: String },
    /// Swapping two trees (RENAME_EXCHANGE) has no crash-safe order for their records.
    #[error("{0}: exchanging two paths is not supported")]
    Exchange(String),
    #[error("{0} is a scope root and cannot be removed, moved or replaced")]
    ScopeRoot(String),
    #[error("{0} is a derived summary file, written only by vikingfs")]
    Derived(String),
    #[error("{}: {msg}", path.display())]
    BadSource { path: PathBuf, msg: String },
    /// A file of a source being added whose name the namespace refuses.
    #[error("{}", path.display())]
    SourceName {
        path: PathBuf,
        #[source]
        source: crate::uri::UriError,
    },
    /// A lock stayed busy (or holds a corrupt token, which is never taken as free); the lock
    /// error names the path and the holder.
    #[error(transparent)]
    Busy(LockError),
    #[error(transparent)]
    Lock(LockError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("summariser")]
    Summarizer(#[source] ChatError),
    #[error("operations journal")]
    Journal(#[from] crate::journal::JournalError),
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Uri(#[from] crate::uri::UriError),
    /// A one-shot command whose configured model is not the one the index was built with:
    /// opening it would drop or remake every vector of the workspace because of this
    /// command's environment ([`super::stores::Model::AsBuilt`]).
    #[error(
        "the index was built with model {stored}, this command's configuration names \
         {configured}: run it with the configuration the index was built with (the daemon's), \
         or `vikingfs reindex` to re-derive it with {configured}"
    )]
    BuiltWith { stored: String, configured: String },
    /// A one-shot command whose configured storage backend is not the one the workspace's
    /// stores are on: it would start empty stores of its own beside them.
    #[error(
        "the workspace's stores are on {stored} ({why}), this command's configuration names \
         {configured} (storage.backend): run it with the workspace's configuration"
    )]
    BuiltOn {
        stored: &'static str,
        configured: &'static str,
        why: String,
    },
    /// A damaged store another live process (a daemon) has open: moving it aside under that
    /// process would split its writes from everyone else's reads.
    #[error(
        "{store} {} is damaged ({why}), but the daemon (pid {pid}) has it open: restart it \
         (vikingfs umount, then mount) and it rebuilds the {store} from the files",
        path.display()
    )]
    DamagedInUse {
        store: &'static str,
        path: PathBuf,
        why: String,
        pid: u32,
    },
}

impl From<LockError> for OpsError {
    fn from(e: LockError) -> Self {
        match &e {
            LockError::Busy { .. } => OpsError::Busy(e),
            // A lock file that is not a token is never taken as free: the path stays busy
            // (EBUSY, exit 75) until `fsck --repair --break-corrupt-locks` or its owner clears it.
            LockError::CorruptToken { .. } => {
                tracing::warn!("{e}");
                OpsError::Busy(e)
            }
            _ => OpsError::Lock(e),
        }
    }
}

impl OpsError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        OpsError::Io {
            path: path.into(),
            source,
        }
    }

    /// A lock stayed busy: the CLI exits 75, the mount answers EBUSY, a job retries.
    pub fn is_busy(&self) -> bool {
        matches!(self, OpsError::Busy(..))
    }
}

impl ToErrno for OpsError {
    fn errno(&self) -> i32 {
        match self {
            OpsError::NotFound(_) => libc::ENOENT,
            OpsError::Exists(_) => libc::EEXIST,
            OpsError::Conflict(_) => libc::ESTALE,
            OpsError::IsADirectory(_) => libc::EISDIR,
            OpsError::NotADirectory(_) => libc::ENOTDIR,
            OpsError::NotEmpty(_) => libc::ENOTEMPTY,
            OpsError::IntoItself { .. } | OpsError::Exchange(_) | OpsError::BadQuery(_) => {
                libc::EINVAL
            }
            OpsError::ScopeRoot(_) | OpsError::Derived(_) => libc::EPERM,
            OpsError::Busy(e) | OpsError::Lock(e) => e.errno(),
            OpsError::Queue(e) => e.errno(),
            OpsError::Index(e) => e.errno(),
            OpsError::Journal(e) => e.errno(),
            OpsError::Io { source, .. } => source.errno(),
            OpsError::Uri(e) | OpsError::SourceName { source: e, .. } => e.errno(),
            // The model, the summariser, a source outside the workspace, a store another
            // process must heal: nothing the program did.
            OpsError::Embed(_)
            | OpsError::Summarizer(_)
            | OpsError::BadSource { .. }
            | OpsError::DamagedInUse { .. } => libc::EIO,
            // Refused before anything changed.
            OpsError::BuiltWith { .. } | OpsError::BuiltOn { .. } => libc::EINVAL,
        }
    }

    fn level(&self) -> Level {
        match self {
            OpsError::Busy(e) | OpsError::Lock(e) => e.level(),
            OpsError::Queue(e) => e.level(),
            OpsError::Index(e) => e.level(),
            OpsError::Journal(e) => e.level(),
            OpsError::DamagedInUse { .. } => Level::ERROR,
            _ => level_of(self.errno()),
        }
    }
}

impl ToErrno for LockError {
    fn errno(&self) -> i32 {
        match self {
            LockError::Busy { .. } | LockError::CorruptToken { .. } => libc::EBUSY,
            LockError::NotADirectory { .. } => libc::ENOTDIR,
            LockError::Gone { .. } => libc::ENOENT,
            LockError::Lost { .. } => libc::EIO,
            LockError::Io { source, .. } => source.errno(),
        }
    }
}

impl ToErrno for IndexError {
    fn errno(&self) -> i32 {
        match self {
            IndexError::Sqlite { source, .. } => source.errno(),
            IndexError::RenameIntoSelf { .. } => libc::EINVAL,
            IndexError::Server(e) => e.errno(),
            IndexError::NoVectorExtension { .. }
            | IndexError::ModelMismatch { .. }
            | IndexError::Schema { .. }
            | IndexError::Dimension { .. }
            | IndexError::Corrupt { .. }
            | IndexError::CorruptUri { .. } => libc::EIO,
        }
    }

    fn level(&self) -> Level {
        if self.is_damage() {
            return Level::ERROR;
        }
        level_of(self.errno())
    }
}

impl ToErrno for QueueError {
    fn errno(&self) -> i32 {
        match self {
            QueueError::Open { source, .. } | QueueError::Sql(source) => source.errno(),
            QueueError::Spool(_, source) => source.errno(),
            QueueError::Pg(source) => source.errno(),
            QueueError::SchemaTooNew { .. }
            | QueueError::BadQueueName(_)
            | QueueError::NotClaimed { .. } => libc::EIO,
        }
    }

    fn level(&self) -> Level {
        match self {
            QueueError::Open { source, .. } | QueueError::Sql(source) => source.level(),
            _ => level_of(self.errno()),
        }
    }
}

impl ToErrno for crate::journal::JournalError {
    fn errno(&self) -> i32 {
        match self {
            crate::journal::JournalError::Sqlite(e) => e.errno(),
            crate::journal::JournalError::Pg(e) => e.errno(),
            crate::journal::JournalError::Spool(_, e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    fn level(&self) -> Level {
        match self {
            crate::journal::JournalError::Sqlite(e) => e.level(),
            crate::journal::JournalError::Pg(e) => e.level(),
            crate::journal::JournalError::Spool(_, e) => {
                crate::errno::level_of(e.raw_os_error().unwrap_or(libc::EIO))
            }
        }
    }
}

/// A server that cannot be reached, refused a statement or holds another workspace's
/// stores: the request fails with EIO (the server's own log says more), at warning level.
impl ToErrno for crate::pg::PgError {
    fn errno(&self) -> i32 {
        libc::EIO
    }
}

/// A full disk is ENOSPC, never EIO: a lock file, a journal row or an index page that found
/// no room. A damaged database is an error: the store is moved aside and rebuilt.
impl ToErrno for rusqlite::Error {
    fn errno(&self) -> i32 {
        if crate::db::is_disk_full(self) {
            libc::ENOSPC
        } else {
            libc::EIO
        }
    }

    fn level(&self) -> Level {
        if crate::db::is_damage_code(self) {
            return Level::ERROR;
        }
        level_of(self.errno())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn each_store_decides_its_errno_and_level() {
        let full = OpsError::Journal(sql(rusqlite::ffi::SQLITE_FULL).into());
        assert_eq!(full.errno(), libc::ENOSPC);
        assert!(full.is_disk_full());
        assert_eq!(full.level(), Level::WARN);
        let damaged = OpsError::Index(IndexError::Sqlite {
            path: "/x/index.db".into(),
            source: sql(rusqlite::ffi::SQLITE_CORRUPT),
        });
        assert_eq!(damaged.errno(), libc::EIO);
        assert_eq!(damaged.level(), Level::ERROR);
        let quota = OpsError::io("/x", io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(quota.is_disk_full());
        let busy = OpsError::from(LockError::Busy {
            path: "viking://resources/a".into(),
            kind: crate::lock::LockKind::Exact,
            owner: "someone".into(),
        });
        assert!(busy.is_busy());
        assert_eq!(busy.errno(), libc::EBUSY);
        assert_eq!(busy.level(), Level::INFO);
        assert_eq!(OpsError::NotEmpty("d".into()).level(), Level::DEBUG);
        assert_eq!(OpsError::Exchange("a".into()).errno(), libc::EINVAL);
    }
}
