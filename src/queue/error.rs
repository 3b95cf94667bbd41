//! Errors of the queue layer, and the verdict a handler gives on a failed job.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::Level;

/// Why a queue operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue database {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("queue database {path} has schema version {found}, newer than this vikingfs understands ({supported})")]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("queue spool {}", .0.display())]
    Spool(std::path::PathBuf, #[source] std::io::Error),
    #[error("queue database")]
    Sql(#[from] rusqlite::Error),
    #[error("queue database")]
    Pg(#[from] crate::pg::PgError),
    #[error("invalid queue name {0:?} (want 1-64 characters of [a-z0-9_])")]
    BadQueueName(String),
    #[error(
        "job {id} is no longer claimed by this worker (its lease ran out and it was handed on)"
    )]
    NotClaimed { id: i64 },
}

/// A handler's verdict on a job it could not finish, with what made it fail.
#[derive(Debug, Clone)]
pub enum JobError {
    /// Transient (network, busy lock): retry after a back-off, until the attempt limit.
    Retry(Cause),
    /// Will never succeed (bad payload, source gone for good): dead at once.
    Permanent(Cause),
    /// Cannot succeed until something outside the job changes (a full disk): retried after
    /// the longest back-off, without using up an attempt, so it is never dead-lettered.
    Wait(Cause),
}

/// What made a job fail: the error itself, causes and all (its one line is what the queue
/// keeps as the job's `last_error`), and the level of the log line of the failure, which the
/// handler that knows the error decides (a busy lock is info, a damaged index an error).
#[derive(Debug, Clone)]
pub struct Cause {
    error: Arc<dyn std::error::Error + Send + Sync>,
    level: Level,
}

impl Cause {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static, level: Level) -> Cause {
        Cause {
            error: Arc::new(error),
            level,
        }
    }

    /// A failure that is only a message (no error behind it).
    pub fn message(msg: impl Into<String>, level: Level) -> Cause {
        Cause::new(Message(msg.into()), level)
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn error(&self) -> &(dyn std::error::Error + 'static) {
        &*self.error
    }
}

/// A handler's own message: a warning.
impl From<String> for Cause {
    fn from(msg: String) -> Cause {
        Cause::message(msg, Level::WARN)
    }
}

impl From<&str> for Cause {
    fn from(msg: &str) -> Cause {
        Cause::message(msg, Level::WARN)
    }
}

/// The error and its causes on one line.
impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::error::Chain(self.error()).fmt(f)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

impl QueueError {
    /// The disk (or the quota) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            QueueError::Open { source, .. } | QueueError::Sql(source) => {
                crate::db::is_disk_full(source)
            }
            QueueError::Spool(_, e) => {
                matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            }
            _ => false,
        }
    }
}

impl JobError {
    pub fn cause(&self) -> &Cause {
        match self {
            JobError::Retry(c) | JobError::Permanent(c) | JobError::Wait(c) => c,
        }
    }

    /// The failure on one line, as the queue keeps it.
    pub fn message(&self) -> String {
        self.cause().to_string()
    }

    /// The level of the failure's log line.
    pub fn level(&self) -> Level {
        self.cause().level()
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Retry(m) => write!(f, "retryable: {m}"),
            JobError::Permanent(m) => write!(f, "permanent: {m}"),
            JobError::Wait(m) => write!(f, "waiting: {m}"),
        }
    }
}

/// A verdict, already told on one line with its causes: it has no source of its own.
impl std::error::Error for JobError {}
