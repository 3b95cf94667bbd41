//! Errors of the queue layer, and the verdict a handler gives on a failed job.

use std::path::PathBuf;

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
    #[error("invalid queue name {0:?} (want 1-64 characters of [a-z0-9_])")]
    BadQueueName(String),
    #[error("job {id} payload")]
    Payload {
        id: i64,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "job {id} is no longer claimed by this worker (its lease ran out and it was handed on)"
    )]
    NotClaimed { id: i64 },
}

/// A handler's verdict on a job it could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// Transient (network, busy lock): retry after a back-off, until the attempt limit.
    Retry(String),
    /// Will never succeed (bad payload, source gone for good): dead at once.
    Permanent(String),
    /// Cannot succeed until something outside the job changes (a full disk): retried after
    /// the longest back-off, without using up an attempt, so it is never dead-lettered.
    Wait(String),
}

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
    pub fn message(&self) -> &str {
        match self {
            JobError::Retry(m) | JobError::Permanent(m) | JobError::Wait(m) => m,
        }
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

impl std::error::Error for JobError {}
