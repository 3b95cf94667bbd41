//! [`Light`]: the part of [`Ops`] that takes path locks and queues derived work, opened
//! without the index, the journal or recovery, for faces whose commands only lock, write
//! files and queue jobs (a session's append, list and show). A face reaches the queue and the
//! lock manager through this (or through [`Ops::light`]), never by itself.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::lock::{LockError, LockGuard, LockKind, LockManager};
use crate::queue::{Queue, QueueError};
use crate::uri::VPath;
use crate::workspace::Workspace;

use super::jobs::{embed_job, semantic_job, NewJob};
use super::{Ops, Result};

/// A workspace's path locks and job queue (cheap to clone: both are shared handles).
#[derive(Clone)]
pub struct Light {
    locks: Arc<LockManager>,
    queue: Queue,
}

impl Light {
    /// The locks and the queue of `ws` as `config` says (the queue where `storage.backend`
    /// keeps it), and nothing else.
    pub fn open(ws: &Workspace, config: &Config) -> Result<Light> {
        Ok(Light {
            locks: LockManager::new(ws, config.lock.clone())?,
            queue: super::open_queue_of(ws, &config.backend)?,
        })
    }

    /// Take `reqs` (each path with its kind) together, waiting up to `wait` for a holder.
    pub fn lock(
        &self,
        reqs: &[(VPath, LockKind)],
        wait: Duration,
    ) -> std::result::Result<LockGuard, LockError> {
        self.locks.acquire(reqs, wait)
    }

    /// Files changed: queue their embeddings and their directories' summaries, in one
    /// transaction (pending jobs of the same keys coalesce).
    pub fn files_written(&self, files: &[VPath]) -> std::result::Result<(), QueueError> {
        let mut jobs: Vec<NewJob> = files.iter().map(|f| embed_job(f, None)).collect();
        let mut dirs: Vec<VPath> = files.iter().filter_map(VPath::parent).collect();
        dirs.sort();
        dirs.dedup();
        jobs.extend(
            dirs.iter()
                .filter(|d| !d.is_root())
                .map(|d| semantic_job(d, None)),
        );
        self.queue.enqueue_many(&jobs)
    }

    /// Files changed in a directory whose summary the caller writes itself: queue their
    /// embeddings only.
    pub fn files_written_quiet(&self, files: &[VPath]) -> std::result::Result<(), QueueError> {
        let jobs: Vec<NewJob> = files.iter().map(|f| embed_job(f, None)).collect();
        self.queue.enqueue_many(&jobs)
    }

    /// Directories whose summaries must be regenerated.
    pub fn dirs_changed(&self, dirs: &[VPath]) -> std::result::Result<(), QueueError> {
        let jobs: Vec<NewJob> = dirs.iter().map(|d| semantic_job(d, None)).collect();
        self.queue.enqueue_many(&jobs)
    }

    /// Queue one job of `queue` (keyed by `key`, so a pending repeat coalesces); its id.
    pub fn enqueue(
        &self,
        queue: &str,
        key: Option<&str>,
        payload: &serde_json::Value,
    ) -> std::result::Result<i64, QueueError> {
        self.queue.enqueue(queue, key, payload)
    }

    /// Bring the dead jobs of `queue` back to life (a superseded one goes).
    pub fn retry_dead(&self, queue: &str) -> std::result::Result<usize, QueueError> {
        self.queue.retry_dead(Some(queue))
    }
}

impl Ops {
    /// This engine's locks and queue as a [`Light`].
    pub fn light(&self) -> Light {
        Light {
            locks: self.locks.clone(),
            queue: self.queue.clone(),
        }
    }
}
